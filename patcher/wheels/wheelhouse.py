"""Wheels already on disk: wheelhouses (`--wheelhouse`, $VPATCH_WHEELHOUSE) for air-gapped
fleets and the directories in $VPATCH_MATRIX_WHEELS (e.g. a test suite's wheels), used in
place and never deleted. A release found here costs no network at all.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from patcher.errors import UsageError


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


def listed_versions(package: str, given: Sequence[Path] = ()) -> list[Version]:
    """Releases of `package` the wheelhouses hold (the matrix's listing when pip has none)."""
    want = canonicalize_name(package)
    found: set[Version] = set()
    for src in everywhere(given):
        for path in [src] if src.is_file() else sorted(src.glob("*.whl")) if src.is_dir() else []:
            try:
                name, ver, _build, _tags = parse_wheel_filename(path.name)
            except ValueError:
                continue
            if name == want:
                found.add(ver)
    return sorted(found)


def everywhere(given: Sequence[Path] = ()) -> list[Path]:
    """Every directory or wheel file to look in, in order: wheelhouses, then wheel dirs."""
    return [*wheelhouses(given), *wheel_dirs()]
