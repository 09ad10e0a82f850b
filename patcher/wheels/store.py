"""The wheel store: pip's wheel of a release, fetched at most once per machine, read with checks.

`vpatch diff`, `capture`, `backport`, `apply --adopt`, `wheel` and `matrix` need the bytes pip
installed for a file of one release. They all get them here, from the first source that has
the release's wheel:

1. wheelhouses: `--wheelhouse DIR|FILE` (repeatable) and `$VPATCH_WHEELHOUSE` (os.pathsep
   separated): for air-gapped fleets; a release found there costs no network at all;
2. `$VPATCH_MATRIX_WHEELS` directories (e.g. a test suite's wheel cache), used in place;
3. the store itself: `<root>/blobs/<sha256>.whl`, named by its content, and
   `<root>/releases/<name>/<version>.json` pointing at it;
4. pip (`patcher.pkgindex.download_wheel`: the user's pip configuration and cache, no retry
   loop), once, under a per-release lock, so concurrent commands share one download; the
   wheel is then moved into the store (or, for the matrix, which walks many releases of
   300-500 MB wheels, read and dropped: `keep=False`).

Nothing is used unchecked (issue 24: a poisoned pristine side would hide a host's edit): the
store's directories and files must be the user's own and not writable by group or others
(else the store is refused, with a hint), a stored wheel must hash to its name (re-hashed
whenever its inode, size, mtime or ctime differ from when it was last checked), and every file
read from any wheel must have the sha256 its RECORD lists. A wheel that fails a check is
dropped from the store and fetched again.

Root: `$VPATCH_WHEEL_STORE`, else `$XDG_CACHE_HOME/vpatch/wheels`, else `~/.cache/vpatch/wheels`.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
import shutil
import stat
import struct
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from patcher import pkgindex
from patcher.errors import UsageError, VpatchError

_WHEELHOUSES: list[Path] = []  # --wheelhouse, set by the CLI for this run
_CHUNK = 1 << 20


class CorruptWheel(VpatchError):
    """A wheel (or a file in it) is not what its name or its RECORD says."""


class UnsafeStore(VpatchError):
    """The store (or an entry) could be written by someone else: it is not used."""


def record_sha256(digest: str) -> str | None:
    """RECORD's `sha256=<urlsafe b64>` as hex (None for other algorithms or no hash)."""
    import base64

    algo, _, value = digest.partition("=")
    if algo != "sha256" or not value:
        return None
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def record_files(record: str) -> dict[str, str | None]:
    """site-packages path -> sha256 for every file RECORD lists (`.data/purelib|platlib/` mapped
    to where pip installs it; scripts, headers and data files are not in site-packages)."""
    out: dict[str, str | None] = {}
    for row in csv.reader(io.StringIO(record)):
        if not row:
            continue
        parts = PurePosixPath(row[0]).parts
        if len(parts) > 2 and parts[0].endswith(".data"):
            if parts[1] not in ("purelib", "platlib"):
                continue
            parts = parts[2:]
        out["/".join(parts)] = record_sha256(row[1]) if len(row) > 1 else None
    return out


# ---------------------------------------------------------------------------------------------
# One wheel, open and checked


class Wheel:
    """A wheel file opened once (by descriptor); every member read is checked against RECORD."""

    def __init__(
        self,
        path: Path,
        fh: IO[bytes],
        origin: str,
        sha256: str | None = None,
        name: str | None = None,
    ):
        self.path, self.origin, self.sha256 = path, origin, sha256
        self.name = name or path.name  # the wheel's file name (a stored blob's is its hash)
        self._fh = fh
        self._lock = threading.Lock()
        try:
            self.zip = zipfile.ZipFile(fh)
            names = self.zip.namelist()
            records = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
            if len(records) != 1:
                raise CorruptWheel(f"{self.name}: expected one .dist-info/RECORD")
            self.record_name = records[0]
            self.record = self.zip.read(records[0]).decode("utf-8")
        except (zipfile.BadZipFile, OSError, UnicodeDecodeError, EOFError) as exc:
            raise CorruptWheel(f"{self.name}: not a readable wheel ({exc})") from None
        self.listed = record_files(self.record)
        self.hashes: dict[str, str | None] = {}  # archive member -> RECORD's sha256
        for row in csv.reader(io.StringIO(self.record)):
            if row:
                self.hashes[row[0]] = record_sha256(row[1]) if len(row) > 1 else None
        self.members: dict[str, str] = {}  # site-packages path -> archive member
        for name in names:
            parts = PurePosixPath(name).parts
            if len(parts) > 2 and parts[0].endswith(".data"):
                if parts[1] in ("purelib", "platlib"):
                    self.members.setdefault("/".join(parts[2:]), name)
            elif not name.endswith("/"):
                self.members.setdefault(name, name)

    @property
    def dist_info(self) -> str:
        return self.record_name.split("/", 1)[0]

    def read(self, rel: str) -> bytes | None:
        """The file pip installs at site-packages/`rel`, or None when the wheel has none.
        CorruptWheel when its bytes are not RECORD's (or RECORD does not list it)."""
        member = self.members.get(rel)
        if member is None:
            return None
        return self.read_member(member)

    def read_member(self, member: str) -> bytes:
        """An archive member's bytes, checked against RECORD's sha256 (RECORD itself aside)."""
        with self._lock:
            try:
                data = self.zip.read(member)
            except (zipfile.BadZipFile, OSError, KeyError, EOFError) as exc:
                raise CorruptWheel(f"{self.name}: {member}: unreadable ({exc})") from None
        if member == self.record_name:
            return data
        want = self.hashes.get(member)
        if want is None or hashlib.sha256(data).hexdigest() != want:
            raise CorruptWheel(f"{self.name}: {member} does not match RECORD's sha256")
        return data

    def check_member(self, member: str) -> zipfile.ZipInfo:
        """Stream a member through sha256 (no matter its size) against RECORD; its ZipInfo."""
        want = self.hashes.get(member)
        h = hashlib.sha256()
        with self._lock:
            try:
                info = self.zip.getinfo(member)
                with self.zip.open(info) as fh:
                    while chunk := fh.read(_CHUNK):
                        h.update(chunk)
            except (zipfile.BadZipFile, OSError, KeyError, EOFError) as exc:
                raise CorruptWheel(f"{self.name}: {member}: unreadable ({exc})") from None
        if want is None or h.hexdigest() != want:
            raise CorruptWheel(f"{self.name}: {member} does not match RECORD's sha256")
        return info

    def raw(self, info: zipfile.ZipInfo) -> Iterator[bytes]:
        """A member's stored (compressed) bytes as they are in the archive, in chunks."""
        with self._lock:
            self._fh.seek(info.header_offset)
            head = self._fh.read(30)
            if len(head) != 30 or head[:4] != b"PK\x03\x04":
                raise CorruptWheel(f"{self.name}: {info.filename}: bad local header")
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            offset = info.header_offset + 30 + name_len + extra_len
        left = info.compress_size
        while left:
            with self._lock:
                self._fh.seek(offset)
                chunk = self._fh.read(min(_CHUNK, left))
            if not chunk:
                raise CorruptWheel(f"{self.name}: {info.filename}: truncated")
            offset += len(chunk)
            left -= len(chunk)
            yield chunk

    def close(self) -> None:
        self.zip.close()
        self._fh.close()


# ---------------------------------------------------------------------------------------------
# Where wheels come from


def use_wheelhouses(paths: Sequence[str]) -> None:
    """`--wheelhouse` for this run: each an existing directory or .whl file (else exit 2)."""
    for p in paths:
        path = Path(p)
        if not (path.is_dir() or (path.is_file() and path.name.endswith(".whl"))):
            raise UsageError(
                f"--wheelhouse {p}: no such directory or .whl file",
                "pass a directory of wheels (pip download -d DIR) or a wheel file",
            )
        _WHEELHOUSES.append(path)


def wheelhouses() -> list[Path]:
    env = [Path(p) for p in os.environ.get("VPATCH_WHEELHOUSE", "").split(os.pathsep) if p]
    return [*_WHEELHOUSES, *env]


def wheel_dirs() -> list[Path]:
    return [Path(p) for p in os.environ.get("VPATCH_MATRIX_WHEELS", "").split(os.pathsep) if p]


def cache_dir(variable: str, sub: str) -> Path:
    """$variable, else $XDG_CACHE_HOME/vpatch/sub, else ~/.cache/vpatch/sub."""
    configured = os.environ.get(variable)
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "vpatch" / sub


def default_root() -> Path:
    return cache_dir("VPATCH_WHEEL_STORE", "wheels")


def find(sources: Sequence[Path], package: str, version: Version) -> list[Path]:
    """Wheels of package==version in these directories or wheel files (any platform tag: the
    .py files are the same), in source order."""
    want = canonicalize_name(package)
    out: list[Path] = []
    for src in sources:
        if src.is_file():
            candidates = [src]
        elif src.is_dir():
            candidates = sorted(src.glob("*.whl"))
        else:
            continue
        for path in candidates:
            try:
                name, ver, _build, _tags = parse_wheel_filename(path.name)
            except ValueError:
                continue
            if name == want and ver == version:
                out.append(path)
    return out


def listed_versions(package: str) -> list[Version]:
    """Releases of `package` the wheelhouses hold (the matrix's listing when pip has none)."""
    want = canonicalize_name(package)
    found: set[Version] = set()
    for src in [*wheelhouses(), *wheel_dirs()]:
        for path in [src] if src.is_file() else sorted(src.glob("*.whl")) if src.is_dir() else []:
            try:
                name, ver, _build, _tags = parse_wheel_filename(path.name)
            except ValueError:
                continue
            if name == want:
                found.add(ver)
    return sorted(found)


# ---------------------------------------------------------------------------------------------
# Checks


def _check_stat(st: os.stat_result, what: Path, kind: str) -> None:
    """The user's own (root's files are trusted too) and not writable by group or others."""
    if kind == "dir" and not stat.S_ISDIR(st.st_mode):
        raise UnsafeStore(f"{what}: not a directory", _STORE_HINT)
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise UnsafeStore(f"{what}: not a regular file", _STORE_HINT)
    if st.st_uid not in (os.geteuid(), 0):
        raise UnsafeStore(f"{what}: owned by uid {st.st_uid}, not by this user", _STORE_HINT)
    if st.st_mode & 0o022:
        raise UnsafeStore(
            f"{what}: writable by group or others (mode {stat.S_IMODE(st.st_mode):o})",
            _STORE_HINT,
        )


_STORE_HINT = (
    "the wheel store must be yours and not group/other-writable: fix it, or set "
    "VPATCH_WHEEL_STORE to a directory of your own"
)


def _safe_dir(path: Path, create: bool = False) -> Path:
    if create:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_stat(os.lstat(path), path, "dir")
    return path


def _open_checked(path: Path) -> tuple[IO[bytes], os.stat_result]:
    """Open without following a link; the descriptor's own stat is what is checked."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    fh = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        _check_stat(st, path, "file")
    except BaseException:
        fh.close()
        raise
    return fh, st


def _open_source(path: Path) -> tuple[IO[bytes], os.stat_result]:
    """A wheelhouse wheel: a regular file nobody but its owner (or root) can change."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO must not hang us
    fh = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022:
        fh.close()
        raise UnsafeStore(
            f"{path}: not a regular file, or writable by group or others",
            "wheels vpatch reads pristine bytes from must not be writable by others",
        )
    return fh, st


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _hash_file(fh: IO[bytes]) -> str:
    h = hashlib.sha256()
    fh.seek(0)
    while chunk := fh.read(_CHUNK):
        h.update(chunk)
    fh.seek(0)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Progress


class Progress:
    """Silent by default; StderrProgress is the CLI's (rich on a terminal, else one line)."""

    def fetching(self, what: str) -> None: ...
    def advance(self, what: str, done: int, total: int) -> None: ...
    def fetched(self, what: str) -> None: ...


class StderrProgress(Progress):
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
            if time.monotonic() - self.started.get(what, 0.0) < 1.0:
                return
            if not sys.stderr.isatty():
                if what not in self.said:
                    self.said.add(what)
                    size = f" ({total / 1e6:.0f} MB)" if total else ""
                    print(f"vpatch: downloading {what}{size} through pip", file=sys.stderr)
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


def progress_for(quiet: bool) -> Progress:
    return Progress() if quiet else StderrProgress()


# ---------------------------------------------------------------------------------------------
# The store


@dataclass
class Counters:
    """Counts kept by several threads at once (`add` is atomic)."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)


@dataclass
class Stats(Counters):
    """Where wheels came from: proof that a release is downloaded at most once."""

    downloaded: int = 0
    wheelhouse: int = 0
    stored: int = 0
    refused: int = 0


@dataclass
class Store:
    root: Path = field(default_factory=default_root)
    platforms: Sequence[str] = ()
    progress: Progress = field(default_factory=Progress)
    stats: Stats = field(default_factory=Stats)
    sources: Sequence[Path] | None = None  # default: wheelhouses() + wheel_dirs()
    _open: dict[tuple[str, str], Wheel] = field(default_factory=dict, repr=False)
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict, repr=False)
    _failed: dict[tuple[str, str], VpatchError] = field(default_factory=dict, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

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
        for path in find(self._sources(), package, version):
            try:
                fh, _st = _open_source(path)  # UnsafeStore: said, never skipped in silence
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
            return self._download(package, version, keep)

    def _sources(self) -> list[Path]:
        return list(self.sources) if self.sources is not None else [*wheelhouses(), *wheel_dirs()]

    def _pointer(self, package: str, version: Version) -> Path:
        return self.root / "releases" / canonicalize_name(package) / f"{version}.json"

    @contextmanager
    def _release_lock(self, package: str, version: Version) -> Iterator[None]:
        """One download per release across processes: a second command waits, then reads."""
        locks = _safe_dir(_safe_dir(self.root, create=True) / ".locks", create=True)
        name = f"{canonicalize_name(package)}-{version}.lock"
        fd = os.open(locks / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _stored(self, package: str, version: Version) -> Wheel | None:
        """The store's wheel of the release, or None (none, or refused and dropped)."""
        pointer = self._pointer(package, version)
        try:
            _safe_dir(self.root)
            for d in (self.root / "releases", pointer.parent, self.root / "blobs"):
                _safe_dir(d)
            fh, _st = _open_checked(pointer)
            with fh:
                doc = json.loads(fh.read(65536))
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
            fh, st = _open_checked(blob)
        except FileNotFoundError:
            pointer.unlink(missing_ok=True)
            return None
        try:
            if not self._stamp_ok(blob, st) and _hash_file(fh) != sha:
                raise CorruptWheel(f"{blob}: does not hash to its name")
            self._write_stamp(blob, st)
            return Wheel(blob, fh, "store", sha, str(doc.get("file") or blob.name))
        except CorruptWheel:
            fh.close()
            self.stats.add("refused")
            blob.unlink(missing_ok=True)
            pointer.unlink(missing_ok=True)
            return None

    def _stamp_ok(self, blob: Path, st: os.stat_result) -> bool:
        """The blob was hashed before and has not changed since (any write changes its ctime)."""
        try:
            fh, _ = _open_checked(blob.with_suffix(".ok"))
            with fh:
                return bool(json.loads(fh.read(4096)) == _stamp(st))
        except (OSError, ValueError, UnsafeStore):
            return False

    def _write_stamp(self, blob: Path, st: os.stat_result) -> None:
        _atomic_write(blob.with_suffix(".ok"), json.dumps(_stamp(st)).encode())

    def _download(self, package: str, version: Version, keep: bool) -> Wheel:
        tmp_root = _safe_dir(self.root / ".tmp", create=True)
        for stale in tmp_root.glob(f"{canonicalize_name(package)}-{version}-*"):
            shutil.rmtree(stale, ignore_errors=True)  # we hold the lock: a killed run's leftovers
        prefix = f"{canonicalize_name(package)}-{version}-"
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_root))
        what = f"{package} {version}"
        self.progress.fetching(what)
        try:
            path = pkgindex.download_wheel(
                package,
                version,
                tmp,
                self.platforms,
                lambda done, total: self.progress.advance(what, done, total),
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            self.progress.fetched(what)
        self.stats.add("downloaded")
        if not keep:
            fh, _st = _open_checked(path)
            return Wheel(path, fh, "pip")
        try:
            fh, _st = _open_checked(path)
            sha = _hash_file(fh)
            fh.close()
            blobs = _safe_dir(self.root / "blobs", create=True)
            blob = blobs / f"{sha}.whl"
            os.replace(path, blob)
            pointer = self._pointer(package, version)
            _safe_dir(self.root / "releases", create=True)
            _safe_dir(pointer.parent, create=True)
            _atomic_write(pointer, json.dumps({"file": path.name, "sha256": sha}).encode())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        fh, st = _open_checked(blob)
        self._write_stamp(blob, st)
        return Wheel(blob, fh, "store", sha, path.name)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_DEFAULT: Store | None = None
_DEFAULT_LOCK = threading.Lock()


def default_store() -> Store:
    """This process's store (one per run: a wheel is opened once however many files need it)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT.root != default_root():
            _DEFAULT = Store(progress=StderrProgress())
        return _DEFAULT


def pristine(package: str, version: Version, rel: str) -> bytes | None:
    """pip's bytes of one installed file (diff, capture, backport, --adopt)."""
    return default_store().wheel(package, version).read(rel)
