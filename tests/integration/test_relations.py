"""Issue 25 on real wheels (click 8.1.7, requests 2.31.0 -> 2.32.0), end to end through the
real `vpatch` command: each test is a case where vpatch said something the files contradicted.

2. `apply --force` on a drifted file wrote nothing and said already_applied;
4. a partial rollback dropped the hand edit --force had kept;
7. stacked `occurrence` specs: applied, then verify said `there is no occurrence 2`;
8. --adopt took unrelated hand edits under the spec's name, never adopted an added module, and
   left a spec whose check failed `applied`;
9. an upgrade that wiped a patch which still fits was a green `superseded`;
10. a file hand-edited differently from the spec was `not_applied`, and apply then refused it.
(Cases 3 and 5, on vLLM with the catalog's specs: tests/integration/test_relations_vllm.py.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import vpatch
from tests.support import realpkgs
from tests.support.handedits import record_sha
from tests.support.realpkgs import site, spec_file
from tests.support.specs import Table, Value, edit, probe, spec_toml

TYPES, CORE, ADAPTERS = "click/types.py", "click/core.py", "requests/adapters.py"


def spec(
    sid: str,
    file: str,
    one: Table,
    versions: str = ">=8.1",
    package: str = "click",
    probes: Sequence[Table] = (),
) -> str:
    return spec_toml(
        id=sid, package=package, versions=versions, file=file, edits=[one], probes=probes
    )


MARK = edit("insert_statement", scope="Choice", match='name = "choice"', code="X_MARK = 1")
FUNC = edit(
    "set_value", scope="FuncParamType.__init__", target="self.func", expr="staticmethod(func)"
)
OPTS = edit("set_value", scope="BaseCommand", target="ignore_unknown_options", value=True)


def journal(python: Path) -> list[dict[str, object]]:
    text = (python.parent.parent / ".vpatch" / "journal.jsonl").read_text()
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def test_force_repatches_a_drifted_file_and_rollbacks_keep_the_hand_edit(tmp_path: Path) -> None:
    """Cases 2 and 4: the hand edit took the spec's own line out and added one; --force puts
    the spec back on the bytes as they are, and every rollback after keeps the added line."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / TYPES, ["--python", str(py), "--json", "--level", "static"]
    pristine = target.read_text()
    x = spec_file(tmp_path, "x", spec("x", TYPES, MARK))
    assert vpatch("apply", x, *args).patch()["outcome"] == "applied"
    hand = target.read_text().replace("    X_MARK = 1\n", "") + "# local hack\n"
    target.write_text(hand)
    assert hand == pristine + "# local hack\n"  # the spec's value is gone
    refused = vpatch("apply", x, *args)
    assert refused.code == 1 and refused.patch()["outcome"] == "drifted", refused.out
    forced = vpatch("apply", x, "--force", *args)
    assert forced.code == 0 and forced.patch()["outcome"] == "applied", forced.out
    assert "re-patched from the bytes it has now" in forced.patch()["message"]
    text = target.read_text()
    assert "X_MARK = 1" in text and text.endswith("# local hack\n")
    assert vpatch("verify", x, *args).patch()["outcome"] == "applied"
    y = spec_file(tmp_path, "y", spec("y", TYPES, FUNC))
    assert vpatch("apply", y, *args).patch()["outcome"] == "applied"
    back = vpatch("rollback", x, *args)
    assert back.code == 0 and back.patch()["outcome"] == "rolled_back", back.out
    text = target.read_text()
    assert "X_MARK" not in text and "staticmethod(func)" in text
    assert text.endswith("# local hack\n")  # case 4: the hand edit --force kept survives
    whole = vpatch("rollback", *args)
    assert whole.code == 0 and "found before vpatch" in whole.patch()["message"], whole.out
    assert target.read_text() == pristine + "# local hack\n"


def test_force_refuses_a_hand_edit_of_vpatchs_own_line(tmp_path: Path) -> None:
    """Case 2, the other way out: a hand edit inside the line vpatch wrote has no base that
    keeps it apart, so --force fails and writes nothing."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / TYPES, ["--python", str(py), "--json", "--level", "static"]
    x = spec_file(tmp_path, "x", spec("x", TYPES, MARK))
    assert vpatch("apply", x, *args).code == 0
    target.write_text(target.read_text().replace("X_MARK = 1", "X_MARK = 2"))
    edited = target.read_bytes()
    forced = vpatch("apply", x, "--force", *args)
    assert forced.code == 1 and forced.patch()["outcome"] == "failed", forced.out
    assert "vpatch's own lines" in forced.patch()["message"]
    assert target.read_bytes() == edited


def augment(n: int, code: str) -> dict[str, Value]:
    return edit(
        "replace_statement",
        scope="augment_usage_errors",
        match="e.ctx = ctx",
        occurrence=n,
        code=code,
    )


def test_stacked_occurrence_specs_verify_as_applied(tmp_path: Path) -> None:
    """Case 7: `e.ctx = ctx` twice in click.core.augment_usage_errors; A replaces the second,
    B then the first (the only one left). Apply said 2 applied; verify and ensure must agree."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / CORE, ["--python", str(py), "--json", "--level", "static"]
    a = spec_file(tmp_path, "a", spec("a", CORE, augment(2, "e.ctx = e.ctx or ctx")))
    b = spec_file(tmp_path, "b", spec("b", CORE, augment(1, "e.ctx = ctx or e.ctx")))
    res = vpatch("apply", a, b, *args)
    assert res.code == 0, res.out
    assert [p["outcome"] for p in res.doc["hosts"][0]["patches"]] == ["applied", "applied"]
    ver = vpatch("verify", a, b, *args)
    assert ver.code == 0, ver.out
    assert [p["outcome"] for p in ver.doc["hosts"][0]["patches"]] == ["applied", "applied"]
    ens = vpatch("ensure", a, b, "--python", str(py), "--json")
    assert ens.code == 0, ens.out + ens.err
    assert vpatch("rollback", *args).code == 0
    assert record_sha(site(py), CORE) == _sha(target)


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_adopt_takes_exactly_the_specs_edits(tmp_path: Path) -> None:
    """Case 8: the spec's edit and an unrelated one, by hand, in one file: --adopt records the
    spec's edit only, names the other, and rollback keeps the other."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / CORE, ["--python", str(py), "--json", "--level", "static"]
    pristine = target.read_text()
    other = pristine.replace("    allow_extra_args = False\n", "    allow_extra_args = True\n", 1)
    hand = other.replace(
        "    ignore_unknown_options = False\n", "    ignore_unknown_options = True\n", 1
    )
    assert pristine != other != hand
    target.write_text(hand)
    opts = spec_file(tmp_path, "opts", spec("opts", CORE, OPTS))
    res = vpatch("apply", opts, "--adopt", *args)
    assert res.code == 0 and res.patch()["outcome"] == "applied", res.out
    assert "allow_extra_args = True" in res.patch()["message"], res.patch()["message"]
    assert target.read_text() == hand
    assert vpatch("verify", opts, *args).patch()["outcome"] == "applied"
    back = vpatch("rollback", opts, *args)
    assert back.code == 0 and back.patch()["outcome"] == "rolled_back", back.out
    assert target.read_text() == other  # the unrelated hand edit was never the spec's


def test_adopt_records_a_module_added_by_hand(tmp_path: Path) -> None:
    """Case 8: a module the spec's add_file creates, already there by hand: `modified` (not
    satisfied_upstream); --adopt journals it as created, so rollback removes it."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    args = ["--python", str(py), "--json", "--level", "static"]
    module = site(py) / "click" / "_vpatch_extra.py"
    add = edit("add_file", text="X = 1\n")
    sp = spec_file(tmp_path, "extra", spec("extra", "click/_vpatch_extra.py", add))
    module.write_text("X = 1\n")
    res = vpatch("apply", sp, *args)
    assert res.code == 1 and res.patch()["outcome"] == "modified", res.out
    assert "--adopt" in res.patch()["message"]
    res = vpatch("apply", sp, "--adopt", *args)
    assert res.code == 0 and res.patch()["outcome"] == "applied", res.out
    assert [e["spec"] for e in journal(py) if e.get("action") == "apply"] == ["extra"]
    assert vpatch("rollback", sp, *args).code == 0
    assert not module.exists()


def test_hand_edit_that_differs_from_the_spec_is_modified_and_named(tmp_path: Path) -> None:
    """Case 10: verify said not_applied (`vpatch apply` would fix it) and apply then refused
    the file as modified. Both now say modified, and verify names the hand-edited line."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / CORE, ["--python", str(py), "--json", "--level", "static"]
    pristine = target.read_text()
    target.write_text(
        pristine.replace("    allow_extra_args = False\n", "    allow_extra_args = 1\n")
    )
    opts = spec_file(tmp_path, "opts", spec("opts", CORE, OPTS))
    ver = vpatch("verify", opts, *args)
    assert ver.code == 1 and ver.patch()["outcome"] == "modified", ver.out
    assert "allow_extra_args = 1" in ver.patch()["message"], ver.patch()["message"]
    res = vpatch("apply", opts, *args)
    assert res.code == 1 and res.patch()["outcome"] == "modified", res.out
    assert "allow_extra_args = 1" in res.patch()["message"], res.patch()["message"]


def test_upgrade_that_wiped_a_fitting_patch_is_not_green(tmp_path: Path) -> None:
    """Case 9: requests 2.31.0 -> 2.32.0 wipes a patch whose range covers 2.32.0 and whose
    edit still fits: bare status says drifted on 2.32.0, exit 1; apply patches it again."""
    py = realpkgs.venv(tmp_path / "env", "requests", "2.31.0")
    args = ["--python", str(py), "--json", "--level", "static"]
    pool = edit("set_value", target="DEFAULT_POOLSIZE", value=20)
    sp = spec_file(tmp_path, "pool", spec("pool", ADAPTERS, pool, ">=2.31", "requests"))
    assert vpatch("apply", sp, *args).code == 0
    realpkgs.install(py, "requests", "2.32.0")
    st = vpatch("status", "--python", str(py), "--json")
    assert st.code == 1 and st.patch()["outcome"] == "drifted", st.out
    assert st.patch()["version"] == "2.32.0"
    assert "upgraded from 2.31.0" in st.patch()["message"]
    again = vpatch("apply", sp, *args)
    assert again.code == 0 and again.patch()["outcome"] == "applied", again.out
    assert "DEFAULT_POOLSIZE = 20" in (site(py) / ADAPTERS).read_text()


def test_adopted_host_whose_check_fails_is_not_left_applied(tmp_path: Path) -> None:
    """Case 8: --adopt writes nothing, so a failing check had nothing to undo and the spec
    stayed `applied`. Now the adoption is taken back: failed, nothing journaled, file as it was."""
    py = realpkgs.venv(tmp_path / "env", "click", "8.1.7")
    target, args = site(py) / CORE, ["--python", str(py), "--json"]
    hand = target.read_text().replace(
        "    ignore_unknown_options = False\n", "    ignore_unknown_options = True\n", 1
    )
    target.write_text(hand)
    refuses = probe(
        "refuses unknown options",
        "click.core",
        "assert not module.BaseCommand.ignore_unknown_options",
    )
    opts = spec_file(tmp_path, "opts", spec("opts", CORE, OPTS, probes=[refuses]))
    res = vpatch("apply", opts, "--adopt", *args)
    assert res.code == 1 and res.patch()["outcome"] == "failed", res.out
    assert "refuses unknown options" in res.patch()["message"]
    assert target.read_text() == hand
    st = vpatch("status", "--python", str(py), "--json")
    assert st.code == 0 and st.doc["hosts"][0]["patches"] == [], st.out
