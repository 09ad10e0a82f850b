"""Find installed distributions and their files without importing the package.

`importlib.metadata` reads only dist-info, so inspecting a broken or huge package (vLLM pulls in
torch on import) costs milliseconds. pip's RECORD gives the sha256 the file had at install time:
that is how we tell "pristine" from "edited by someone else".
"""

from __future__ import annotations

import base64
import importlib.metadata as metadata
import os
from typing import Any

from . import fsops


def distribution(package: str) -> Any:
    try:
        return metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None


def record_hashes(dist: Any) -> dict[str, str]:
    """RECORD path -> hex sha256 (RECORD stores urlsafe base64 without padding)."""
    out: dict[str, str] = {}
    for f in dist.files or []:
        if f.hash is not None and f.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4))
            out[str(f).replace(os.sep, "/")] = raw.hex()
    return out


def recorded(dist: Any) -> set[str] | None:
    """Every path pip's RECORD lists for `dist` (None without a RECORD, e.g. egg-info)."""
    if dist.read_text("RECORD") is None:
        return None
    return {str(f).replace(os.sep, "/") for f in dist.files or []}


def file_info(
    dist: Any, rel: str, hashes: dict[str, str], owned: set[str] | None = None
) -> dict[str, Any]:
    """Everything the controller needs to decide about one target file.

    `owned` (the RECORD's paths) keeps a spec to its own package: a file that exists but
    belongs to no one or to another distribution in the same site-packages is refused."""
    root = os.path.realpath(str(dist.locate_file("")))
    path = os.path.join(root, *rel.split("/"))
    info: dict[str, Any] = {
        "path": path,
        "exists": False,
        "sha256": None,
        "record_sha256": hashes.get(rel),
        "text": None,
        "error": None,
    }
    if not os.path.lexists(path):
        return info
    real = os.path.realpath(path)
    if os.path.islink(path) or not real.startswith(root + os.sep):
        info["error"] = "is a symlink (to %s); vpatch edits only regular files" % real
        return info
    if not os.path.isfile(path):
        info["error"] = "is not a regular file"
        return info
    if owned is not None and rel not in owned:
        name = dist.metadata["Name"]
        info["error"] = "is not a file of %s (not in its RECORD): not the package's own" % name
        return info
    data = fsops.read_bytes(path)
    info["exists"] = True
    info["sha256"] = fsops.sha256_bytes(data)
    try:
        info["text"] = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        info["error"] = "is not UTF-8 text (%s)" % exc.reason
    why = fsops.unwritable(os.path.dirname(path))
    info["writable"], info["why_unwritable"] = not why, why
    info["free"] = fsops.free_bytes(os.path.dirname(path))
    return info
