"""Stacking and version truth on real wheels (click 8.1.7, requests 2.31.0 -> 2.32.0): each
test is a bug a new user hit, reproduced end to end through the real `vpatch` command.

1. a changed spec stacked on its own output, and rolling back another spec then lost code;
2. `rollback --force` after an upgrade wrote the old release's bytes;
3. a spec that no longer fits after an upgrade left status and rollback failing for ever;
4. a hand edit identical to a spec showed green;
5. rollback called hand-edited bytes "pristine";
6. a partial rollback left a module that fails the remaining spec's probe.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Sequence
from pathlib import Path

from patcher.rewrite import apply_edits
from patcher.specs.model import load_spec
from tests.conftest import vpatch
from tests.support import realpkgs
from tests.support.handedits import record_sha
from tests.support.realpkgs import site, spec_file
from tests.support.specs import Table, edit, probe, spec_toml

TYPES, CORE, ADAPTERS = "click/types.py", "click/core.py", "requests/adapters.py"


def insert_in_choice(sid: str, code: str, probes: Sequence[Table] = ()) -> str:
    mark = edit("insert_statement", scope="Choice", match='name = "choice"', code=code)
    return spec_toml(
        id=sid,
        summary="insert into click.types.Choice",
        package="click",
        versions=">=8.1",
        file=TYPES,
        edits=[mark],
        probes=probes,
    )


SPEC_Y = spec_toml(
    id="y",
    summary="a set_value in FuncParamType.__init__",
    package="click",
    versions=">=8.1",
    file=TYPES,
    edits=[
        edit(
            "set_value",
            scope="FuncParamType.__init__",
            target="self.func",
            expr="staticmethod(func)",
        )
    ],
)


def pool_spec(versions: str) -> str:
    return spec_toml(
        id="pool",
        summary="a bigger connection pool",
        package="requests",
        versions=versions,
        file=ADAPTERS,
        edits=[edit("set_value", target="DEFAULT_POOLSIZE", value=20)],
    )


def test_changed_spec_replaces_its_edits_and_rollback_keeps_the_rest(tmp_path: Path) -> None:
    """Bug 1: X re-applied with new edits replaces its old ones; rolling back Y keeps X's."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / TYPES, ["--python", str(py), "--json"]
    pristine = target.read_text()
    x1 = spec_file(tmp_path, "x1", insert_in_choice("x", "X_V1 = 1"))
    assert vpatch("apply", x1, *args).patch()["outcome"] == "applied"
    x2 = spec_file(tmp_path, "x2", insert_in_choice("x", "X_V2 = 2"))
    res = vpatch("apply", x2, *args)
    assert res.code == 0 and res.patch()["outcome"] == "applied", res.out
    assert "took out the edits" in res.patch()["message"]
    text = target.read_text()
    assert "X_V2 = 2" in text and "X_V1 = 1" not in text
    y = spec_file(tmp_path, "y", SPEC_Y)
    assert vpatch("apply", y, *args).patch()["outcome"] == "applied"
    back = vpatch("rollback", y, *args)
    assert back.code == 0 and back.patch()["outcome"] == "rolled_back", back.out
    want = apply_edits(pristine, load_spec(x2).variant[0].edit).source
    assert target.read_text() == want  # X's current edit, and nothing of X's old one or of Y
    assert vpatch("rollback", *args).code == 0
    assert target.read_text() == pristine


def test_rollback_force_after_upgrade_never_writes_old_bytes(tmp_path: Path) -> None:
    """Bug 2: the 2.31.0 bytes are never put over a 2.32.0 install, --force or not."""
    py = realpkgs.venv(tmp_path / "env", "requests", "2.31.0")
    # static: requests does not import without its dependencies, which the test leaves out
    target, args = site(py) / ADAPTERS, ["--python", str(py), "--json", "--level", "static"]
    spec = spec_file(tmp_path, "pool", pool_spec(">=2.31"))
    assert vpatch("apply", spec, *args).code == 0
    realpkgs.install(py, "requests", "2.32.0")
    new = target.read_bytes()
    dry = vpatch("rollback", "--force", "--dry-run", "--diff", *args)
    assert dry.code == 0, dry.out
    assert dry.patch()["outcome"] == "superseded" and dry.patch()["files"] == []
    assert target.read_bytes() == new
    target.write_bytes(new + b"# hand edit after the upgrade\n")
    forced = vpatch("rollback", "--force", *args)
    assert forced.code == 1 and "another release's bytes" in forced.patch()["message"]
    assert target.read_bytes() == new + b"# hand edit after the upgrade\n"


def test_spec_that_no_longer_fits_leaves_a_clean_journal(tmp_path: Path) -> None:
    """Bug 3: after an upgrade out of the spec's range, nothing fails for ever."""
    py = realpkgs.venv(tmp_path / "env", "requests", "2.31.0")
    args = ["--python", str(py), "--json"]
    spec = spec_file(tmp_path, "pool", pool_spec(">=2.31,<2.32"))
    old = hashlib.sha256((site(py) / ADAPTERS).read_bytes()).hexdigest()
    assert vpatch("apply", spec, *args, "--level", "static").code == 0
    backup = py.parent.parent / ".vpatch" / "backups" / old
    assert backup.exists()
    realpkgs.install(py, "requests", "2.32.0")
    st = vpatch("status", *args)
    # the patch is gone and the entry cannot say whether the spec covers 2.32.0: a person
    # looks (issue 39: it was a green `superseded`); apply or rollback clears it
    assert st.code == 1 and st.patch()["outcome"] == "drifted", st.out
    assert [a["state"] for a in st.doc["hosts"][0]["attention"]] == ["upgraded"]
    res = vpatch("apply", spec, *args, "--level", "static")
    assert res.patch()["outcome"] == "not_applicable"
    assert "retired" in res.patch()["message"]
    assert not backup.exists(), "2.31.0's pristine bytes are garbage once superseded"
    st = vpatch("status", *args)
    assert st.code == 0 and st.doc["hosts"][0]["patches"] == [], st.out
    assert vpatch("rollback", *args).code == 0


def test_hand_edit_identical_to_the_spec_is_not_green(tmp_path: Path) -> None:
    """Bug 4: `sed -i` then a spec with exactly that edit: `modified`, exit 1."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / CORE, ["--python", str(py), "--json"]
    subprocess.run(
        [
            "sed",
            "-i",
            "s/    ignore_unknown_options = False/    ignore_unknown_options = True/",
            str(target),
        ],
        check=True,
    )
    edited = target.read_bytes()
    spec = spec_file(
        tmp_path,
        "opts",
        spec_toml(
            id="opts",
            summary="ignore unknown options",
            package="click",
            versions=">=8.1",
            file=CORE,
            edits=[
                edit("set_value", scope="BaseCommand", target="ignore_unknown_options", value=True)
            ],
        ),
    )
    res = vpatch("apply", spec, *args)
    assert res.code == 1 and res.patch()["outcome"] == "modified", res.out
    assert "outside vpatch" in res.patch()["message"]
    assert target.read_bytes() == edited
    ver = vpatch("verify", spec, *args)
    assert ver.code == 1 and ver.patch()["outcome"] == "modified"


def test_rollback_says_what_it_restored(tmp_path: Path) -> None:
    """Bug 5: after `apply --force` over a hand edit, rollback restores the hand-edited bytes
    and says they are not pip's."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / TYPES, ["--python", str(py), "--json"]
    target.write_bytes(target.read_bytes() + b"# local hack\n")
    edited = target.read_bytes()
    spec = spec_file(tmp_path, "x", insert_in_choice("x", "X_V1 = 1"))
    assert vpatch("apply", spec, *args).patch()["outcome"] == "modified"
    assert vpatch("apply", spec, "--force", *args).code == 0
    back = vpatch("rollback", *args)
    assert back.code == 0
    msg = back.patch()["message"]
    assert "differ from pip's RECORD" in msg and "pristine" not in msg
    assert target.read_bytes() == edited


def test_partial_rollback_rechecks_what_remains(tmp_path: Path) -> None:
    """Bug 6: rolling back B, which A's probe needs, is undone and names A."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / TYPES, ["--python", str(py), "--json"]
    pristine = target.read_bytes()
    b = spec_file(
        tmp_path,
        "b",
        insert_in_choice("b", "def __contains__(self, value):\n    return value in self.choices"),
    )
    a = spec_file(
        tmp_path,
        "a",
        insert_in_choice(
            "a",
            "SUPPORTS_IN = True",
            [
                probe(
                    "membership",
                    "click.types",
                    "assert 'x' in module.Choice(['x']) and module.Choice.SUPPORTS_IN",
                )
            ],
        ),
    )
    assert vpatch("apply", b, *args).code == 0
    res = vpatch("apply", a, *args)
    assert res.code == 0 and [p["ok"] for p in res.patch()["probes"]] == [True]
    both = target.read_bytes()
    back = vpatch("rollback", b, *args)
    assert back.code == 1, back.out
    outcomes = {p["id"]: p for p in back.doc["hosts"][0]["patches"]}
    assert outcomes["b"]["outcome"] == "failed"
    assert "a needs this spec" in outcomes["b"]["message"]
    assert target.read_bytes() == both
    assert vpatch("rollback", a, *args).code == 0
    assert vpatch("rollback", b, *args).code == 0
    assert target.read_bytes() == pristine


def test_two_file_spec_on_a_real_package(tmp_path: Path) -> None:
    """One variant, two files of click: apply, verify and rollback as one, back to RECORD."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    args = ["--python", str(py), "--json"]
    before = {rel: (site(py) / rel).read_bytes() for rel in (TYPES, CORE)}
    spec = spec_file(
        tmp_path,
        "two",
        spec_toml(
            id="two",
            summary="two files of click",
            package="click",
            versions=">=8.1",
            edits=[
                edit(
                    "insert_statement",
                    file=TYPES,
                    scope="Choice",
                    match='name = "choice"',
                    code="VPATCHED = True",
                ),
                edit(
                    "set_value",
                    file=CORE,
                    scope="BaseCommand",
                    target="ignore_unknown_options",
                    value=True,
                ),
            ],
            probes=[
                probe(
                    "both files",
                    "click.core",
                    "import click.types\n"
                    "assert click.types.Choice.VPATCHED"
                    " and module.BaseCommand.ignore_unknown_options\n",
                )
            ],
        ),
    )
    res = vpatch("apply", spec, *args)
    assert res.code == 0, res.out
    assert sorted(f["path"].split("site-packages/")[1] for f in res.patch()["files"]) == [
        CORE,
        TYPES,
    ]
    assert vpatch("verify", spec, *args).code == 0
    assert vpatch("rollback", spec, *args).code == 0
    for rel, data in before.items():
        assert (site(py) / rel).read_bytes() == data
        assert hashlib.sha256(data).hexdigest() == record_sha(site(py), rel)
