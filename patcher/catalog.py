"""Resolve spec arguments (paths or ids) to validated specs.

An argument that names an existing file (or ends in .toml) is a path; anything else is an id
looked up as `<catalog>/<id>.toml`, where the catalog is $VPATCH_CATALOG or ./patches.
"""

from __future__ import annotations

import os
from pathlib import Path

from patcher.errors import SpecError
from patcher.spec import PatchSpec, load_spec


def catalog_dir() -> Path:
    return Path(os.environ.get("VPATCH_CATALOG", "patches"))


def resolve(arg: str) -> Path:
    p = Path(arg)
    if p.exists() or arg.endswith(".toml") or "/" in arg:
        return p
    candidate = catalog_dir() / f"{arg}.toml"
    if candidate.exists():
        return candidate
    known = sorted(f.stem for f in catalog_dir().glob("*.toml"))
    raise SpecError(
        f"no spec file or catalog id {arg!r}",
        f"known ids in {catalog_dir()}: {', '.join(known) or '(none)'}",
    )


def load_or_ids(args: list[str]) -> tuple[list[PatchSpec], list[str]]:
    """For rollback: arguments that are neither a spec file nor a catalog id but look like an
    id are taken as journal ids (the journal records every spec's edits, so rolling one back
    needs no spec file)."""
    from patcher.spec import _ID

    found, ids = [], []
    for arg in args:
        try:
            resolve(arg)
            found.append(arg)
        except SpecError:
            if not _ID.match(arg):
                raise
            ids.append(arg)
    return load_all(found), ids


def load_all(args: list[str]) -> list[PatchSpec]:
    """Load every spec; duplicate ids are an input error (they would fight over one journal)."""
    specs: list[PatchSpec] = []
    seen: dict[str, str] = {}
    for arg in args:
        spec = load_spec(resolve(arg))
        if spec.id in seen:
            raise SpecError(
                f"{arg}: spec id {spec.id!r} is also used by {seen[spec.id]}",
                "give each spec a unique id",
            )
        seen[spec.id] = arg
        specs.append(spec)
    return specs
