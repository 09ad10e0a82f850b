"""Find installed distributions and their files without importing the package.

Only dist-info is read, so inspecting a broken or huge package (vLLM pulls in torch on import)
costs milliseconds. pip's RECORD gives the sha256 the file had at install time: that is how we
tell "pristine" from "edited by someone else".

Two ways to find a distribution, same answer: a fast path that scans `sys.path` for
`NAME-VERSION.dist-info` itself (the layout every wheel install has), and `importlib.metadata`
for anything else (egg-info, odd finders). The fast path exists because importing
importlib.metadata (email, zipfile, csv, pathlib...) was ~40 % of an inspect call's CPU on the
host; it answers only when it is sure and otherwise defers, so it can never find a different
distribution than importlib.metadata would (tests/unit/test_agent_locate.py compares them).
"""

from __future__ import annotations

import binascii
import os
import stat
import sys

from . import fdwalk, fsops, wire

# Annotations only. No typing, re, base64 or csv on the agent's common path: each is
# milliseconds of imports per agent start (re and csv alone ~5 ms), for a few lines of dist-info.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_URLSAFE = str.maketrans("-_", "+/")
# urlsafe base64's alphabet, each character mapped to None: what str.translate leaves of a
# string through this is what is not in the alphabet.
_ALPHABET = dict.fromkeys(
    map(ord, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"), None
)
MAX_METADATA_BYTES = 8 << 20  # METADATA with a long description: far below this
MAX_RECORD_BYTES = 32 << 20  # RECORD of the largest wheels (torch: ~2 MB)
_REFUSED = False  # _fast's answer for a dist-info it found and refuses to read: no _slow


class Dist(tuple):  # type: ignore[type-arg]
    """What inspect needs of one installed distribution: (name, version, root, record), a
    tuple as a NamedTuple is (without importing typing/collections for one)."""

    __slots__ = ()

    def __new__(
        cls, name: str, version: str, root: str, record: dict[str, str | None] | None
    ) -> Dist:
        return tuple.__new__(cls, (name, version, root, record))

    @property
    def name(self) -> str:
        return str(self[0])

    @property
    def version(self) -> str:
        return str(self[1])

    @property
    def root(self) -> str:
        """The directory RECORD paths are relative to (site-packages)."""
        return str(self[2])

    @property
    def record(self) -> dict[str, str | None] | None:
        """RECORD path -> hex sha256; None without a RECORD."""
        rec: dict[str, str | None] | None = self[3]
        return rec

    def __repr__(self) -> str:
        return "Dist(name=%r, version=%r, root=%r, record=%r)" % tuple(self)


def _normalize(name: str) -> str:
    """PEP 503: runs of -, _ and . become one _ (re.sub(r"[-_.]+", "_", name)), lowercased."""
    name = name.replace("-", "_").replace(".", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name.lower()


def distribution(package: str) -> Dist | None:
    found = _fast(package)
    if isinstance(found, Dist):
        return found
    return _slow(package) if found is None else None  # else _REFUSED


def _fast(package: str) -> Dist | bool | None:
    """First `*.dist-info` on sys.path whose name normalizes to `package`, or None to defer
    (also when an egg-info of the same name comes first: importlib.metadata decides then).
    `_REFUSED` when that dist-info is a link or its METADATA or RECORD is not a bounded
    regular file (a FIFO, /dev/zero): importlib.metadata would follow it and hang or exhaust
    the agent, so nothing reads it."""
    want = _normalize(package)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found = [n for n in names if _dist_name(n) == want]
        if not found:
            continue
        if len(found) > 1 or not found[0].endswith(".dist-info"):
            return None  # two candidates, or an egg: importlib.metadata's own order decides
        return _read_dist_info(entry or ".", os.path.join(entry or ".", found[0]))
    return None


def _dist_name(entry: str) -> str | None:
    """The normalized project name of a metadata directory entry (None for anything else)."""
    stem, dot, kind = entry.rpartition(".")
    if not dot or kind not in ("dist-info", "egg-info", "egg"):
        return None
    return _normalize(stem.split("-", 1)[0])


def _read_dist_info(root: str, info: str) -> Dist | bool | None:
    """The Dist of dist-info dir `info` in sys.path entry `root`, its files read through
    descriptors (fdwalk): the dist-info dir not a link, METADATA and RECORD bounded regular
    files. None (defer) when it is simply not usable; `_REFUSED` when it is hostile."""
    try:
        with fdwalk.open_dir(root) as top, top.walk([os.path.basename(info)]) as where:
            meta = _headers(where.read("METADATA", MAX_METADATA_BYTES)[0])
            if meta is None or not meta.get("name") or not meta.get("version"):
                return None
            try:
                raw: bytes | None = where.read("RECORD", MAX_RECORD_BYTES)[0]
            except FileNotFoundError:
                raw = None
    except (fdwalk.Unsafe, fdwalk.TooBig):
        return _REFUSED
    except OSError:
        return None
    try:
        record = _parse_record(raw.decode("utf-8")) if raw is not None else None
    except UnicodeDecodeError:
        return None
    except ValueError:  # a digest that is not base64 (binascii.Error): not pip's RECORD
        return _REFUSED
    return Dist(meta["name"], meta["version"], os.path.realpath(root), record)


def _headers(data: bytes) -> dict[str, str] | None:
    """Name and Version from a METADATA file's header block (RFC 822 style, stops at the body)."""
    out: dict[str, str] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key.lower() in ("name", "version") and key.lower() not in out:
            out[key.lower()] = value.strip()
    return out


def _parse_record(text: str) -> dict[str, str | None]:
    """RECORD's rows as the csv module reads them: a field is quoted only when it holds a
    comma or a quote (pip's csv.writer), so without any quote (or NUL, which csv refuses on
    3.9/3.10) in the file, splitting at commas gives the very same rows."""
    lines = text.splitlines()
    if '"' in text or "\0" in text:
        import csv

        rows: Any = csv.reader(lines)
    else:
        rows = (line.split(",") if line else [] for line in lines)
        fast = _hex_all(rows)
        if fast is not None:
            return fast
        rows = (line.split(",") if line else [] for line in lines)
    out: dict[str, str | None] = {}
    for row in rows:
        if row:
            out[row[0].replace(os.sep, "/")] = _hex(row[1] if len(row) > 1 else "")
    return out


def _hex_all(rows: Any) -> dict[str, str | None] | None:
    """The rows as _parse_record's loop gives them, every `sha256=` of the usual 43 base64
    characters decoded in one call (torch's RECORD: ~15,000 rows, one decode each cost an
    inspect ~25 ms); None when a row is not that simple (a path twice, a character outside
    the alphabet): the loop decides those one by one."""
    out: dict[str, str | None] = {}
    keys, values = [], []
    for row in rows:
        if not row:
            continue
        rel = row[0].replace(os.sep, "/")
        if rel in out:
            return None
        spec = row[1] if len(row) > 1 else ""
        if len(spec) == 50 and spec.startswith("sha256="):
            out[rel] = None  # its place in the order; the digest below
            keys.append(rel)
            values.append(spec[7:])
        else:
            out[rel] = _hex(spec)
    if not values:
        return out
    # Each 43-character digest gets one "A" (six zero bits): 44 characters, 33 bytes, of
    # which the first 32 are the digest, so one decode of them all splits at every 33 bytes.
    joined = "A".join(values) + "A"
    if joined.translate(_ALPHABET):  # a character a2b_base64 would skip: decode one by one
        return None
    hexed = binascii.a2b_base64(joined.translate(_URLSAFE)).hex()
    for i, rel in enumerate(keys):
        out[rel] = hexed[66 * i : 66 * i + 64]
    return out


def _hex(spec: str) -> str | None:
    """RECORD's `sha256=<urlsafe base64, no padding>` as hex (None for other or no hash)."""
    mode, _, value = spec.partition("=")
    if mode != "sha256" or not value:
        return None
    # = base64.urlsafe_b64decode (which is this, after the same translation).
    return binascii.a2b_base64(value.translate(_URLSAFE) + "=" * (-len(value) % 4)).hex()


def _slow(package: str) -> Dist | None:
    import importlib.metadata as metadata

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None
    if not _plain_metadata(dist):
        return None
    record: dict[str, str | None] | None = None
    if dist.read_text("RECORD") is not None:
        record = {}
        for f in dist.files or []:
            h = f.hash
            value = _hex("%s=%s" % (h.mode, h.value)) if h is not None else None
            record[str(f).replace(os.sep, "/")] = value
    root = os.path.realpath(str(dist.locate_file("")))
    return Dist(dist.metadata["Name"], dist.version, root, record)


def _plain_metadata(dist: Any) -> bool:
    """importlib.metadata reads by name (egg-info, odd finders): its metadata files must be
    bounded regular files, not links, before it opens them (a FIFO hung it, /dev/zero ran it
    out of memory)."""
    where = getattr(dist, "_path", None)
    if where is None:
        return True
    for name in ("METADATA", "PKG-INFO", "RECORD", "installed-files.txt", "SOURCES.txt"):
        try:
            st = os.lstat(os.path.join(str(where), name))
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RECORD_BYTES:
            return False
    return True


def file_info(dist: Dist, rel: str) -> dict[str, Any]:
    """Everything the controller needs to decide about one target file.

    The RECORD keeps a spec to its own package: a file that exists but belongs to no one or to
    another distribution in the same site-packages is refused."""
    root = dist.root
    path = os.path.join(root, *rel.split("/"))
    info: dict[str, Any] = {
        "path": path,
        "exists": False,
        "sha256": None,
        "record_sha256": (dist.record or {}).get(rel),
        "text": None,
        "error": None,
    }
    try:
        names = fdwalk.parts(rel)
        with fdwalk.open_root(root) as top:
            where, name = fdwalk.reach(top, names)
    except FileNotFoundError:
        return info
    except OSError as exc:  # a link on the way, a `..`: nothing is read
        why = getattr(exc, "why", None) or exc.strerror
        if "symlink" in str(why):
            why = "is a symlink, or under one (%s)" % exc.filename
        info["error"] = "%s; vpatch edits only regular files" % why
        info["in_record"] = True
        return info
    with where:
        return _file_info(dist, rel, where, name, info)


def _file_info(
    dist: Dist, rel: str, where: fdwalk.Dir, name: str, info: dict[str, Any]
) -> dict[str, Any]:
    st = where.lstat(name)
    if st is None:
        return info
    if stat.S_ISLNK(st.st_mode):
        info["error"] = "is a symlink; vpatch edits only regular files"
        return info
    if not stat.S_ISREG(st.st_mode):
        info["error"] = "is not a regular file"
        return info
    if dist.record is not None and rel not in dist.record:
        # Refused for edits; a module vpatch's add_file created is read all the same.
        info["error"] = "is not a file of %s (not in its RECORD): not the package's own" % (
            dist.name
        )
        info["in_record"] = False
    try:
        data = where.read(name, fsops.MAX_FILE_BYTES)[0]  # its text travels: bounded
    except fsops.TooBig:
        info["error"] = "is larger than %d bytes: vpatch edits source files up to that size" % (
            fsops.MAX_FILE_BYTES
        )
        info["in_record"] = True  # refused for add_file too
        return info
    except fdwalk.Unsafe as exc:  # swapped since the lstat, or hard-linked from elsewhere
        info["error"] = "%s; vpatch edits only regular files" % exc.why
        info["in_record"] = True
        return info
    info["exists"] = True
    info["sha256"] = fsops.sha256_bytes(data)
    try:
        info["text"] = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        info["error"] = "is not UTF-8 text (%s)" % exc.reason
        info["in_record"] = True  # undecodable: refused for add_file too
    path = info["path"]
    why = fsops.unwritable(os.path.dirname(path))
    info["writable"], info["why_unwritable"] = not why, why
    info["free"] = fsops.free_bytes(os.path.dirname(path))
    return info


def editable(dist: Dist) -> str | None:
    """The source tree of an editable install (`pip install -e SRC`: direct_url.json says
    `dir_info.editable`), as the URL pip recorded; None for anything else. Such a package's
    code is SRC's files, which RECORD does not list: vpatch refuses it (exit 2) rather than
    patch or diff the wrong bytes."""
    for rel in dist.record or {}:
        if not rel.endswith(".dist-info/direct_url.json") or rel.count("/") != 1:
            continue
        try:
            with open(os.path.join(dist.root, rel), "rb") as fh:
                doc = wire.loads(fh.read(1 << 16).decode("utf-8"))
        except (OSError, ValueError):
            return None
        info = doc.get("dir_info") if isinstance(doc, dict) else None
        if isinstance(info, dict) and info.get("editable") is True:
            return str(doc.get("url") or "?")
    return None
