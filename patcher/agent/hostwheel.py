"""Members of a wheel file on the host (`vpatch diff/capture --host-wheel PATH`): the pristine
side when the controller has no wheel of the release (air-gapped, and no wheelhouse).

The file is opened without following a link and must be a regular file; a member is read only
if its size in the zip's directory is within the bound, and its read stops one byte past the
bound (a zip may lie about sizes). Nothing here is trusted by the controller: it keeps a
member only when it hashes to the sha256 the environment's RECORD lists for the file
(`patcher.commands.authoring`), i.e. the bytes the diff judges the host's file against.
"""

from __future__ import annotations

import os
import stat

from . import protocol

TYPE_CHECKING = False  # annotations only: the agent does not import typing
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

MAX_MEMBER = 16 * 1024 * 1024
MAX_TOTAL = 64 * 1024 * 1024


def _no(message: str) -> protocol.Refused:
    return protocol.Refused(message, protocol.INPUT)


def read(path: str, rels: List[str], max_member: int = MAX_MEMBER) -> Dict[str, Any]:
    """{"members": {rel: base64 or None (not in the wheel)}, "wheel": the file's name}."""
    import base64
    import zipfile

    if not os.path.isabs(path) or not path.endswith(".whl"):
        raise _no("--host-wheel must be an absolute path to a .whl file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _no("%s: %s" % (path, exc.strerror)) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _no("%s: not a regular file" % path)
        try:
            zf = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise _no("%s: not a readable wheel (%s)" % (path, exc)) from None
        with zf:
            members: Dict[str, str] = {}
            for name in zf.namelist():
                parts = name.split("/")
                if len(parts) > 2 and parts[0].endswith(".data"):
                    if parts[1] in ("purelib", "platlib"):
                        members.setdefault("/".join(parts[2:]), name)
                else:
                    members.setdefault(name, name)
            out: Dict[str, Optional[str]] = {}
            total = 0
            for rel in rels:
                member = members.get(str(rel))
                if member is None:
                    out[str(rel)] = None
                    continue
                info = zf.getinfo(member)
                if info.file_size > max_member or total + info.file_size > MAX_TOTAL:
                    raise _no("%s: %s is too large to send" % (path, member))
                try:
                    with zf.open(info) as m:
                        data = m.read(max_member + 1)
                except (zipfile.BadZipFile, OSError, EOFError) as exc:
                    raise _no("%s: %s: %s" % (path, member, exc)) from None
                if len(data) > max_member:
                    raise _no("%s: %s is too large to send" % (path, member))
                total += len(data)
                out[str(rel)] = base64.b64encode(data).decode("ascii")
    return {"members": out, "wheel": os.path.basename(path)}
