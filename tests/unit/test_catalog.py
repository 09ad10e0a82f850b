"""Catalog ids resolve from $VPATCH_CATALOG, then ./patches, then the catalog shipped inside
vpatch; the first that has `<id>.toml` wins, and `vpatch catalog` says which one that is."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests import jsondoc
from tests.conftest import REPO, SPEC, VPATCH

ID = SPEC.stem
IDS = sorted(p.stem for p in (REPO / "patches").glob("*.toml"))  # the catalog, in id order


def run(cwd: Path, *args: str, catalog: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VPATCH_CATALOG"}
    env["PYTHONPATH"] = str(REPO)
    if catalog is not None:
        env["VPATCH_CATALOG"] = str(catalog)
    return subprocess.run(
        [*VPATCH, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def listing(cwd: Path, catalog: Path | None = None) -> dict[str, dict[str, object]]:
    res = run(cwd, "catalog", "--json", catalog=catalog)
    assert res.returncode == 0, res.stderr
    return {e["id"]: e for e in jsondoc.check(json.loads(res.stdout))["specs"]}


def test_lookup_order(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / f"{ID}.toml").write_text(SPEC.read_text().replace("summary = ", "summary = 'mine' #"))
    local = tmp_path / "work" / "patches"
    local.mkdir(parents=True)
    (local / "local-only.toml").write_text(SPEC.read_text().replace(ID, "local-only"))
    (local / f"{ID}.toml").write_text(SPEC.read_text())

    shipped = REPO / "patches" / f"{ID}.toml"
    everywhere = listing(local.parent, catalog=mine)
    assert everywhere[ID]["source"] == "$VPATCH_CATALOG"
    assert everywhere[ID]["shadows"] == ["patches/" + f"{ID}.toml", str(shipped)]
    assert everywhere["local-only"]["source"] == "./patches"
    assert listing(local.parent)[ID]["source"] == "./patches"
    assert listing(Path("/"))[ID] == {
        "id": ID,
        "source": "shipped",
        "path": str(shipped),
        "shadows": [],
    }
    # What `apply ID` loads is what the listing names: here $VPATCH_CATALOG's copy.
    checked = run(local.parent, "check", ID, "--json", catalog=mine)
    assert json.loads(checked.stdout)["files"] == [str(mine / f"{ID}.toml")]


def test_unknown_id_names_the_catalogs(tmp_path: Path) -> None:
    res = run(tmp_path, "apply", "no-such-id")
    assert res.returncode == 2
    error, hint = res.stderr.splitlines()
    assert error == "error: no spec file or catalog id 'no-such-id'"
    assert hint.startswith(f"hint: known ids: {', '.join(IDS)}; catalogs: shipped (")


def test_human_listing() -> None:
    res = run(REPO, "catalog")
    assert res.returncode == 0 and res.stderr == ""
    rows = [line.split() for line in res.stdout.splitlines()]
    assert rows == [[i, "./patches", f"patches/{i}.toml"] for i in IDS]


def test_a_patches_dir_someone_else_could_write_is_skipped(tmp_path: Path) -> None:
    """./patches of a directory another user controls (a checkout of theirs that root runs in,
    /tmp) would shadow a shipped id with that user's spec: skipped, with a warning."""
    local = tmp_path / "work" / "patches"
    local.mkdir(parents=True)
    evil = SPEC.read_text().replace("summary = ", "summary = 'planted' #")
    (local / f"{ID}.toml").write_text(evil)
    shipped = str(REPO / "patches" / f"{ID}.toml")
    assert listing(local.parent)[ID]["path"] == f"patches/{ID}.toml"  # mine, 0755: used
    for how, undo in (
        (lambda: os.chown(local, 4242, 4242), lambda: os.chown(local, 0, 0)),
        (lambda: os.chmod(local, 0o777), lambda: os.chmod(local, 0o755)),
        (lambda: os.chmod(local, 0o775), lambda: os.chmod(local, 0o755)),
    ):
        how()
        res = run(local.parent, "catalog", "--json")
        assert res.returncode == 0, res.stderr
        specs = {e["id"]: e for e in json.loads(res.stdout)["specs"]}
        assert specs[ID]["path"] == shipped and specs[ID]["shadows"] == []
        assert res.stderr.startswith("warning: ./patches is not used as a catalog: "), res.stderr
        assert res.stderr.count("warning:") == 1, res.stderr  # once per run, listed twice
        checked = run(local.parent, "check", ID, "no-such-id", "--json")
        assert json.loads(checked.stdout)["files"] == [shipped]
        assert checked.stderr.count("warning:") == 1, checked.stderr  # two ids, one warning
        undo()
