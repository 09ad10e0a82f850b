"""The docs site as a reader sees it: built by mkdocs as `make docs` builds it, then laid out by
headless Chromium at a desktop width, offline (tests/support/browser.py). The generated CLI
reference once reproduced `--help` at 100 columns, and every one of its code blocks scrolled
sideways in a column of about 80; `_docgen.COLUMN` is the promise, this is the measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from patcher._compat import tomllib
from tests.support import browser

REPO = Path(__file__).resolve().parents[2]
DESKTOP = 1400


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from this tree with `make docs`'s command into a temporary directory."""
    assert Path(sys.executable).with_name("mkdocs").exists(), "`make docs` installs mkdocs"
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(  # -m from the tree's root: its hooks import this tree's patcher
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_cli_reference_blocks_fit_the_column_at_desktop_width(site: Path) -> None:
    """No code block and no table of the CLI reference wider than the column at 1,400 px; and
    the same measure, in the same page, sees the one block made too wide on purpose (the
    probe), so it can fail."""
    page = browser.layout(site / "reference" / "cli" / "index.html", DESKTOP, probe=True)
    assert page.window == DESKTOP
    code = [b for b in page.blocks if b.kind == "code"]
    assert len(code) >= 2 * 17 + 1, len(code)  # a usage and an example per command, and more
    assert len([b for b in page.blocks if b.kind == "table"]) >= 18
    assert page.page <= page.window and 0 < page.column < page.window
    probe = [b for b in page.blocks if b.text.startswith("vpatch probe ")]
    assert len(probe) == 1 and probe[0].overflows, probe
    wide = [b for b in page.overflowing() if b not in probe]
    assert wide == [], "\n".join(f"{b.kind} {b.content}px > {b.box}px: {b.text}" for b in wide)


def test_figures_are_drawn_into_the_site_and_load_offline(site: Path) -> None:
    """The figures are SVG files of the site, drawn by Graphviz at build time from the code
    (patcher/commands/_figures.py), and a browser with no network shows them in the column."""
    from patcher.commands._figures import FIGURES

    for name in FIGURES:
        svg = (site / "figures" / f"{name}.svg").read_text()
        assert "<svg" in svg and "</svg>" in svg, name
    design = browser.layout(site / "design" / "index.html", DESKTOP)
    shown = {i.src for i in design.images}
    assert {"../figures/rooms.svg", "../figures/apply.svg"} <= shown, shown
    assert all(i.loaded and i.fits for i in design.images), design.images
    rollout = (site / "rollout" / "index.html").read_text()
    assert 'src="../figures/rollout.svg"' in rollout


def test_json_schemas_are_published_at_stable_addresses(site: Path) -> None:
    """schema/spec.json and schema/result.json are byte for byte what `vpatch schema` and
    `vpatch schema --result` print; the spec schema accepts the catalog's specs, and the spec
    and JSON pages link to them."""
    vpatch = Path(sys.executable).with_name("vpatch")
    for uri, args in (("schema/spec.json", []), ("schema/result.json", ["--result"])):
        printed = subprocess.run(
            [str(vpatch), "schema", *args], capture_output=True, text=True, check=True
        ).stdout
        assert (site / uri).read_text() == printed, uri
    spec = json.loads((site / "schema" / "spec.json").read_text())
    assert spec["$id"] == "urn:vpatch:schema:spec"
    validator = jsonschema.Draft202012Validator(spec)
    specs = [tomllib.loads(p.read_text()) for p in sorted((REPO / "patches").glob("*.toml"))]
    for one in specs:
        validator.validate(one)
    misspelled = [e.message for e in validator.iter_errors({**specs[0], "pakage": "vllm"})]
    assert len(misspelled) == 1 and "pakage" in misspelled[0], misspelled
    assert 'href="../schema/spec.json"' in (site / "spec" / "index.html").read_text()
    json_page = (site / "reference" / "json" / "index.html").read_text()
    assert 'href="../../schema/result.json"' in json_page
