"""One wheel file, opened once and read with checks: every member must have RECORD's sha256.

RECORD is the wheel's own list of its files and their hashes; pip installs a member at the
site-packages path RECORD names (`.data/purelib|platlib/` mapped to where pip puts it). A
reader of pristine bytes (diff, capture, --adopt, matrix, wheel) gets a file here or not at
all: a member that does not match RECORD is `CorruptWheel`, never a guess.
"""

from __future__ import annotations

import csv
import hashlib
import io
import struct
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from patcher.errors import VpatchError
from patcher.wheels.trust import CHUNK

# The most a member read whole may inflate to (sources and metadata, never a wheel's .so
# files: those are streamed, `check_member`), and the most RECORD may: a wheel whose zip
# says more is refused before anything is inflated (issue 37: a 300 KB member once cost 1.5 GB).
MAX_READ = 64 * 1024 * 1024
MAX_RECORD = 16 * 1024 * 1024


class CorruptWheel(VpatchError):
    """A wheel (or a file in it) is not what its name or its RECORD says."""


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
        path = _site_path(row[0]) if row else None
        if path is not None:
            out[path] = record_sha256(row[1]) if len(row) > 1 else None
    return out


def record_entry(record: str, rel: str) -> tuple[bool, str | None]:
    """(listed, sha256) of one site-packages path: what `record_files(record)` says of `rel`,
    without mapping every row (the matrix asks this of one file per release). A row can only
    map to `rel` if it holds rel's last segment, so only those rows are looked at."""
    last = rel.rsplit("/", 1)[-1]
    if not last or '"' in last:  # CSV would write it otherwise: every row mapped
        every = record_files(record)
        return rel in every, every.get(rel)
    listed, sha = False, None
    if last not in record:
        return listed, sha
    for row in csv.reader(io.StringIO(record)):
        if row and last in row[0] and _site_path(row[0]) == rel:
            listed, sha = True, record_sha256(row[1]) if len(row) > 1 else None
    return listed, sha


def _site_path(path: str) -> str | None:
    """Where pip installs RECORD's `path` under site-packages, as pathlib's normal form of it
    (None: a .data file outside purelib/platlib, not in site-packages)."""
    if not _plain(path) or path.partition("/")[0].endswith(".data"):
        parts = PurePosixPath(path).parts
        if len(parts) > 2 and parts[0].endswith(".data"):
            if parts[1] not in ("purelib", "platlib"):
                return None
            parts = parts[2:]
        return "/".join(parts)
    return path


def _plain(path: str) -> bool:
    """Whether `path` is already what PurePosixPath(path).parts joined by "/" gives back (no
    empty, `.` or leading-slash segment): most of a RECORD, taken as it is (pathlib on every
    row was half of reading vLLM's 1,900-row RECORD, and the matrix reads one per release)."""
    return not (
        not path
        or path == "."
        or path.startswith(("/", "./"))
        or path.endswith(("/", "/."))
        or "//" in path
        or "/./" in path
    )


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
            info = self.zip.getinfo(records[0])
            self.record = self._inflate(info, MAX_RECORD).decode("utf-8")
        except (zipfile.BadZipFile, OSError, UnicodeDecodeError, EOFError) as exc:
            raise CorruptWheel(f"{self.name}: not a readable wheel ({exc})") from None
        self.listed = record_files(self.record)
        self.hashes: dict[str, str | None] = {}  # archive member -> RECORD's sha256
        self.sizes: dict[str, int] = {}  # archive member -> RECORD's size, where it gives one
        for row in csv.reader(io.StringIO(self.record)):
            if row:
                self.hashes[row[0]] = record_sha256(row[1]) if len(row) > 1 else None
                if len(row) > 2 and row[2].strip().isdigit():
                    self.sizes[row[0]] = int(row[2])
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
                info = self.zip.getinfo(member)
                self._same_size(member, info)
                limit = min(MAX_READ, self.sizes.get(member, MAX_READ))
                data = self._inflate(info, MAX_RECORD if member == self.record_name else limit)
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
                self._same_size(member, info)
                with self.zip.open(info) as fh:
                    while chunk := fh.read(CHUNK):  # zipfile stops at the declared size
                        h.update(chunk)
            except (zipfile.BadZipFile, OSError, KeyError, EOFError) as exc:
                raise CorruptWheel(f"{self.name}: {member}: unreadable ({exc})") from None
        if want is None or h.hexdigest() != want:
            raise CorruptWheel(f"{self.name}: {member} does not match RECORD's sha256")
        return info

    def _same_size(self, member: str, info: zipfile.ZipInfo) -> None:
        """CorruptWheel when the zip declares another size than RECORD gives (no byte read)."""
        size = self.sizes.get(member, info.file_size)
        if info.file_size != size:
            raise CorruptWheel(
                f"{self.name}: {member} does not match RECORD's sha256 and size "
                f"({info.file_size} bytes, RECORD: {size})"
            )

    def _inflate(self, info: zipfile.ZipInfo, limit: int) -> bytes:
        """A member's bytes, inflated a chunk at a time and never past `limit` (RECORD's size
        for it or a cap) nor past what the zip declares: a member that says or gives more is
        refused, not read on (the caller holds the lock)."""
        if info.file_size > limit:
            raise CorruptWheel(
                f"{self.name}: {info.filename}: {info.file_size} bytes, more than the "
                f"{limit} allowed (its RECORD size or vpatch's cap)"
            )
        out = bytearray()
        with self.zip.open(info) as fh:
            while chunk := fh.read(min(CHUNK, limit + 1 - len(out))):
                out += chunk
                if len(out) > limit:
                    raise CorruptWheel(f"{self.name}: {info.filename}: longer than declared")
        return bytes(out)

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
                chunk = self._fh.read(min(CHUNK, left))
            if not chunk:
                raise CorruptWheel(f"{self.name}: {info.filename}: truncated")
            offset += len(chunk)
            left -= len(chunk)
            yield chunk

    def file_sha256(self) -> str:
        """The sha256 of the wheel file this object reads (its descriptor, not its path),
        hashed once when no source knew it (a wheelhouse, --from-wheel, pip's download):
        `vpatch wheel` records it so the pristine wheel can be pinned by hash."""
        if self.sha256 is None:
            from patcher.wheels.trust import hash_file

            with self._lock:
                self.sha256 = hash_file(self._fh)
        return self.sha256

    def close(self) -> None:
        self.zip.close()
        self._fh.close()
