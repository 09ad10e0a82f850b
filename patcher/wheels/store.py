"""The wheel store: pip's wheel of a release, fetched at most once per machine, read with checks.

`vpatch diff`, `capture`, `backport`, `apply --adopt`, `wheel` and `matrix` need the bytes pip
installed for a file of one release. They all get them here, from the first source that has
the release's wheel:

1. wheelhouses (`patcher.wheels.wheelhouse`): `--wheelhouse DIR|FILE` (repeatable) and
   `$VPATCH_WHEELHOUSE` (os.pathsep separated): for air-gapped fleets; a release found there
   costs no network at all;
2. `$VPATCH_MATRIX_WHEELS` directories (e.g. a test suite's wheel cache), used in place;
3. the store itself: `<root>/blobs/<sha256>.whl`, named by its content, and
   `<root>/releases/<name>/<version>.json` pointing at it;
4. the configured index: only the members needed by HTTP ranges (`patcher.wheels.remote`),
   else the whole wheel by vpatch's index client (`patcher.wheels.indexclient`; pip,
   `patcher.wheels.index`, only under $VPATCH_PIP or a pip-only setting), once, under a
   per-release lock, so concurrent commands share one download; the
   wheel is then moved into the store (or, for the matrix, which walks many releases of
   300-500 MB wheels, read and dropped: `keep=False`).

Nothing is used unchecked (issue 24: a poisoned pristine side would hide a host's edit): the
store's directories and files must be the user's own and not writable by group or others
(`patcher.wheels.trust`; else the store is refused, with a hint), a stored wheel must hash to
its name (re-hashed whenever its inode, size, mtime or ctime differ from when it was last
checked), and every file read from any wheel must have the sha256 its RECORD lists
(`patcher.wheels.wheel`). A wheel that fails a check is dropped from the store and fetched
again.

Root: `$VPATCH_WHEEL_STORE`, else `$XDG_CACHE_HOME/vpatch/wheels`, else `~/.cache/vpatch/wheels`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packaging.utils import canonicalize_name
from packaging.version import Version

from patcher.errors import VpatchError
from patcher.output.lines import put
from patcher.output.progress import busy, quiet
from patcher.wheels import index, indexclient, pipconf, remote, trust, wheelhouse
from patcher.wheels.trust import UnsafeStore, atomic_write, open_checked, safe_dir
from patcher.wheels.wheel import CorruptWheel, Wheel

# Files kept from ranged reads (`Store._keep_member`): each at most this big (a source file;
# the rest comes from the index again), the release's pointer at most this many bytes.
MAX_MEMBER = 16 * 1024 * 1024
MAX_MEMBERS_POINTER = 1024 * 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")


def default_root() -> Path:
    """The store's root: $VPATCH_WHEEL_STORE, else the user's cache dir's vpatch/wheels."""
    return trust.cache_dir("VPATCH_WHEEL_STORE", "wheels")


# ---------------------------------------------------------------------------------------------
# Progress


class DownloadProgress:
    """Silent by default; StderrProgress is the CLI's (rich on a terminal, else one line)."""

    def fetching(self, what: str) -> None: ...
    def advance(self, what: str, done: int, total: int) -> None: ...
    def fetched(self, what: str) -> None: ...


class StderrProgress(DownloadProgress):
    """A rich bar on a terminal; on a pipe, one line when a download outlasts a second."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bars: dict[str, Any] = {}
        self.started: dict[str, float] = {}
        self.said: set[str] = set()
        self.live: Any = None

    def fetching(self, what: str) -> None:
        with self.lock:
            self.started[what] = time.monotonic()

    def advance(self, what: str, done: int, total: int) -> None:
        with self.lock:
            if time.monotonic() - self.started.get(what, 0.0) < 1.0 or quiet():
                return
            size = f" {done / 1e6:.0f}/{total / 1e6:.0f} MB" if total else ""
            if self.live is None and busy(f"downloading {what}{size}"):
                return  # a command's live line is drawn: the download says itself there
            if not sys.stderr.isatty():
                if what not in self.said:
                    self.said.add(what)
                    size = f" ({total / 1e6:.0f} MB)" if total else ""
                    put(f"vpatch: downloading {what}{size}", sys.stderr)
                return
            if self.live is None:
                from rich.console import Console
                from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

                self.live = Progress(
                    *Progress.get_default_columns(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    console=Console(file=sys.stderr),
                    transient=True,
                )
                self.live.start()
            if what not in self.bars:
                self.bars[what] = self.live.add_task(f"downloading {what}", total=total or None)
            self.live.update(self.bars[what], completed=done, total=total or None)

    def fetched(self, what: str) -> None:
        with self.lock:
            task = self.bars.pop(what, None)
            if task is not None and self.live is not None:
                self.live.remove_task(task)
            if not self.bars and self.live is not None:
                self.live.stop()
                self.live = None


def progress_for(silent: bool) -> DownloadProgress:
    """A silent progress under --json, else StderrProgress."""
    return DownloadProgress() if silent else StderrProgress()


# ---------------------------------------------------------------------------------------------
# The store


@dataclass
class Counters:
    """Counts kept by several threads at once (`add` is atomic)."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str) -> None:
        """Nothing; counter `name` is one higher."""
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)


@dataclass
class Stats(Counters):
    """Where wheels came from: proof that a release is downloaded at most once."""

    downloaded: int = 0
    wheelhouse: int = 0
    stored: int = 0
    refused: int = 0
    ranged: int = 0  # releases read by HTTP ranges (only the members needed)
    kept: int = 0  # files a ranged read kept, read from the store instead of the index


@dataclass
class Store:
    root: Path = field(default_factory=default_root)
    platforms: Sequence[str] = ()
    progress: DownloadProgress = field(default_factory=DownloadProgress)
    stats: Stats = field(default_factory=Stats)
    sources: Sequence[Path] | None = None  # default: everywhere(wheelhouses)
    wheelhouses: Sequence[Path] = ()  # this run's --wheelhouse paths (wheelhouse.checked)
    partial: bool = True  # may read only the members needed, by HTTP ranges (patcher.wheels.remote)
    refresh: bool = False  # --refresh: ask the indexes again for every page kept
    moved: remote.Moved = field(default_factory=remote.Moved)  # bytes the ranges brought
    no_ranges: dict[str, str] = field(default_factory=dict)  # release -> why pip fetched it
    _config: pipconf.IndexConfig | None = field(default=None, repr=False)
    _pages: dict[str, list[remote.Candidate]] = field(default_factory=dict, repr=False)
    _open: dict[tuple[str, str], Wheel] = field(default_factory=dict, repr=False)
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict, repr=False)
    _failed: dict[tuple[str, str], VpatchError] = field(default_factory=dict, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _warming: threading.Thread | None = field(default=None, repr=False)
    _index: indexclient.Client | None = field(default=None, repr=False)
    # pip's configuration is read under a lock of its own: a `pip config list` running (warm())
    # never holds up a wheel that a wheelhouse or the store already has
    _config_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def warm(self) -> None:
        """Read pip's configuration in the background now (under $VPATCH_PIP, `pip config
        list` is a pip start, ~0.3 s), while the command scans its hosts: a cold fetch then
        starts at once. Harmless when no fetch follows."""
        if self.partial and not self.platforms and self._warming is None:
            self._warming = threading.Thread(target=self._index_config, daemon=True)
            self._warming.start()

    def _index_config(self) -> pipconf.IndexConfig:
        with self._config_lock:
            if self._config is None:
                self._config = pipconf.read(index.pip_command()) if _by_pip() else pipconf.native()
            return self._config

    def _client(self) -> indexclient.Client:
        """vpatch's index client for this run (its pages kept in this store)."""
        config = self._index_config()
        with self._guard:
            if self._index is None:
                self._index = indexclient.Client(config, self.root, self.refresh, moved=self.moved)
            return self._index

    def _native(self) -> bool:
        """Whether vpatch's own client lists and fetches (else pip: $VPATCH_PIP is set, or
        pip's configuration has a setting only pip honours, e.g. a keyring provider)."""
        return not _by_pip() and not self._index_config().pip_only

    def list_versions(
        self, package: str, pre: bool = False, platforms: Sequence[str] = (), any_file: bool = False
    ) -> list[Version]:
        """Every release of `package` the configured indexes offer that pip would list here,
        oldest first; pages kept in the store (warm: no request). `index.PipError` (the
        matrix's "cannot list") when no index could be read."""
        if not self._native():  # any_file: what pip lists for this interpreter, sdists included
            return index.list_versions(package, pre, () if any_file else platforms)
        try:
            return self._client().versions(package, pre, platforms, any_file)
        except remote.NoRanges as exc:  # Unreachable included
            raise index.PipError(
                f"could not list releases of {package}: {exc.message}", index_hint(package)
            ) from None

    def releases_without_wheel(
        self, package: str, pre: bool, platforms: Sequence[str]
    ) -> list[Version]:
        """Releases listed (any file: `any_file`) without a wheel pip takes for `platforms`:
        `vpatch matrix --platform` names them instead of leaving them out."""
        usable = set(self.list_versions(package, pre, platforms))
        return [v for v in self.list_versions(package, pre, any_file=True) if v not in usable]

    @classmethod
    def for_run(
        cls,
        wheelhouses: Sequence[str | Path] = (),
        platforms: Sequence[str] = (),
        progress: DownloadProgress | None = None,
        partial: bool = True,
        refresh: bool = False,
    ) -> Store:
        """A command run's store (one per run, made by the command: a wheel is opened once
        however many files and hosts need it, and nothing outlives the run)."""
        return cls(
            platforms=platforms,
            progress=progress if progress is not None else StderrProgress(),
            wheelhouses=wheelhouse.checked(wheelhouses),
            partial=partial,
            refresh=refresh,
        )

    def file(self, package: str, version: str | Version, rel: str) -> bytes | None:
        """pip's bytes of one installed file (diff, capture, backport, --adopt); None when the
        release's wheel has no such file. A file read by ranges is kept (`_keep_member`), so a
        later run asks the index for nothing."""
        v = Version(str(version))
        kept = self._kept_member(package, v, rel)
        if kept is not None:
            self.stats.add("kept")
            return kept
        wheel = self.wheel(package, v)
        data = wheel.read(rel)
        if data is not None and wheel.origin == "index":
            member = wheel.members.get(rel)
            sha = wheel.hashes.get(member) if member is not None else None
            if sha is not None:  # read() checked `data` against it
                self._keep_member(package, v, wheel.name, rel, sha, data)
        return data

    def text(self, package: str, version: str, rel: str) -> str | None:
        """pip's text of one installed file, None when it cannot be had (no wheel, not UTF-8,
        not a version): what apply --adopt records as a base and verify names lines against."""
        try:
            data = self.file(package, version, rel)
            return None if data is None else data.decode("utf-8")
        except (VpatchError, OSError, ValueError):  # InvalidVersion, UnicodeDecodeError
            return None

    def wheel(self, package: str, version: Version) -> Wheel:
        """The release's wheel, open and checked; fetched into the store at most once."""
        key = (canonicalize_name(package), str(version))
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            got = self._open.get(key)
            if got is None:
                failed = self._failed.get(key)
                if failed is not None:
                    raise failed  # asked again for another file: pip is not asked twice
                try:
                    got = self._open[key] = self._get(package, version, keep=True)
                except VpatchError as exc:
                    self._failed[key] = exc
                    raise
            return got

    def read(
        self, package: str, version: Version, rels: Sequence[str]
    ) -> tuple[str, str, dict[str, bytes | None]]:
        """(origin, RECORD, files) of one release for a caller that keeps no wheel (the
        matrix): a wheel in a source or the store is read in place; pip's is read, dropped."""
        key = (canonicalize_name(package), str(version))
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            wheel = self._open.get(key) or self._get(package, version, keep=False)
            try:
                return wheel.origin, wheel.record, {rel: wheel.read(rel) for rel in rels}
            finally:
                if key not in self._open:
                    wheel.close()
                    if wheel.origin == "pip":
                        shutil.rmtree(wheel.path.parent, ignore_errors=True)

    def close(self) -> None:
        for w in self._open.values():
            w.close()
        self._open.clear()

    # -- internals

    def _get(self, package: str, version: Version, keep: bool) -> Wheel:
        for path in wheelhouse.find(self._sources(), package, version):
            try:
                fh, _st = trust.open_source(path)  # UnsafeStore: said, never skipped in silence
                wheel = Wheel(path, fh, "wheelhouse")
            except (CorruptWheel, OSError):
                continue  # e.g. still being written by someone else: the next source
            self.stats.add("wheelhouse")
            return wheel
        with self._release_lock(package, version):
            stored = self._stored(package, version)
            if stored is not None:
                self.stats.add("stored")
                return stored
            ranged = self._ranged(package, version) if self.partial else None
            return ranged or self._download(package, version, keep)

    def _sources(self) -> list[Path]:
        if self.sources is not None:
            return list(self.sources)
        return wheelhouse.everywhere(self.wheelhouses)

    def _pointer(self, package: str, version: Version) -> Path:
        return self.root / "releases" / canonicalize_name(package) / f"{version}.json"

    @contextmanager
    def _release_lock(self, package: str, version: Version) -> Iterator[None]:
        """One download per release across processes: a second command waits, then reads."""
        locks = safe_dir(safe_dir(self.root, create=True) / ".locks", create=True)
        name = f"{canonicalize_name(package)}-{version}.lock"
        fd = os.open(locks / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _pointer_doc(self, pointer: Path, blobs: str, limit: int) -> Any:
        """The JSON of a release's pointer, the store's directories on its way checked first
        (FileNotFoundError: there is none)."""
        safe_dir(self.root)
        for d in (self.root / "releases", pointer.parent, self.root / blobs):
            safe_dir(d)
        fh, _st = open_checked(pointer)
        with fh:
            return json.loads(fh.read(limit))

    def _stored(self, package: str, version: Version) -> Wheel | None:
        """The store's wheel of the release, or None (none, or refused and dropped)."""
        pointer = self._pointer(package, version)
        try:
            doc = self._pointer_doc(pointer, "blobs", 65536)
            sha = str(doc["sha256"])
            if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
                raise CorruptWheel(f"{pointer}: not a sha256")
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, CorruptWheel):
            self.stats.add("refused")
            pointer.unlink(missing_ok=True)
            return None
        blob = self.root / "blobs" / f"{sha}.whl"
        try:
            fh, st = open_checked(blob)
        except FileNotFoundError:
            pointer.unlink(missing_ok=True)
            return None
        try:
            if not self._stamp_ok(blob, st) and trust.hash_file(fh) != sha:
                raise CorruptWheel(f"{blob}: does not hash to its name")
            self._write_stamp(blob, st)
            return Wheel(blob, fh, "store", sha, str(doc.get("file") or blob.name))
        except CorruptWheel:
            fh.close()
            self.stats.add("refused")
            blob.unlink(missing_ok=True)
            pointer.unlink(missing_ok=True)
            return None

    def _members_pointer(self, package: str, version: Version) -> Path:
        return self.root / "releases" / canonicalize_name(package) / f"{version}.members.json"

    def _kept_member(self, package: str, version: Version, rel: str) -> bytes | None:
        """A file of the release kept from an earlier ranged read, its bytes checked against
        the sha256 RECORD gave it (the blob's name); None when none is kept or it does not
        hold (then dropped: the index is asked again)."""
        pointer = self._members_pointer(package, version)
        try:
            doc = self._pointer_doc(pointer, "members", MAX_MEMBERS_POINTER)
            sha = doc["files"].get(rel)
            if sha is None:
                return None
            if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
                raise CorruptWheel(f"{pointer}: not a sha256")
            blob = self.root / "members" / sha
            fh, _st = open_checked(blob)
            with fh:
                data = fh.read(MAX_MEMBER + 1)
            if len(data) > MAX_MEMBER or hashlib.sha256(data).hexdigest() != sha:
                blob.unlink(missing_ok=True)
                raise CorruptWheel(f"{blob}: does not hash to its name")
            return data
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, CorruptWheel):
            self.stats.add("refused")
            pointer.unlink(missing_ok=True)
            return None

    def _keep_member(
        self, package: str, version: Version, wheel: str, rel: str, sha: str, data: bytes
    ) -> None:
        """Keep one file read by ranges (bytes already checked against RECORD's `sha`): a
        blob named by its sha256 and the release's pointer rel -> sha256. Best effort: a
        store that cannot take it costs the next run a range request, nothing else."""
        if len(data) > MAX_MEMBER:
            return
        pointer = self._members_pointer(package, version)
        try:
            with self._release_lock(package, version):
                members = safe_dir(self.root / "members", create=True)
                blob = members / sha
                if not blob.exists():
                    atomic_write(blob, data)
                safe_dir(self.root / "releases", create=True)
                safe_dir(pointer.parent, create=True)
                files: dict[str, str] = {}
                try:
                    fh, _st = open_checked(pointer)
                    with fh:
                        doc = json.loads(fh.read(MAX_MEMBERS_POINTER))
                    if doc.get("wheel") == wheel and isinstance(doc.get("files"), dict):
                        files = {str(k): str(v) for k, v in doc["files"].items()}
                except (FileNotFoundError, ValueError, CorruptWheel):
                    pass
                files[rel] = sha
                text = json.dumps({"wheel": wheel, "files": files}, sort_keys=True).encode()
                if len(text) <= MAX_MEMBERS_POINTER:
                    atomic_write(pointer, text)
        except (OSError, UnsafeStore, CorruptWheel):
            return

    def _stamp_ok(self, blob: Path, st: os.stat_result) -> bool:
        """The blob was hashed before and has not changed since (any write changes its ctime)."""
        try:
            fh, _ = open_checked(blob.with_suffix(".ok"))
            with fh:
                return bool(json.loads(fh.read(4096)) == trust.stamp(st))
        except (OSError, ValueError, UnsafeStore):
            return False

    def _write_stamp(self, blob: Path, st: os.stat_result) -> None:
        atomic_write(blob.with_suffix(".ok"), json.dumps(trust.stamp(st)).encode())

    def _ranged(self, package: str, version: Version) -> Wheel | None:
        """The release's wheel read by HTTP ranges from pip's index (only the members read
        are fetched, each checked against RECORD); None when that cannot be done (pip then
        downloads the whole wheel: the reason is kept in `no_ranges`)."""
        if self.platforms:  # another platform's wheel: pip's choice, not this interpreter's
            self.no_ranges[f"{package}=={version}"] = "--platform given"
            return None
        config = self._index_config()  # waits for warm()'s read, if one is running
        pages = self._pages  # dict reads and writes are atomic; a page read twice is harmless
        if self._native():
            try:  # the client's kept pages: a release listed before is found without a request
                picked = self._client().candidates(package, version, pages)
            except remote.NoRanges:
                picked = None  # remote.find reads the pages itself, and says what it finds
            if picked is not None and urlsplit(picked.url).scheme not in ("http", "https"):
                # pip's pick is on this machine (find-links, file://): the whole path copies it
                self.no_ranges[f"{package}=={version}"] = f"pip takes {picked.filename} from disk"
                return None
        try:
            got, fh = remote.open_ranged(config, package, version, self.moved, pages)
            wheel = Wheel(Path(got.filename), fh, "index", None, got.filename)
        except remote.Unreachable as exc:  # pip reads the same config: it would find none
            raise index.PipError(
                f"no wheel for {package}=={version} in the wheelhouse or index",
                index.unreachable_hint(package, version, exc.message),
            ) from None
        except (remote.NoRanges, CorruptWheel) as exc:
            self.no_ranges[f"{package}=={version}"] = exc.message
            return None
        self.stats.add("ranged")
        return wheel

    def _fetch_whole(
        self,
        package: str,
        version: Version,
        tmp: Path,
        progress: Callable[[int, int], None],
    ) -> Path:
        """The release's whole wheel in `tmp`: by vpatch's client, else by pip (`_native`)."""
        if not self._native():
            return index.download_wheel(package, version, tmp, self.platforms, progress)
        try:
            return self._client().download(package, version, tmp, self.platforms, progress)
        except remote.Unreachable as exc:
            raise index.PipError(
                f"no wheel for {package}=={version} in the wheelhouse or index",
                index.unreachable_hint(package, version, exc.message),
            ) from None
        except remote.NoRanges as exc:
            raise index.PipError(
                f"no wheel for {package}=={version} in the wheelhouse or index: {exc.message}",
                index_hint(package),
            ) from None

    def _download(self, package: str, version: Version, keep: bool) -> Wheel:
        tmp_root = safe_dir(self.root / ".tmp", create=True)
        for stale in tmp_root.glob(f"{canonicalize_name(package)}-{version}-*"):
            shutil.rmtree(stale, ignore_errors=True)  # we hold the lock: a killed run's leftovers
        prefix = f"{canonicalize_name(package)}-{version}-"
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_root))
        what = f"{package} {version}"
        self.progress.fetching(what)
        try:
            path = self._fetch_whole(
                package,
                version,
                tmp,
                lambda done, total: self.progress.advance(what, done, total),
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            self.progress.fetched(what)
        self.stats.add("downloaded")
        if not keep:
            fh, _st = open_checked(path)
            return Wheel(path, fh, "pip")
        try:
            fh, _st = open_checked(path)
            sha = trust.hash_file(fh)
            fh.close()
            blobs = safe_dir(self.root / "blobs", create=True)
            blob = blobs / f"{sha}.whl"
            os.replace(path, blob)
            pointer = self._pointer(package, version)
            safe_dir(self.root / "releases", create=True)
            safe_dir(pointer.parent, create=True)
            atomic_write(pointer, json.dumps({"file": path.name, "sha256": sha}).encode())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        fh, st = open_checked(blob)
        self._write_stamp(blob, st)
        return Wheel(blob, fh, "store", sha, path.name)


def _by_pip() -> bool:
    """$VPATCH_PIP names a pip: it lists and fetches, as before vpatch had its own client."""
    return bool(os.environ.get("VPATCH_PIP", "").strip())


def index_hint(package: str) -> str:
    """What to do when no configured index has the release: the settings vpatch reads."""
    return (
        f"check the package name; put its wheel in a --wheelhouse DIR (or $VPATCH_WHEELHOUSE), "
        f"or name the index that has {package}: PIP_INDEX_URL / PIP_EXTRA_INDEX_URL / "
        f"PIP_FIND_LINKS (or index-url in pip.conf; UV_DEFAULT_INDEX or uv.toml for uv); "
        f"--refresh reads the index again"
    )
