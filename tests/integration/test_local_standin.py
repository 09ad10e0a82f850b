"""Engine behaviour on a light stand-in package installed by real pip: stacking, drift,
refusals, automatic restore after a failed verify, and input errors that change nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import Env, fingerprint, vpatch
from tests.support.standin_specs import REL, SPEC_A, SPEC_B, write


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def jrun(*args: object) -> object:
    return vpatch(*map(str, args), "--json")


def test_stacked_specs_roll_back_in_any_order(tmp_path: Path, standin_env: Env) -> None:
    a, b = write(tmp_path, "a.toml", SPEC_A), write(tmp_path, "b.toml", SPEC_B)
    target, py = standin_env.file(REL), ["--python", str(standin_env.python)]
    pristine = sha(target)
    ra = vpatch("apply", a, *py, "--json")
    assert ra.code == 0 and ra.patch()["outcome"] == "applied", ra.out + ra.err
    rb = vpatch("apply", b, *py, "--json")
    assert rb.code == 0 and rb.patch()["outcome"] == "applied", rb.out + rb.err
    text = target.read_text()
    assert '"kimi_k2",' in text and '"max_batch": 64' in text

    # Roll back the FIRST one: the second stays, re-applied on the pristine bytes.
    back = vpatch("rollback", a, *py, "--json")
    assert back.code == 0 and back.patch()["outcome"] == "rolled_back", back.out
    text = target.read_text()
    assert "kimi_k2" not in text and '"max_batch": 64' in text
    both = vpatch("verify", a, b, *py, "--json")
    assert [p["outcome"] for p in both.doc["hosts"][0]["patches"]] == ["not_applied", "applied"]

    status = vpatch("status", *py, "--json")
    assert [p["id"] for p in status.doc["hosts"][0]["patches"]] == ["servekit-batch"]
    assert vpatch("rollback", *py).code == 0
    assert sha(target) == pristine


def test_two_specs_one_run_and_partial_rollback(tmp_path: Path, standin_env: Env) -> None:
    a, b = write(tmp_path, "a.toml", SPEC_A), write(tmp_path, "b.toml", SPEC_B)
    py = ["--python", str(standin_env.python)]
    pristine = sha(standin_env.file(REL))
    res = vpatch("apply", a, b, *py, "--json")
    assert res.code == 0, res.out + res.err
    assert [p["outcome"] for p in res.doc["hosts"][0]["patches"]] == ["applied", "applied"]
    assert all(pr["ok"] for p in res.doc["hosts"][0]["patches"] for pr in p["probes"])
    assert vpatch("rollback", b, *py).code == 0
    assert '"max_batch": 8' in standin_env.file(REL).read_text()
    assert vpatch("verify", a, *py).code == 0
    assert vpatch("rollback", a, *py).code == 0
    assert sha(standin_env.file(REL)) == pristine


def test_drift_after_reinstall_then_clean_reapply(tmp_path: Path, standin_env: Env) -> None:
    a = write(tmp_path, "a.toml", SPEC_A)
    target, py = standin_env.file(REL), ["--python", str(standin_env.python)]
    pristine_bytes = target.read_bytes()
    assert vpatch("apply", a, *py).code == 0
    # Simulate `pip install --force-reinstall`: the pristine file comes back.
    target.write_bytes(pristine_bytes)
    ver = vpatch("verify", a, *py, "--json")
    assert ver.code == 1 and ver.patch()["outcome"] == "drifted"
    assert "pristine per pip's RECORD" in ver.patch()["message"]
    st = vpatch("status", *py, "--json")
    assert st.code == 1 and st.patch()["outcome"] == "drifted"
    again = vpatch("apply", a, *py, "--json")
    assert again.code == 0 and again.patch()["outcome"] == "applied", again.out
    assert vpatch("verify", a, *py).code == 0
    assert vpatch("rollback", *py).code == 0
    assert target.read_bytes() == pristine_bytes


def test_hand_edited_file_is_refused_unless_forced(tmp_path: Path, standin_env: Env) -> None:
    a = write(tmp_path, "a.toml", SPEC_A)
    target, py = standin_env.file(REL), ["--python", str(standin_env.python)]
    target.write_text(target.read_text() + "\n# local hack\n")
    snap = fingerprint(standin_env.root)
    res = vpatch("apply", a, *py, "--json")
    assert res.code == 1 and res.patch()["outcome"] == "modified"
    assert "differs from pip's RECORD" in res.patch()["message"]
    assert fingerprint(standin_env.root) == snap
    forced = vpatch("apply", a, *py, "--force", "--json")
    assert forced.code == 0 and forced.patch()["outcome"] == "applied"
    assert target.read_text().endswith("# local hack\n")
    assert vpatch("rollback", *py).code == 0
    assert target.read_text().endswith("# local hack\n") and "kimi_k2" not in target.read_text()


def test_failed_probe_after_write_restores_previous_bytes(tmp_path: Path, standin_env: Env) -> None:
    bad = SPEC_A.replace('values = ["kimi_k2"]', 'values = ["mistral"]')
    spec = write(tmp_path, "bad.toml", bad)
    target, py = standin_env.file(REL), ["--python", str(standin_env.python)]
    pristine = sha(target)
    res = vpatch("apply", spec, *py, "--json")
    assert res.code == 1
    p = res.patch()
    assert p["outcome"] == "failed" and "previous bytes restored" in p["message"]
    assert [pr["ok"] for pr in p["probes"]] == [False]
    assert sha(target) == pristine
    assert vpatch("status", *py, "--json").doc["hosts"][0]["patches"] == []


def test_dry_run_and_second_apply_write_nothing(tmp_path: Path, standin_env: Env) -> None:
    a = write(tmp_path, "a.toml", SPEC_A)
    py = ["--python", str(standin_env.python)]
    snap = fingerprint(standin_env.root)
    dry = vpatch("apply", a, *py, "--dry-run", "--diff")
    assert dry.code == 0 and "would_apply" in dry.out and '+            "kimi_k2",' in dry.out
    assert fingerprint(standin_env.root) == snap
    assert vpatch("apply", a, *py).code == 0
    snap = fingerprint(standin_env.root)
    again = vpatch("apply", a, *py, "--json")
    assert again.patch()["outcome"] == "already_applied"
    assert fingerprint(standin_env.root) == snap


def test_package_missing_and_anchor_missing(tmp_path: Path, standin_env: Env) -> None:
    py = ["--python", str(standin_env.python)]
    other = write(tmp_path, "o.toml", SPEC_A.replace('package = "servekit"', 'package = "nopkg"'))
    snap = fingerprint(standin_env.root)
    res = vpatch("apply", other, *py, "--json")
    assert res.code == 1 and res.patch()["outcome"] == "not_applicable"
    assert "nopkg is not installed" in res.patch()["message"]
    missing = write(tmp_path, "m.toml", SPEC_A.replace('target = "supported"', 'target = "nope"'))
    res = vpatch("apply", missing, *py, "--json")
    assert res.code == 1 and res.patch()["outcome"] == "anchor_missing"
    nofile = write(tmp_path, "f.toml", SPEC_A.replace(REL, "servekit/absent.py"))
    res = vpatch("apply", nofile, *py, "--json")
    assert res.code == 1 and res.patch()["outcome"] == "anchor_missing"
    assert "does not exist" in res.patch()["message"]
    assert fingerprint(standin_env.root) == snap


BAD_SPECS = {
    "toml": ("id = ", "invalid TOML"),
    "unknown_field": (SPEC_A.replace('summary = "accept', 'colour = 1\nsummary = "'), "colour"),
    "unknown_op": (SPEC_A.replace('op = "ensure_elements"', 'op = "frobnicate"'), "op"),
    "bad_range": (SPEC_A.replace('">=1.0"', '"~=banana"'), "PEP 440"),
    "dotdot": (SPEC_A.replace(REL, "../../etc/passwd.py"), "without '..'"),
    "probe_syntax": (SPEC_A.replace("assert module", "assert (module"), "does not compile"),
    "empty_values": (SPEC_A.replace('values = ["kimi_k2"]', "values = []"), "values"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_spec_is_exit_2_and_touches_nothing(
    tmp_path: Path, standin_env: Env, case: str
) -> None:
    text, needle = BAD_SPECS[case]
    spec = write(tmp_path, f"{case}.toml", text)
    snap = fingerprint(standin_env.root)
    res = vpatch("apply", spec, "--python", str(standin_env.python))
    assert res.code == 2
    lines = res.err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert str(spec) in lines[0] and needle in lines[0]
    assert "Traceback" not in res.err and res.out == ""
    assert fingerprint(standin_env.root) == snap


def test_usage_errors(tmp_path: Path, standin_env: Env) -> None:
    res = vpatch("apply", "no-such-spec-id", "--python", str(standin_env.python))
    assert res.code == 2 and res.err.startswith("error: no spec file or catalog id")
    res = vpatch("apply", "--bogus")
    assert res.code == 2 and res.err.startswith("error: ") and "hint: " in res.err
    a = write(tmp_path, "a.toml", SPEC_A)
    res = vpatch("apply", a, "--python", str(tmp_path / "nope" / "python"), "--json")
    assert res.code == 1 and "not found" in res.doc["hosts"][0]["error"]


def test_copy_of_env_has_own_state(tmp_path: Path, standin_env: Env) -> None:
    """State is keyed by the environment (sys.prefix): a copied env does not share a journal."""
    a = write(tmp_path, "a.toml", SPEC_A)
    assert vpatch("apply", a, "--python", str(standin_env.python)).code == 0
    entries = [json.loads(x) for x in standin_env.journal.read_text().splitlines()]
    # the apply's checks passed: `verified` (a run stopped while they ran leaves it out)
    assert [e["action"] for e in entries] == ["apply", "commit", "verified"]
    assert entries[0]["verify"] == "pending" and entries[2]["txn"] == entries[0]["txn"]
    backups = list((standin_env.root / ".vpatch" / "backups").iterdir())
    assert [b.stat().st_mode & 0o777 for b in backups] == [0o600]
    shutil.rmtree(standin_env.root / ".vpatch")
