"""Resolve spec arguments (paths or ids) to validated specs.

An argument that names an existing file (or ends in .toml, or holds a `/`) is a path; anything
else is an id, looked up as `<dir>/<id>.toml` in the catalogs, first match wins:

    $VPATCH_CATALOG     a patch repo of your own (when set)
    ./patches           the catalog of the directory vpatch runs in
    shipped             the catalog inside the installed vpatch (patches/ of its source tree,
                        packaged as patcher/catalog_data/ in the wheel)

so a fleet's own patch repo can override a shipped spec, and `vpatch apply ID` works from any
directory with nothing but vpatch installed.

./patches is whatever the directory vpatch runs in holds, and a spec is code that runs on
every host: it is used only when it is a directory owned by the user vpatch runs as (or root)
that no group or other user can write; else it is skipped with a warning on stderr (root in a
user's checkout, or anyone in /tmp, never loads a stranger's spec by id).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from patcher.errors import SpecError
from patcher.specs.names import ID
from patcher.transports.ownedfile import group_named, user_named

if TYPE_CHECKING:
    from patcher.specs.model import PatchSpec

_HERE = Path(__file__).resolve().parent.parent  # patcher/


def catalog_dir() -> Path:
    """The local catalog: $VPATCH_CATALOG, else ./patches (the shipped one comes after it)."""
    return Path(os.environ.get("VPATCH_CATALOG", "patches"))


def shipped_dir() -> Path | None:
    """The catalog of this vpatch: the wheel's patcher/catalog_data/, or in a source checkout
    (an editable install) the patches/ next to the patcher/ package."""
    packaged = _HERE / "catalog_data"
    if packaged.is_dir():
        return packaged
    checkout = _HERE.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "patches").is_dir():
        return checkout / "patches"
    return None


def _sources() -> list[tuple[str, Path]]:
    """(label, directory) of every catalog in lookup order; one directory is listed once."""
    found: list[tuple[str, Path]] = []
    env = os.environ.get("VPATCH_CATALOG")
    if env:
        found.append(("$VPATCH_CATALOG", Path(env)))
    if _local_is_safe(Path("patches")):
        found.append(("./patches", Path("patches")))
    shipped = shipped_dir()
    if shipped is not None:
        found.append(("shipped", shipped))
    seen: set[Path] = set()
    out = []
    for label, d in found:
        key = d.resolve()
        if key not in seen and d.is_dir():
            seen.add(key)
            out.append((label, d))
    return out


def writer_problem(st: os.stat_result) -> str | None:
    """Why what `st` describes could have been written by someone other than the user vpatch
    runs as or root (None: it could not), naming that writer. The one owner/mode rule for
    every input that decides what runs where: a catalog, a wheel source and its directory
    (patcher.wheels.trust), an inventory and its vars files (patcher.inventory.targets)."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"owned by {user_named(st.st_uid)}, not by you (uid {os.geteuid()}) or root"
    if st.st_mode & 0o022:
        who = "every user" if st.st_mode & 0o002 else f"group {group_named(st.st_gid)}"
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o}: {who})"
    return None


def local_problem(d: Path) -> str | None:
    """Why ./patches must not be used (None: it may, or it is not there)."""
    try:
        st = d.stat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    why = writer_problem(st)
    return f"it is {why}" if why else None


def _local_is_safe(d: Path) -> bool:
    why = local_problem(d)
    if why is None:
        return True
    from patcher.output.lines import warning

    warning(
        f"./patches is not used as a catalog: {why}; its specs would run on"
        " every host (chown/chmod it, or set VPATCH_CATALOG to it)"
    )
    return False


class Entry(NamedTuple):  # not a dataclass: ~0.5 ms less on every command's path
    id: str
    source: str  # "$VPATCH_CATALOG", "./patches" or "shipped"
    path: Path
    shadows: tuple[Path, ...] = ()  # same id further down the lookup order, never used


class Catalog:
    """The catalogs as one command run sees them: listed once, on first use (so a ./patches
    that must not be used is warned about once per run, however many ids it resolves)."""

    def __init__(self) -> None:
        self._sources: list[tuple[str, Path]] | None = None

    def sources(self) -> list[tuple[str, Path]]:
        """(label, directory) of every catalog in lookup order; one directory is listed once."""
        if self._sources is None:
            self._sources = _sources()
        return self._sources

    def entries(self) -> list[Entry]:
        """Every id the catalogs offer, sorted, with the file `vpatch apply ID` would load."""
        by_id: dict[str, Entry] = {}
        for label, d in self.sources():
            for f in sorted(d.glob("*.toml")):
                old = by_id.get(f.stem)
                if old is None:
                    by_id[f.stem] = Entry(f.stem, label, f)
                else:
                    by_id[f.stem] = Entry(old.id, old.source, old.path, (*old.shadows, f))
        return [by_id[k] for k in sorted(by_id)]

    def resolve(self, arg: str) -> Path:
        """The spec file `arg` names: a path as it is, else `<id>.toml` of the first catalog
        that has it."""
        p = Path(arg)
        if p.exists() or arg.endswith(".toml") or "/" in arg:
            return p
        for _label, d in self.sources():
            candidate = d / f"{arg}.toml"
            if candidate.exists():
                return candidate
        where = ", ".join(f"{label} ({d})" for label, d in self.sources()) or "none found"
        ids = [e.id for e in self.entries()]
        known = ", ".join(ids) or "(none)"
        from patcher import suggest

        close = suggest.did_you_mean(arg, ids)
        raise SpecError(
            f"no spec file or catalog id {arg!r}",
            (f"{close} " if close else "")
            + f"known ids: {known}; catalogs: {where} (`vpatch catalog` lists them)",
        )

    def load_or_ids(self, args: list[str]) -> tuple[list[PatchSpec], list[str]]:
        """For rollback and verify: arguments that are neither a spec file nor a catalog id
        but look like an id are taken as journal ids (the journal records every spec's edits
        and checks, so neither needs the spec file)."""
        found, ids = [], []
        for arg in args:
            try:
                self.resolve(arg)
                found.append(arg)
            except SpecError:
                if not ID.fullmatch(arg):
                    raise
                ids.append(arg)
        return self.load_all(found), ids

    def load_all(self, args: list[str]) -> list[PatchSpec]:
        """Every spec; duplicate ids are an input error (they would fight over one journal)."""
        if not args:
            return []
        from patcher.specs import cache

        specs: list[PatchSpec] = []
        seen: dict[str, str] = {}
        for arg in args:
            spec = cache.load(self.resolve(arg))
            if spec.id in seen:
                raise SpecError(
                    f"{arg}: spec id {spec.id!r} is also used by {seen[spec.id]}",
                    "give each spec a unique id",
                )
            seen[spec.id] = arg
            specs.append(spec)
        return specs


def load_or_ids(args: list[str]) -> tuple[list[PatchSpec], list[str]]:
    """Catalog.load_or_ids for a command that reads the catalogs once."""
    return Catalog().load_or_ids(args)


def load_all(args: list[str]) -> list[PatchSpec]:
    """Catalog.load_all for a command that reads the catalogs once."""
    return Catalog().load_all(args)
