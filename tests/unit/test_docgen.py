"""The generated reference pages (patcher.commands._docgen) cover everything they claim to, and the
docs
pages this site is built from open with the commands a user types."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from patcher import result
from patcher._compat import tomllib
from patcher.commands import _docgen, build_parser
from patcher.commands._help import help_with_default, subcommands
from patcher.plan.verdicts import MATRIX_FAILING
from patcher.specs.validate import PatchSpec

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    seen.add(model)
    for field in model.model_fields.values():
        for arg in re.findall(r"[A-Za-z]+", str(field.annotation)):
            sub = getattr(__import__("patcher.specs.validate", fromlist=[arg]), arg, None)
            if isinstance(sub, type) and issubclass(sub, BaseModel) and sub not in seen:
                _models(sub, seen)
    return seen


def test_spec_reference_lists_every_field_of_every_model() -> None:
    text = _docgen.spec_fields()
    models = _models(PatchSpec, set())
    assert len(models) >= 9  # PatchSpec, Variant, six edit ops, Probe, MetricsThresholds
    for model in models:
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"{model.__name__}.{name} missing"


def test_cli_reference_has_every_subcommand() -> None:
    """Each with what it does and an example; `%` printed as `%` (help texts are %-formatted,
    metavars are not: `N|P%%` once showed up doubled)."""
    text = _docgen.cli()
    subs = subcommands(build_parser())
    assert "matrix" in subs and "apply" in subs and "completion" in subs
    for name, sub in subs.items():
        assert f"## `vpatch {name}`" in text
        assert sub.description and sub.epilog and sub.epilog.startswith("example:\n  ")
        assert f"  vpatch {name}" in sub.epilog or name == "completion", sub.epilog
        assert sub.description.split()[0][0].isupper()
    assert "%%" not in text
    assert "--batch N|P%" in text and "(or P%)" in text
    assert "| [`SPEC`](#apply-spec){#apply-spec} | a spec: a .toml path, or a catalog id" in text


def test_cli_reference_fits_the_column() -> None:
    """Every code block of the CLI reference (each usage, each example) is at most COLUMN
    characters wide, where `--help` is 100: the site's column holds about 80 (measured in
    headless Chromium by tests/unit/test_site.py); a long example is continued with `\\`
    between words, never inside a quoted one."""
    text = _docgen.cli()
    blocks = re.findall(r"^```[a-z]+\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 2 * len(subcommands(build_parser()))
    widest = max(len(line) for block in blocks for line in block.splitlines())
    assert widest <= _docgen.COLUMN < 100, widest
    assert "--batch 25% --restart 'systemctl restart vllm' \\\n" in text  # continued
    assert _docgen._wrap_command("a --x 'b c d' e", 9) == ["a \\", "    --x 'b c d' \\", "    e"]
    assert _docgen._wrap_command("short line", 72) == ["short line"]


def test_help_says_every_default() -> None:
    """Each option with a value of its own says it in --help as `(default: X)`, where the
    words named it as `(X)` before (`seconds per agent call (600)`) or not at all."""
    subs = subcommands(build_parser())
    apply, rollout = subs["apply"].format_help(), subs["rollout"].format_help()
    assert "seconds per agent call (default: 600)" in " ".join(apply.split())
    assert "hosts at once (default: 16)" in " ".join(apply.split())
    assert "(default: 900)" in rollout and "(default: 10.0)" not in apply
    assert "(default: None)" not in apply and "(default: False)" not in apply
    for name, sub in subs.items():
        for action in sub._actions:
            value = action.default
            if action.option_strings and action.nargs != 0 and value not in (None, "", []):
                assert "default" in help_with_default(action), (name, action.option_strings)
    bare = argparse.ArgumentParser().add_argument("--jobs", default=4, help="downloads at once")
    assert help_with_default(bare) == "downloads at once (default: 4)"


def _groff(page: str) -> subprocess.CompletedProcess[str]:
    groff = shutil.which("groff")
    assert groff, "groff is needed (Debian: apt-get install groff-base)"
    return subprocess.run(
        [groff, "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True
    )


def test_man_page_has_every_command_and_option_and_renders_cleanly(tmp_path: Path) -> None:
    page = _docgen.manpage()
    assert page.startswith(".TH VPATCH 1 ")
    for name, sub in subcommands(build_parser()).items():
        assert f"\n.SS {name}\n" in page, name
        for action in sub._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert "\\fB" + opt.replace("-", "\\-") + "\\fR" in page, (name, opt)
    assert "seconds per agent call (default: 600)" in page
    done = _groff(page)  # -ww: every warning on stderr
    assert done.returncode == 0 and done.stderr == "", done.stderr
    broken = _groff(page.replace(".SS apply", ".SS apply\n\\fB\\-\\-oops\\f(", 1))
    assert broken.stderr, "groff -ww must warn on a bad escape: the check above can fail"
    # `make docs` writes it into the site: the mkdocs hook, run on a site directory
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "_hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    hooks.on_post_build({"site_dir": str(tmp_path)})
    assert (tmp_path / "vpatch.1").read_text() == page


def test_committed_man_page_is_the_parsers() -> None:
    """The wheel installs man/vpatch.1 (pyproject's data-files: share/man/man1/vpatch.1); it is
    committed because the isolated build cannot import the CLI, so it must be what the parser
    says now (tests/integration/test_python_versions.py finds it in the built wheel)."""
    committed = (REPO / "man" / "vpatch.1").read_text()
    assert committed == _docgen.manpage(), "man/vpatch.1 is stale: run `make man` and commit it"
    data_files = PYPROJECT["tool"]["setuptools"]["data-files"]
    assert data_files == {"share/man/man1": ["man/vpatch.1"]}


def test_result_and_matrix_references_cover_the_models() -> None:
    text = _docgen.result_json()
    for cls in (result.RunResult, result.HostResult, result.PatchResult):
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in text
    outcomes = _docgen.outcomes()
    assert all(f"`{o}`" in outcomes for o in ("applied", "drifted", "skipped"))
    assert "`not_covered` | yes" in _docgen.matrix_json()
    assert set(MATRIX_FAILING) <= {"anchor_missing", "ambiguous", "not_covered", "failed"}


def test_unknown_marker_is_an_error() -> None:
    assert _docgen.expand("a\n<!-- vpatch:outcomes -->\nb").startswith("a\n| outcome |")
    with pytest.raises(KeyError, match="vpatch:nope"):
        _docgen.expand("<!-- vpatch:nope -->")


@pytest.mark.parametrize(
    "page",
    [
        "index.md",
        "tutorial.md",
        "spec.md",
        "matrix.md",
        "design.md",
        "inventory.md",
        "reference/spec.md",
        "reference/cli.md",
        "reference/json.md",
    ],
)
def test_page_opens_with_the_commands(page: str) -> None:
    lines = (DOCS / page).read_text().splitlines()
    assert lines[0].startswith("# ")
    assert lines[1] == "" and lines[2] == "```sh", f"{page}: title, then a ```sh block"
    assert lines[3].startswith(("vpatch", "git clone")) or "vpatch" in lines[3]


def test_every_option_of_every_command_has_its_anchor() -> None:
    """The CLI reference links each option by a stable anchor (`#apply--level`), with its help
    and default next to it; every option a parser has is there, under its own command."""
    text = _docgen.cli()
    parser = build_parser()
    pages = {"vpatch": parser, **subcommands(parser)}
    seen: set[str] = set()
    for name, sub in pages.items():
        actions = _docgen.documented_actions(sub)
        for action in actions:
            anchor = _docgen.option_anchor(name, action)
            assert anchor not in seen, anchor
            seen.add(anchor)
            row = next((r for r in text.splitlines() if f"{{#{anchor}}}" in r), None)
            assert row is not None, f"{name}: {action.option_strings or action.dest} has no anchor"
            assert f"](#{anchor}){{#{anchor}}}" in row and row.startswith("| [`")
            assert action.help, f"{name}: {action.option_strings or action.dest} has no help"
            first = action.help.replace("%%", "%").replace("<", "&lt;").split()[0]
            assert first in row, (anchor, row)
    assert "apply--level" in seen and "vpatch--json" in seen and "apply-spec" in seen
    assert "apply--quiet" in seen and "status--verbose" in seen
    level = next(r for r in text.splitlines() if "{#apply--level}" in r)
    assert level.endswith("| `full` |"), level
