"""How many fresh interpreters a spec's checks cost (checks_for, recorded_checks):
a changed module that a probe's import already imports (the probe's module or a package
above it) gets no import check of its own, and an import-level recheck imports every module
its recorded checks named in one interpreter."""

from __future__ import annotations

from pathlib import Path

from patcher.plan.base import checks_for, imported_by, recorded_checks
from patcher.specs.model import load_spec
from tests.support.specs import edit, probe, spec_toml

# A multi-file variant: the package's __init__, two submodules; a probe on one submodule.
SPEC = spec_toml(
    id="multi",
    summary="three files",
    package="toy",
    versions=">=1.0",
    file="toy/a.py",
    edits=[
        edit("set_value", target="A", value="1"),
        edit("set_value", file="toy/__init__.py", target="X", value="1"),
        edit("set_value", file="toy/b.py", target="B", value="1"),
    ],
    probes=[probe("a works", "toy.a", "assert module.A == 1")],
)


def test_a_probed_submodule_covers_its_package(tmp_path: Path) -> None:
    path = tmp_path / "multi.toml"
    path.write_text(SPEC)
    spec = load_spec(path)
    variant = spec.variant[0]
    assert sorted(variant.modules) == ["toy", "toy.a", "toy.b"]
    full = checks_for(spec, variant, "full")
    # toy.a: the probe imports it; toy: importing toy.a imports it first; toy.b: its own
    assert full == [
        {"name": "import toy.b", "module": "toy.b", "code": ""},
        {"name": "a works", "module": "toy.a", "code": "assert module.A == 1", "timeout": 120.0},
    ]
    imp = checks_for(spec, variant, "import")
    assert len(imp) == 1 and sorted(imp[0]["name"][len("import ") :].split(", ")) == sorted(
        variant.modules
    )
    # An import-level recheck of what full recorded: one interpreter for toy.b and toy.a.
    entry = {"checks": full, "level": "full"}
    assert recorded_checks(entry, "import") == [
        {"name": "import toy.b, toy.a", "module": "toy.b", "code": "import toy.a\n"}
    ]
    assert recorded_checks(entry, "full") == full
    assert recorded_checks(entry, "static") == []
    assert recorded_checks({"checks": imp, "level": "import"}, "import") == imp


def test_imported_by_is_each_module_and_its_packages() -> None:
    assert imported_by(["a.b.c", "d"]) == {"a", "a.b", "a.b.c", "d"}
    assert imported_by([]) == set()
