"""The matrix's cache of releases: a release's target files and RECORD, kept without its wheel.

`vpatch matrix` walks many releases of 300-500 MB wheels for a ~40 KB file each, so only the
files a decision needs and the wheel's RECORD are extracted, and a wheel pip had to download
for this is dropped at once (`Store.read`). RECORD lists every file of the wheel, so a file
another spec asks for later that the wheel does not have is known to be missing without a
second download. Every cached file is checked on read: the cache's directories and files must
be the user's own and not group/other-writable (`trust`), and a file must have the sha256 the
release's RECORD lists.

Root: $VPATCH_MATRIX_CACHE, else $XDG_CACHE_HOME/vpatch/matrix, else ~/.cache/vpatch/matrix:
`<root>/<package>/<version>/{manifest.json,RECORD,files/<rel>}` (`<root>/results/` holds the
matrix's decisions, `patcher.wheels.matrix.Decisions`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from packaging.utils import canonicalize_name
from packaging.version import Version

from patcher.wheels import trust
from patcher.wheels.store import Counters, Store
from patcher.wheels.wheel import record_entry, record_files


def default_cache() -> Path:
    """The cache's root: $VPATCH_MATRIX_CACHE, else the user's cache dir's vpatch/matrix."""
    return trust.cache_dir("VPATCH_MATRIX_CACHE", "matrix")


@dataclass
class Extracted:
    """What the cache keeps of one release: target files (None = not in the wheel) + RECORD."""

    wheel: str
    record: str
    files: dict[str, bytes | None]


def read_checked(path: Path) -> bytes:
    """A cache file's bytes, opened without following links; it and its directory must be the
    user's own and not group/other-writable (`trust.UnsafeStore` otherwise)."""
    trust.check_stat(os.lstat(path.parent), path.parent, "dir")
    fh, _st = trust.open_checked(path)
    with fh:
        return fh.read()


class Cache:
    """The extracted files of one package's releases, under `<root>/<package>/<version>/`."""

    def __init__(self, root: Path, package: str) -> None:
        self.root = root
        self.dir = root / canonicalize_name(package)

    def release_dir(self, version: Version) -> Path:
        """The directory of one release's entry."""
        return self.dir / str(version)

    def lookup(self, version: Version, rel: str) -> tuple[bool, bytes | None]:
        """(known, bytes): known is False when only the wheel can tell. A file is checked
        against the release's RECORD (not only the manifest beside it) on every read; one that
        fails a check is not known (the wheel is read again)."""
        d = self.release_dir(version)
        try:
            manifest = json.loads(read_checked(d / "manifest.json"))
            record = read_checked(d / "RECORD").decode("utf-8")
        except (OSError, ValueError, trust.UnsafeStore):
            return False, None
        in_record, want = record_entry(record, rel)
        files: dict[str, str | None] = manifest.get("files", {})
        if rel in files:
            if files[rel] is None:
                return not in_record, None
            try:
                data = read_checked(d / "files" / rel)
            except (OSError, trust.UnsafeStore):
                return False, None
            if want is None or hashlib.sha256(data).hexdigest() != want:
                return False, None
            return True, data
        if not in_record and record_files(record):
            return True, None  # RECORD lists every file of the wheel: no need to fetch it
        return False, None

    def known_rels(self, version: Version) -> list[str]:
        """The files the release's entry holds (or knows to be missing); [] without one."""
        try:
            manifest = json.loads((self.release_dir(version) / "manifest.json").read_text())
        except (OSError, ValueError):
            return []
        return list(manifest.get("files", {}))

    def store(self, version: Version, got: Extracted) -> None:
        """Write the release's entry in a temp dir, then swap it in (readers never see half)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=self.dir))
        tmp.chmod(0o755)  # mkdtemp makes it 0700; a shared cache must stay readable
        for rel, data in got.files.items():
            if data is not None:
                path = tmp / "files" / rel
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                path.write_bytes(data)
                path.chmod(0o644)  # whatever the umask: a group-writable entry is refused
        (tmp / "RECORD").write_text(got.record)
        (tmp / "RECORD").chmod(0o644)
        hashes = {
            rel: None if d is None else hashlib.sha256(d).hexdigest()
            for rel, d in got.files.items()
        }
        manifest = {"wheel": got.wheel, "files": hashes}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        (tmp / "manifest.json").chmod(0o644)
        final = self.release_dir(version)
        old = None
        if final.exists():
            old = self.dir / f".old-{version}-{os.getpid()}-{threading.get_ident()}"
            final.rename(old)
        tmp.rename(final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    @contextmanager
    def locked(self, version: Version) -> Iterator[None]:
        """Yields once this process holds the release's lock: one fetch per release across
        processes (two matrix runs must not download twice)."""
        locks = self.dir / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        # never through a link planted at the name (plain open("w") truncated its target)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(locks / f"{version}.lock", flags, 0o644)
        with os.fdopen(fd, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield


class Watcher(Protocol):
    """Told when a release's wheel is about to be read (the matrix's progress bar)."""

    def fetching(self, version: Version) -> None: ...


class _Silent:
    def fetching(self, version: Version) -> None:
        return None


@dataclass
class FetchStats(Counters):
    """Where the files came from: proof that a second run downloads nothing."""

    downloaded: int = 0
    reused_wheels: int = 0
    cached_files: int = 0


@dataclass
class Fetcher:
    """A release's files as its wheel ships them: from the cache, else from the wheel store
    (`patcher.wheels.store`), then cached."""

    package: str
    cache: Cache
    store: Store
    progress: Watcher = field(default_factory=_Silent)
    stats: FetchStats = field(default_factory=FetchStats)

    def file(self, version: Version, rel: str) -> bytes | None:
        """The file's bytes in the release's wheel; None when the wheel has no such file."""
        known, data = self.cache.lookup(version, rel)
        if known:
            self.stats.add("cached_files")
            return data
        with self.cache.locked(version):
            known, data = self.cache.lookup(version, rel)  # another process fetched it meanwhile
            if known:
                self.stats.add("cached_files")
                return data
            rels = sorted({*self.cache.known_rels(version), rel})
            got = self.fetch(version, rels)
            self.cache.store(version, got)
            return got.files[rel]

    def fetch(self, version: Version, rels: Sequence[str]) -> Extracted:
        """The files and RECORD from the store's wheel (a download pip makes is dropped)."""
        self.progress.fetching(version)
        origin, record, files = self.store.read(self.package, version, rels)
        self.stats.add("downloaded" if origin in ("pip", "index") else "reused_wheels")
        return Extracted(f"{self.package}-{version}", record, files)
