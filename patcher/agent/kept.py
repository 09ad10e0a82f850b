"""The agent's code kept on its host between runs: what the loader does after a miss, or on an
interpreter of another bytecode magic than the controller's (patcher/transports/bundle.py,
`kept_boot`).

The loader itself (run as `python -I -c BOOT`, or as privsep's stage 0) holds only what a
start that finds its bundle needs: the cache directory opened from `/` without following a
link and checked on each descriptor (`D`), the entry read on its descriptor (`Y`), the hash
(`V`). This module is the rest, run from the bundle it came with: keeping a bundle the
controller had to send (only one whose hash is the key the loader was given), and for an
interpreter whose magic the bundle has no code objects for, compiling every module once and
keeping the code objects beside the bundle, loaded on later starts. It is executed by the
loader as a bare module (not through the package, whose `__init__` must not be imported
before the code objects are in place), and uses the loader's own `D` and `Y`, passed in: one
copy of the checks, the one that also guards the bundle.

Every file is written as a temp file created `O_EXCL|O_NOFOLLOW` on the checked directory's
descriptor, 0600, then renamed over the entry on that descriptor; only the 16 newest entries
stay. A code file starts with the BLAKE2b-256 digest of the rest: a torn or changed one is
compiled anew and replaced, never loaded; one that someone else owns, that others may write
or that has another link is refused by `Y` as the bundle is. Stdlib only, Python 3.9+.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing
    from typing import Any, Callable

KEEP = 16  # entries (bundles and code files) left in the directory after a write


def _blake2b(data: bytes) -> Any:
    try:
        from _blake2 import blake2b  # the interpreter's own C module: no OpenSSL to load
    except ImportError:
        from hashlib import blake2b
    return blake2b(data, digest_size=32)


def name_of(data: bytes) -> str:
    """The name a bundle is kept under: its BLAKE2b-256 digest (transports.bundle.agent_key)."""
    return str(_blake2b(data).hexdigest())


def settle(
    m: dict[str, Any],
    c: str,
    key: str,
    sent: bytes | None,
    directory: Callable[[int, bool], tuple[int, str]],
    read: Callable[[int, str], tuple[bytes | None, str]],
) -> None:
    """After the loader parsed the bundle into `m` (module name -> source; `c` + name -> code
    for this interpreter's magic `c`): keep `sent`, the bundle the controller just sent, when
    its hash is `key`; and where `m` has no code objects for this magic, put them there, from
    the kept code file or compiled now and kept."""
    uid = os.geteuid()
    if sent is not None and name_of(sent) == key:
        try:
            store(uid, key + ".bundle", sent, directory)
        except (OSError, KeyError):
            pass  # not kept: the next run is sent it again
    if c + "vpatch_agent" not in m:
        codes(m, c, key, uid, directory, read)


def codes(
    m: dict[str, Any],
    c: str,
    key: str,
    uid: int,
    directory: Callable[[int, bool], tuple[int, str]],
    read: Callable[[int, str], tuple[bytes | None, str]],
) -> None:
    """Code objects for this interpreter's magic into `m` (as marshalled bytes, which the
    loader's importer takes as they are): the kept file's, when it is whole and holds every
    module; else every module compiled here, as the loader compiles a source, and kept."""
    import binascii
    import marshal
    import zlib

    name = "%s.%s.code" % (key, c[1:-1])
    mods = sorted(n for n in m if not n.startswith("#"))
    try:
        data, _why = read(uid, name)
        if data is not None and _blake2b(data[32:]).digest() == data[:32]:
            found = marshal.loads(data[32:])
            if isinstance(found, dict) and sorted(found) == mods:
                for n in mods:
                    m[c + n] = found[n]
                return
    except (OSError, KeyError, ValueError, EOFError, TypeError):
        pass
    try:
        built = {}
        for n in mods:
            source = zlib.decompress(binascii.a2b_base64(m[n]))
            built[n] = marshal.dumps(compile(source, "<%s>" % n, "exec"))
    except (SyntaxError, ValueError, zlib.error):
        return  # the importer compiles each module itself, and says what fails
    for n in mods:
        m[c + n] = built[n]
    body = marshal.dumps(built)
    try:
        store(uid, name, _blake2b(body).digest() + body, directory)
    except (OSError, KeyError):
        pass


def store(
    uid: int, name: str, data: bytes, directory: Callable[[int, bool], tuple[int, str]]
) -> None:
    """Keep `data` as `name` in the cache directory (made 0700 where missing, and only when
    the loader's checks accept it), then drop all but the KEEP newest entries."""
    fd, why = directory(uid, True)
    try:
        if why:
            return
        tmp = ".%s.%d.tmp" % (name, os.getpid())
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(tmp, flags, 0o600, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        finally:
            os.close(out)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        entries = sorted(
            (os.stat(n, dir_fd=fd, follow_symlinks=False).st_mtime, n)
            for n in os.listdir(fd)
            if n.endswith((".bundle", ".code"))
        )
        for _mtime, n in entries[:-KEEP]:
            os.unlink(n, dir_fd=fd)
    finally:
        os.close(fd)
