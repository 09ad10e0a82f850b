"""docs/design.md is the truth about the code: every file, folder and module it names exists.
A move that leaves the page naming a file that is gone fails here, with the name."""

from __future__ import annotations

import importlib
import re
import types

from tests.conftest import REPO

DESIGN = REPO / "docs" / "design.md"
PATCHER = REPO / "patcher"
ROOMS = {p.name for p in PATCHER.iterdir() if p.is_dir() and (p / "__init__.py").exists()}

# Names the page uses that are not this repo's files, each for its reason.
NOT_OURS = {
    "docker.py": "the new file of the 'Adding a transport' walk-through",
    "version.py": "pydantic's file, read by the spec cache's key",
    "apport_python_hook.py": "Debian's stdlib hook a root `.pth` attack plants",
    "sitecustomize.py": "the interpreter's start-up hook an attack plants",
}

_PATH = re.compile(r"\b((?:patcher|tests|bench|docs|man|ansible_collections)/[\w./-]*\w)")
_FILE = re.compile(r"`(\w+\.py)`")
_DOTTED = re.compile(r"`([a-z_]+(?:\.[A-Za-z_]+)+)")


def _placeholder(path: str) -> bool:
    """`tests/cases/OP/`: a part in capitals stands for any name."""
    return any(part.isupper() for part in path.split("/"))


def missing_paths(text: str) -> list[str]:
    found = {p for p in _PATH.findall(text) if p not in NOT_OURS and not _placeholder(p)}
    return sorted(p for p in found if not (REPO / p).exists())


def missing_files(text: str) -> list[str]:
    tracked = {p.name for p in REPO.rglob("*.py") if ".venv" not in p.parts}
    return sorted({n for n in _FILE.findall(text) if n not in NOT_OURS and n not in tracked})


def _resolves(dotted: str) -> bool:
    """`room.module[.attr...]` as the page writes it names a module of patcher/ (and a name
    defined in it, where it goes on: `rollout.walk.Settings` fails where walk only imports
    Settings from rollout/settings.py, so the page points at the file that holds it)."""
    parts = dotted.split(".")
    obj: object = importlib.import_module(f"patcher.{parts[0]}")
    for part in parts[1:]:
        found = getattr(obj, part, None)
        home = getattr(found, "__module__", None)
        if found is not None and (
            not isinstance(obj, types.ModuleType) or home in (None, obj.__name__)
        ):
            obj = found  # a module's own name, not one it imported from elsewhere
            continue
        try:
            obj = importlib.import_module(f"{getattr(obj, '__name__', '')}.{part}")
        except ImportError:
            return False
    return True


def missing_modules(text: str) -> list[str]:
    names = {d for d in _DOTTED.findall(text) if d.split(".")[0] in ROOMS}
    return sorted(d for d in names if not _resolves(d))


def test_design_names_only_what_exists() -> None:
    text = DESIGN.read_text()
    assert missing_paths(text) == []
    assert missing_files(text) == []
    assert missing_modules(text) == []


def test_the_name_check_can_fail() -> None:
    text = (
        "see tests/cases/OP/, patcher/rollout/rolloutlease.py and `rolloutlease.py`; "
        "`rollout.walk.Settings`, `plan.baked`; but patcher/rollout/walk.py, `walk.py`, "
        "`rollout.settings.Settings`"
    )
    assert missing_paths(text) == ["patcher/rollout/rolloutlease.py"]
    assert missing_files(text) == ["rolloutlease.py"]
    assert missing_modules(text) == ["plan.baked", "rollout.walk.Settings"]
