"""Wheels `vpatch wheel` built, found installed (stdlib only, 3.9+): bare status reports them.

Why: a spec baked into a wheel has no journal entry (nothing was written on the host), so a
bare `status`, `rollback`, `diff` or `rollout` saw nothing and said "nothing recorded" or
"every file is pip's", although the wheel's dist-info names the specs in `vpatch.json`. Here
every dist-info of the environment's site-packages whose version carries the `vpatch` local
label (`vllm-0.16.0+vpatch.<digest>.dist-info`) is read: its vpatch.json (bounded) and the
sha256 of each file a baked spec changed, now. The controller decides (patcher.plan.monitor).

Reads go through the descriptor walk (confine.reach): a dist-info or a file that is a link, or
not a regular file, is skipped with the reason, never followed.
"""

from __future__ import annotations

import os

from . import confine, fdwalk, fsops, wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MANIFEST = "vpatch.json"
MAX_MANIFEST_BYTES = 1 << 20  # a manifest names specs and files: kilobytes


def label(dist_info: str) -> tuple[str, str] | None:
    """(name, version) of a dist-info directory name whose version's local label has the
    `vpatch` segment (the one `vpatch wheel` adds); None for any other."""
    if not dist_info.endswith(".dist-info"):
        return None
    name, sep, version = dist_info[: -len(".dist-info")].partition("-")
    local = version.partition("+")[2]
    if not sep or "vpatch" not in local.split("."):
        return None
    return name, version


def find(warnings: list[str]) -> list[dict[str, Any]]:
    """Each baked distribution: {"package", "version", "dist_info", "manifest", "current"
    (file -> sha256 now, None when missing)}; what cannot be read goes to `warnings`."""
    dirs = confine.roots()
    out: list[dict[str, Any]] = []
    for root in list(dirs):
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for name in names:
            got = label(name)
            if got is None:
                continue
            path = os.path.join(root, name, MANIFEST)
            try:
                manifest = wire.loads(_read(path, dirs, MAX_MANIFEST_BYTES).decode("utf-8"))
            except (OSError, ValueError, fdwalk.Unsafe) as exc:
                warnings.append("%s: not read (%s)" % (path, getattr(exc, "why", exc)))
                continue
            if not isinstance(manifest, dict):
                warnings.append("%s: not a vpatch.json object" % path)
                continue
            out.append(
                {
                    "package": got[0],
                    "version": got[1],
                    "dist_info": os.path.join(root, name),
                    "manifest": manifest,
                    "current": _current(root, dirs, manifest),
                }
            )
    return out


def _read(path: str, dirs: Any, limit: int) -> bytes:
    where, name = confine.reach(path, dirs, must_exist=True)
    with where:
        return where.read(name, limit)[0]


def _current(root: str, dirs: Any, manifest: dict[str, Any]) -> dict[str, str | None]:
    """file -> sha256 now of every file the manifest's specs name (None: missing or refused)."""
    out: dict[str, str | None] = {}
    for spec in manifest.get("specs") or []:
        for f in (spec.get("files") or []) if isinstance(spec, dict) else []:
            rel = f.get("file") if isinstance(f, dict) else None
            if not isinstance(rel, str) or rel in out:
                continue
            try:
                fdwalk.parts(rel)  # a relative path below the root, no '..'
                data = _read(os.path.join(root, rel), dirs, fsops.MAX_FILE_BYTES)
                out[rel] = fsops.sha256_bytes(data)
            except (OSError, fdwalk.Unsafe):
                out[rel] = None
    return out
