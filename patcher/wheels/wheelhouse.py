"""Wheels already on disk: wheelhouses (`--wheelhouse`, $VPATCH_WHEELHOUSE) for air-gapped
fleets and the directories in $VPATCH_MATRIX_WHEELS (e.g. a test suite's wheels), used in
place and never deleted. A release found here costs no network at all.

A file is a wheel only when its whole name is one (`parse`: PEP 427's characters in every
part, then packaging's `parse_wheel_filename`): a name that does not parse is never used, and
one that would have passed for the wanted release under a looser reading (bytes after a build
tag's digits: an ESC sequence) is refused aloud. Among several wheels of one release, the order
is fixed (`find`): sources in their order, and in one source pip's own preference, the highest
build tag first (no build tag lowest), then the file name. Who may have written a source is
checked where it is opened (`trust.open_source`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import BuildTag, NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from patcher.errors import UsageError
from patcher.output.inert import clean

# PEP 427: name-version(-build)?-python-abi-platform.whl, each part of these characters only
# (`+` for a local version label, `!` for an epoch); the build tag starts with a digit.
_NAME = re.compile(
    r"[A-Za-z0-9._]+-[A-Za-z0-9._+!]+(?:-[0-9][A-Za-z0-9._]*)?"
    r"-[A-Za-z0-9._]+-[A-Za-z0-9._]+-[A-Za-z0-9._]+\.whl"
)
_Parsed = tuple[NormalizedName, Version, BuildTag, frozenset[Tag]]


def parse(name: str) -> _Parsed | None:
    """A wheel file name's (name, version, build tag, tags), or None when it is not strictly
    one."""
    if not _NAME.fullmatch(name):
        return None
    try:
        return parse_wheel_filename(name)
    except ValueError:  # packaging's InvalidWheelFilename / InvalidVersion
        return None


def _loosely(name: str) -> _Parsed | None:
    try:
        return parse_wheel_filename(name)
    except ValueError:
        return None


def _preference(build: BuildTag) -> tuple[int, int, str]:
    """Sort key, highest first: a build tag over none, then the higher build (pip's order)."""
    return (1, build[0], build[1]) if build else (0, 0, "")


def checked(paths: Sequence[str | Path]) -> list[Path]:
    """A run's `--wheelhouse` paths, each an existing directory or .whl file (else UsageError,
    exit 2). The run keeps them (`Store.wheelhouses`): nothing here outlives a command."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if not (path.is_dir() or (path.is_file() and path.name.endswith(".whl"))):
            raise UsageError(
                f"--wheelhouse {p}: no such directory or .whl file",
                "pass a directory of wheels (pip download -d DIR) or a wheel file",
            )
        out.append(path)
    return out


def wheelhouses(given: Sequence[Path] = ()) -> list[Path]:
    """The wheelhouses of a run: its `--wheelhouse` paths (`given`), then $VPATCH_WHEELHOUSE."""
    env = [Path(p) for p in os.environ.get("VPATCH_WHEELHOUSE", "").split(os.pathsep) if p]
    return [*given, *env]


def wheel_dirs() -> list[Path]:
    """The directories in $VPATCH_MATRIX_WHEELS (a test suite's wheels)."""
    return [Path(p) for p in os.environ.get("VPATCH_MATRIX_WHEELS", "").split(os.pathsep) if p]


def find(sources: Sequence[Path], package: str, version: Version) -> list[Path]:
    """Wheels of package==version in these directories or wheel files (any platform tag: the
    .py files are the same): sources in order; in one source the highest build tag first (no
    build tag last), then by file name. A name that only a loose reading takes for this
    release is refused (trust.UnsafeStore), never skipped in silence."""
    from patcher.wheels.trust import UnsafeStore

    want = canonicalize_name(package)
    out: list[Path] = []
    for src in sources:
        if src.is_file():
            candidates = [src]
        elif src.is_dir():
            candidates = sorted(src.glob("*.whl"))
        else:
            continue
        found: list[tuple[Path, BuildTag]] = []
        for path in candidates:
            got = parse(path.name)
            if got is None:
                loose = _loosely(path.name)
                if loose is not None and loose[0] == want and loose[1] == version:
                    raise UnsafeStore(
                        f"{clean(str(path))}: not a wheel file name (PEP 427), refused",
                        "rename or remove it; a wheel's name is name-version-tags.whl",
                    )
                continue
            name, ver, build, _tags = got
            if name == want and ver == version:
                found.append((path, build))
        found.sort(key=lambda f: f[0].name)
        found.sort(key=lambda f: _preference(f[1]), reverse=True)
        out += [path for path, _build in found]
    return out


def listed_versions(package: str, given: Sequence[Path] = ()) -> list[Version]:
    """Releases of `package` the wheelhouses hold (the matrix's listing when pip has none)."""
    want = canonicalize_name(package)
    found: set[Version] = set()
    for src in everywhere(given):
        for path in [src] if src.is_file() else sorted(src.glob("*.whl")) if src.is_dir() else []:
            got = parse(path.name)
            if got is not None and got[0] == want:
                found.add(got[1])
    return sorted(found)


def everywhere(given: Sequence[Path] = ()) -> list[Path]:
    """Every directory or wheel file to look in, in order: wheelhouses, then wheel dirs."""
    return [*wheelhouses(given), *wheel_dirs()]
