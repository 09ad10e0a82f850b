"""`vpatch diff` and `vpatch capture` on real wheels: hand edits made the way operators make
them (sed -i, an editor) on click 8.1.7 and on vLLM 0.16.0, locally and over real sshd hosts.

Pristine bytes come from the cached test wheels (VPATCH_MATRIX_WHEELS), so nothing is
downloaded twice; the matrix cache is per test.
"""

from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path

import pytest
from packaging.version import Version

from patcher.commands import authoring
from patcher.specs.model import load_spec
from tests import envs, sshd
from tests.conftest import vpatch
from tests.support import handedits, realpkgs
from tests.support.handedits import CLICK_EDITS, CLICK_VERSION


@pytest.fixture(autouse=True)
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    realpkgs.wheel("click", CLICK_VERSION)
    env = {
        "VPATCH_MATRIX_WHEELS": str(envs.CACHE / "wheels"),
        "VPATCH_MATRIX_CACHE": str(tmp_path / "matrix"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def site(python: Path) -> Path:
    return next((python.parent.parent / "lib").glob("python3*/site-packages"))


def click_env(dest: Path, edits: list[tuple[str, str, str, str]] = CLICK_EDITS) -> Path:
    py = realpkgs.venv(dest, "click", CLICK_VERSION)
    for rel, old, new, _op in edits:
        handedits.edit_file(site(py) / rel, old, new)
    return py


def test_five_kinds_over_two_files_captured_finest_and_replayed_exactly(tmp_path: Path) -> None:
    py = click_env(tmp_path / "edited")
    diff = vpatch("diff", "click", "--python", py, "--json")
    assert diff.code == 0, diff.err
    [group] = diff.doc["groups"]
    assert group["hosts"] == ["local"] and group["version"] == CLICK_VERSION
    files = {f["file"]: f for f in group["files"]}
    assert set(files) == {"click/types.py", "click/utils.py"}
    for f in files.values():
        assert f["state"] == "modified" and f["pristine"] == "wheel"
    assert '-    name = "boolean"' in files["click/types.py"]["diff"]
    assert "+class KeepOpenFile(t.Generic[R]):" in files["click/utils.py"]["diff"]

    human = vpatch("diff", "click", "--python", py)
    assert (
        human.code == 0 and "click 8.1.7 wheel" in human.out and "+++ b/click/utils.py" in human.out
    )

    out = tmp_path / "click-hand.toml"
    cap = vpatch(
        "capture", "click", "--id", "click-hand", "--python", py, "-o", out, "--no-matrix", "--json"
    )
    assert cap.code == 0, cap.err
    doc = cap.doc
    assert (doc["command"], doc["ok"]) == ("capture", True)  # docs/reference/json.md
    got = {f["file"]: f["ops"] for f in doc["files"]}
    assert got == {
        "click/types.py": ["set_value", "ensure_elements", "ensure_def"],
        "click/utils.py": ["ensure_base", "set_value"],
    }
    assert [op for f in doc["files"] for op in f["ops"]] == [op for *_, op in CLICK_EDITS]
    assert all(f["bytes_identical"] for f in doc["files"])
    assert vpatch("check", out).code == 0  # the written spec passes the offline validation
    spec = load_spec(out)
    assert spec.variant[0].versions == "==8.1.7" and spec.variant[0].file is None
    assert {e.file for e in spec.variant[0].edit} == {"click/types.py", "click/utils.py"}

    fresh = realpkgs.venv(tmp_path / "fresh", "click", CLICK_VERSION)
    applied = vpatch("apply", out, "--python", fresh, "--json")
    assert applied.code == 0, applied.out + applied.err
    assert applied.patch()["outcome"] == "applied"

    wide = vpatch("capture", "click", "--id", "w", "--python", py, "--versions", ">=8.1,<8.2",
                  "--no-matrix")  # fmt: skip
    assert wide.code == 0 and 'versions = ">=8.1,<8.2"' in wide.out  # the spec on stdout
    assert "captured click/types.py: set_value, ensure_elements, ensure_def" in wide.err
    for rel in ("click/types.py", "click/utils.py"):
        assert (site(fresh) / rel).read_bytes() == (site(py) / rel).read_bytes()


def test_capture_refuses_bad_input_before_any_host(tmp_path: Path) -> None:
    exists = tmp_path / "ok.toml"
    exists.write_text("")
    for args, words in [
        (["--id", "Bad Id"], "--id"),
        (["--id", "ok", "-o", str(exists)], "exists"),
        (["--id", "ok", "-o", str(tmp_path / "other.toml")], "named after its id"),
        (["--id", "ok", "--versions", "~~1"], "PEP 440"),
    ]:
        res = vpatch("capture", "click", "--host", "nowhere.invalid", *args, "--json")
        assert res.code == 2, res.err
        assert words in res.doc["error"] and res.doc["hint"]
        assert res.err.startswith("error:")


def test_nothing_to_capture_and_unknown_package(tmp_path: Path) -> None:
    py = realpkgs.venv(tmp_path / "env", "click", CLICK_VERSION)
    clean = vpatch("diff", "click", "--python", py, "--json")
    assert clean.code == 0 and clean.doc["groups"][0]["files"] == []
    none = vpatch("capture", "click", "--id", "x", "--python", py, "--no-matrix")
    assert none.code == 1 and "no hand edit" in none.err and "hint:" in none.err
    missing = vpatch("diff", "no-such-dist", "--python", py, "--json")
    assert missing.code == 1 and "not installed" in missing.doc["errors"][0]["error"]


def test_capture_names_every_hunk_it_cannot_carry(tmp_path: Path) -> None:
    """Two broken edits in two files (each leaves its file unparsable) among good ones: both
    named in one run, each with its hunk; the good hunk of the same file is not."""
    broken = [
        CLICK_EDITS[0],  # click/types.py, hunk 1: fine
        ("click/types.py", '        return "BOOL"\n', '        return "BOOL" +\n', "-"),
        ("click/utils.py", "    nl: bool = True,\n", "    nl: bool = = False,\n", "-"),
    ]
    py = click_env(tmp_path / "edited", broken)
    out = tmp_path / "x.toml"
    res = vpatch(
        "capture", "click", "--id", "x", "-o", out, "--python", py, "--no-matrix", "--json"
    )
    assert res.code == 1, res.out + res.err
    got = [(r["file"], r["hunk"], r["reason"].split(" (")[0]) for r in res.doc["refused"]]
    assert got == [
        ("click/types.py", 2, "cannot be captured: does not parse"),
        ("click/utils.py", 1, "cannot be captured: does not parse"),
    ]
    lines = res.err.splitlines()
    assert [ln.split(" (@@")[0] for ln in lines[:2]] == [
        "error: click/types.py: hunk 2",
        "error: click/utils.py: hunk 1",
    ]
    assert len(lines) == 3 and lines[2].startswith("hint: ")
    assert not out.exists()


def test_added_and_missing_files_are_listed(tmp_path: Path) -> None:
    py = realpkgs.venv(tmp_path / "env", "click", CLICK_VERSION)
    (site(py) / "click" / "local_hack.py").write_text("X = 1\n")
    (site(py) / "click" / "py.typed").unlink()
    res = vpatch("diff", "click", "--python", py, "--json")
    files = {f["file"]: f for f in res.doc["groups"][0]["files"]}
    assert files["click/local_hack.py"]["state"] == "added"
    assert files["click/local_hack.py"]["pristine"] == "none"
    assert "+X = 1" in files["click/local_hack.py"]["diff"]
    assert files["click/py.typed"]["state"] == "missing"


def click_factory(edits: dict[str, list[tuple[str, str, str, str]]], host: sshd.SshHost) -> None:
    click_env(host.home / "ml-env", edits[host.name])


def test_fleet_groups_hosts_with_the_same_edit(ssh_lab_factory: sshd.LabFactory) -> None:
    same, other = CLICK_EDITS[:1], CLICK_EDITS[3:4]
    lab = ssh_lab_factory(3, partial(click_factory, {"h1": same, "h2": same, "h3": other}))
    hosts = [a for h in lab.hosts for a in ("--host", h.name)]
    ssh = ["--ssh-config", str(lab.ssh_config), "--python", "/root/ml-env/bin/python"]
    res = vpatch("diff", "click", *hosts, *ssh, "--json")
    assert res.code == 0, res.err
    groups = {tuple(g["hosts"]): [f["file"] for f in g["files"]] for g in res.doc["groups"]}
    assert groups == {("h1", "h2"): ["click/types.py"], ("h3",): ["click/utils.py"]}
    human = vpatch("diff", "click", *hosts, *ssh)
    assert "# 2 hosts (h1, h2)" in human.out and "# 1 host (h3)" in human.out

    refused = vpatch("capture", "click", "--id", "x", *hosts, *ssh, "--no-matrix")
    assert refused.code == 2 and "differ" in refused.err
    one = vpatch("capture", "click", "--id", "x", "--host", "h3", *ssh, "--no-matrix", "--json")
    assert one.code == 0, one.err
    assert one.doc["files"][0]["ops"] == ["ensure_base"]


@pytest.mark.vllm
def test_seed_sed_on_vllm_0_16_captured_as_one_ensure_elements(tmp_path: Path) -> None:
    edited = envs.clone("0.16.0", tmp_path / "edited")
    target = envs.site_packages(edited) / handedits.SEED_REL
    handedits.sed_i(target, handedits.SEED_SED)
    py = edited / "bin" / "python"

    diff = vpatch("diff", "vllm", "--python", py, "--json")
    assert diff.code == 0, diff.err
    [f] = diff.doc["groups"][0]["files"]
    assert f["file"] == handedits.SEED_REL and f["pristine"] == "wheel"
    assert '+            "kimi_k2",' in f["diff"] and '+            "deepseek_v3",' in f["diff"]

    out = tmp_path / "vllm-kimi.toml"
    cap = vpatch("capture", "vllm", "--id", "vllm-kimi", "--python", py, "-o", out, "--no-matrix")
    assert cap.code == 0, cap.err
    spec = load_spec(out)
    [edit] = spec.variant[0].edit
    assert edit.op == "ensure_elements"
    assert edit.dumped == {
        "op": "ensure_elements",
        "scope": "SpeculativeConfig._verify_args",
        "target": "eagle3_target_supported",
        "values": ["kimi_k2", "deepseek_v3"],
    }

    fresh = envs.clone("0.16.0", tmp_path / "fresh")
    res = vpatch("apply", out, "--python", fresh / "bin" / "python", "--level", "static")
    assert res.code == 0, res.out + res.err
    assert (envs.site_packages(fresh) / handedits.SEED_REL).read_bytes() == target.read_bytes()

    # where it fits, against the cached wheels: 0.16.0 yes, 0.17.0 renamed the list
    table = authoring.fits(spec, [Version("0.16.0"), Version("0.17.0")], tmp_path / "m")
    got = {r.version: r.outcome for r in table.releases}
    assert got == {"0.16.0": "would_apply", "0.17.0": "anchor_missing"}
    near = authoring.neighbours(
        spec, "0.16.0", 1, lambda _p: [Version(v) for v in ("0.11.0", "0.16.0", "0.17.0", "0.18.0")]
    )
    assert near == [Version("0.11.0"), Version("0.16.0"), Version("0.17.0")]
    # the hand-edited host itself: adopted, then rolled back to pip's bytes
    assert vpatch("status", out, "--python", py, "--json").patch()["outcome"] == "modified"
    adopt = vpatch("apply", out, "--adopt", "--python", py, "--level", "static", "--json")
    assert adopt.code == 0 and adopt.patch()["outcome"] == "applied", adopt.out + adopt.err
    back = vpatch("rollback", "--python", py, "--json")
    assert back.code == 0, back.out + back.err
    assert hashlib.sha256(target.read_bytes()).hexdigest() == f["record_sha256"]


def test_adopt_then_status_and_rollback_to_record_bytes(tmp_path: Path) -> None:
    py = click_env(tmp_path / "env")
    spec = tmp_path / "click-hand.toml"
    cap = vpatch(
        "capture", "click", "--id", "click-hand", "--python", py, "-o", spec, "--no-matrix"
    )
    assert cap.code == 0, cap.err
    files = {rel: site(py) / rel for rel in ("click/types.py", "click/utils.py")}
    inodes = {rel: p.stat().st_ino for rel, p in files.items()}
    edited = {rel: p.read_bytes() for rel, p in files.items()}

    before = vpatch("status", spec, "--python", py, "--json")
    assert before.patch()["outcome"] == "modified", before.out
    plain = vpatch("apply", spec, "--python", py, "--json")
    assert plain.code == 1 and plain.patch()["outcome"] == "modified"

    adopt = vpatch("apply", spec, "--adopt", "--python", py, "--json")
    assert adopt.code == 0, adopt.out + adopt.err
    p = adopt.patch()
    assert p["outcome"] == "applied" and "adopted the hand edit" in p["message"]
    assert {f["path"] for f in p["files"]} == {str(f) for f in files.values()}
    # nothing written: same inodes, same bytes
    assert {rel: f.stat().st_ino for rel, f in files.items()} == inodes
    assert {rel: f.read_bytes() for rel, f in files.items()} == edited

    after = vpatch("status", spec, "--python", py, "--json")
    assert after.code == 0 and after.patch()["outcome"] == "applied", after.out
    journal = vpatch("status", "--python", py, "--json")
    assert {x["outcome"] for x in journal.doc["hosts"][0]["patches"]} == {"applied"}
    again = vpatch("apply", spec, "--python", py, "--json")
    assert again.code == 0 and again.patch()["outcome"] == "already_applied"
    diff = vpatch("diff", "click", "--python", py, "--json")
    assert {f["pristine"] for f in diff.doc["groups"][0]["files"]} == {"vpatch"}

    back = vpatch("rollback", "--python", py, "--json")
    assert back.code == 0, back.out + back.err
    for rel, f in files.items():
        assert hashlib.sha256(f.read_bytes()).hexdigest() == handedits.record_sha(site(py), rel)
    clean = vpatch("diff", "click", "--python", py, "--json")
    assert clean.doc["groups"][0]["files"] == []


def test_adopt_across_ssh_hosts(tmp_path: Path, ssh_lab_factory: sshd.LabFactory) -> None:
    """h1, h2 carry the hand edit, h3 is pristine: one `apply --adopt` adopts the first two and
    patches the third; all three end with the same bytes, and rollback gives RECORD's."""
    edits = CLICK_EDITS[:1]
    lab = ssh_lab_factory(3, partial(click_factory, {"h1": edits, "h2": edits, "h3": []}))
    hosts = [a for h in lab.hosts for a in ("--host", h.name)]
    ssh = ["--ssh-config", str(lab.ssh_config), "--python", "/root/ml-env/bin/python"]
    spec = tmp_path / "click-bool.toml"
    cap = vpatch(
        "capture", "click", "--id", "click-bool", "--host", "h1", *ssh, "-o", spec, "--no-matrix"
    )
    assert cap.code == 0, cap.err
    adopt = vpatch("apply", spec, "--adopt", *hosts, *ssh, "--json")
    assert adopt.code == 0, adopt.out + adopt.err
    got = {h["target"]: h["patches"][0] for h in adopt.doc["hosts"]}
    assert {t: p["outcome"] for t, p in got.items()} == dict.fromkeys(("h1", "h2", "h3"), "applied")
    assert "adopted" in got["h1"]["message"] and "adopted" in got["h2"]["message"]
    assert "adopted" not in got["h3"]["message"]
    texts = {
        (envs.site_packages(h.home / "ml-env") / "click/types.py").read_bytes() for h in lab.hosts
    }
    assert len(texts) == 1
    back = vpatch("rollback", *hosts, *ssh, "--json")
    assert back.code == 0, back.out + back.err
    for h in lab.hosts:
        s = envs.site_packages(h.home / "ml-env")
        got_sha = hashlib.sha256((s / "click/types.py").read_bytes()).hexdigest()
        assert got_sha == handedits.record_sha(s, "click/types.py")


def wheel_text(rel: str) -> str:
    import zipfile

    with zipfile.ZipFile(realpkgs.wheel("click", CLICK_VERSION)) as zf:
        return zf.read(rel).decode("utf-8")


def git_diff(edits: list[tuple[str, str, str, str]], shift: int = 0) -> str:
    """A `git diff` of the edits against click 8.1.7, its line numbers off by `shift` (as a
    fix made on a neighbouring release would be)."""
    import difflib
    import re

    out = []
    for rel in dict.fromkeys(rel for rel, *_ in edits):
        old = wheel_text(rel)
        new = old
        for r, a, b, _op in edits:
            if r == rel:
                new = new.replace(a, b)
        out.append(f"diff --git a/{rel} b/{rel}\n")
        for line in difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}"
        ):
            m = re.match(r"@@ -(\d+),(\d+) \+(\d+),(\d+) @@", line)
            if m:
                a1, a2, b1, b2 = (int(x) for x in m.groups())
                line = f"@@ -{a1 + shift},{a2} +{b1 + shift},{b2} @@\n"
            out.append(line)
    return "".join(out)


def test_backport_an_upstream_diff(tmp_path: Path) -> None:
    diff = tmp_path / "fix.diff"
    diff.write_text(git_diff(CLICK_EDITS, shift=12))
    out = tmp_path / "click-fix.toml"
    res = vpatch(
        "backport", diff, "--package", "click", "--from-version", CLICK_VERSION,
        "--id", "click-fix", "-o", out, "--no-matrix", "--json",
    )  # fmt: skip
    assert res.code == 0, res.err
    got = {f["file"]: f["ops"] for f in res.doc["files"]}
    assert got == {
        "click/types.py": ["set_value", "ensure_elements", "ensure_def"],
        "click/utils.py": ["ensure_base", "set_value"],
    }
    assert all(f["bytes_identical"] for f in res.doc["files"])
    # the spec says where it came from: an upstream diff, not a hand edit
    summary = 'summary = "Backport of fix.diff (an upstream diff against click 8.1.7), captured"'
    assert summary in res.doc["spec"].splitlines()
    fresh = realpkgs.venv(tmp_path / "fresh", "click", CLICK_VERSION)
    applied = vpatch("apply", out, "--python", fresh, "--json")
    assert applied.code == 0, applied.out + applied.err
    edited = click_env(tmp_path / "edited")
    for rel in got:
        assert (site(fresh) / rel).read_bytes() == (site(edited) / rel).read_bytes()


def test_backport_names_the_hunk_that_does_not_fit(tmp_path: Path) -> None:
    diff = tmp_path / "bad.diff"
    text = git_diff(CLICK_EDITS[:1]).replace(" class BoolParamType(ParamType):", " class Gone:")
    diff.write_text(text)
    res = vpatch(
        "backport", diff, "--package", "click", "--from-version", CLICK_VERSION,
        "--id", "x", "--no-matrix", "--json",
    )  # fmt: skip
    assert res.code == 2, res.err
    assert (
        "click/types.py: hunk 1 (@@ -" in res.doc["error"] and "does not apply" in res.doc["error"]
    )
    assert not (tmp_path / "x.toml").exists()


def test_backport_names_every_refused_hunk_in_one_run(tmp_path: Path) -> None:
    """Two hunks of two files that do not apply, and the good ones around them: both named,
    each with its file, number, header and lines; no spec written."""
    diff = tmp_path / "bad.diff"
    text = git_diff(CLICK_EDITS).replace(" class BoolParamType(ParamType):", " class Gone:")
    text = text.replace("     def __init__(self, file: t.IO[t.Any]) -> None:", "     def gone():")
    diff.write_text(text)
    out = tmp_path / "x.toml"
    args = ("--id", "x", "-o", out, "--no-matrix")
    res = vpatch("backport", diff, "--package", "click", "--from-version", CLICK_VERSION, *args)
    assert res.code == 2, res.err
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error: ")]
    assert [e.split(" (@@")[0] for e in errors] == [
        "error: click/types.py: hunk 1",
        "error: click/utils.py: hunk 1",
    ]
    assert all(" does not apply to click 8.1.7: " in e for e in errors)
    doc = vpatch(
        "backport", diff, "--package", "click", "--from-version", CLICK_VERSION, *args, "--json"
    ).doc
    assert [(r["file"], r["hunk"]) for r in doc["refused"]] == [
        ("click/types.py", 1),
        ("click/utils.py", 1),
    ]
    assert all(r["header"].startswith("@@ -") and len(r["lines"]) == 2 for r in doc["refused"])
    assert not out.exists()
