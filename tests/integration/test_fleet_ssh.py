"""Fleets of real sshd hosts from an inventory: parallel apply, rewrite cache, canary,
max-fail, summary table vs JSON, fleet status."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from tests import sshd as harness
from tests import standin
from tests.conftest import fingerprint, vpatch
from tests.support.standin_specs import REL, SPEC_A

PY = "/root/ml-env/bin/python"
# A second release of the stand-in whose config.py differs: two distinct file contents.
CONFIG_V2 = standin.CONFIG_PY.replace('"qwen",', '"qwen",\n            "mistral",')


def inventory(tmp_path: Path, lab: harness.SshLab, bad: set[str] = frozenset()) -> Path:  # type: ignore[assignment]
    lines = [f"[defaults]\npython = '{PY}'\n"]
    for h in lab.hosts:
        python = "\npython = '/root/missing/bin/python'" if h.name in bad else ""
        lines.append(
            f"[[host]]\nname = '{h.name}'\naddress = '{h.name}'{python}\ngroups = ['all']\n"
        )
    p = tmp_path / "hosts.toml"
    p.write_text("\n".join(lines))
    return p


def mixed_env(host: harness.SshHost) -> None:
    if int(host.name[1:]) % 3 == 0:
        harness.standin_env_factory(host, version="1.1.0", config=CONFIG_V2)
    else:
        harness.standin_env_factory(host)


def spec_file(tmp_path: Path) -> Path:
    p = tmp_path / "a.toml"
    p.write_text(SPEC_A.replace('">=1.0"', '">=1.0"'))
    return p


def test_sixteen_hosts_parallel_with_one_parse_per_content(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(16, mixed_env)
    inv = inventory(tmp_path, lab)
    spec = spec_file(tmp_path)
    common = ["--inventory", str(inv), "--ssh-config", str(lab.ssh_config)]
    res = vpatch("apply", spec, *common, "--parallel", "8", "--level", "static", "--json")
    assert res.code == 0, res.out + res.err
    doc = res.doc
    assert [h["target"] for h in doc["hosts"]] == [h.name for h in lab.hosts]
    assert all(h["patches"][0]["outcome"] == "applied" for h in doc["hosts"])
    versions = {h["patches"][0]["version"] for h in doc["hosts"]}
    assert versions == {"1.0.0", "1.1.0"}
    # Two distinct file contents across 16 hosts: exactly two libcst parses.
    assert doc["stats"]["libcst_parses"] == 2, doc["stats"]
    for h in lab.hosts:
        text = (h.home / "ml-env" / "lib" / "python3.11" / "site-packages" / REL).read_text()
        assert '"kimi_k2",' in text

    # Fleet status: every host applied; human table agrees with JSON and has no control codes.
    st = vpatch("status", *common, "--json", "--report", str(tmp_path / "r.json"))
    assert st.code == 0, st.out + st.err
    assert {h["patches"][0]["outcome"] for h in st.doc["hosts"]} == {"applied"}
    assert json.loads((tmp_path / "r.json").read_text()) == st.doc
    human = vpatch("status", *common)
    assert human.code == 0 and "\x1b" not in human.out
    rows = [
        ln.split()
        for ln in human.out.splitlines()
        if ln.split()[:1] in [[h.name] for h in lab.hosts]
    ]
    assert {r[0]: r[2] for r in rows} == {h["target"]: "applied" for h in st.doc["hosts"]}
    assert vpatch("rollback", *common, "--parallel", "8").code == 0


def test_bad_canary_leaves_the_rest_untouched(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(5, harness.standin_env_factory)
    inv = inventory(tmp_path, lab, bad={"h2"})
    snaps = {h.name: fingerprint(h.home) for h in lab.hosts[2:]}
    res = vpatch(
        "apply",
        spec_file(tmp_path),
        "--inventory",
        inv,
        "--ssh-config",
        str(lab.ssh_config),
        "--canary",
        "2",
        "--json",
    )
    assert res.code == 1
    outcomes = [(h["target"], h["ok"]) for h in res.doc["hosts"]]
    assert outcomes[:2] == [("h1", True), ("h2", False)]
    for h in res.doc["hosts"][2:]:
        assert h["patches"][0]["outcome"] == "skipped" and "canary" in h["patches"][0]["message"]
    assert {h.name: fingerprint(h.home) for h in lab.hosts[2:]} == snaps


def test_max_fail_stops_after_second_failure(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(6, harness.standin_env_factory)
    inv = inventory(tmp_path, lab, bad={"h2", "h3", "h4"})
    res = vpatch(
        "apply",
        spec_file(tmp_path),
        "--inventory",
        inv,
        "--ssh-config",
        str(lab.ssh_config),
        "--max-fail",
        "2",
        "--parallel",
        "1",
        "--json",
    )
    assert res.code == 1
    hosts = res.doc["hosts"]
    assert [h["ok"] for h in hosts[:3]] == [True, False, False]
    assert "not found" in hosts[1]["error"]
    for h in hosts[3:]:
        assert h["patches"][0]["outcome"] == "skipped" and "max-fail" in h["patches"][0]["message"]


def test_groups_and_bad_inventory(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    lab = ssh_lab_factory(2, partial(harness.standin_env_factory))
    inv = tmp_path / "hosts.toml"
    inv.write_text(
        f"[defaults]\npython = '{PY}'\n"
        "[[host]]\nname = 'h1'\naddress = 'h1'\ngroups = ['canary']\n"
        "[[host]]\nname = 'h2'\naddress = 'h2'\n"
    )
    res = vpatch(
        "status",
        "--inventory",
        inv,
        "--group",
        "canary",
        "--ssh-config",
        str(lab.ssh_config),
        "--json",
    )
    assert res.code == 0, res.out + res.err
    assert [h["target"] for h in res.doc["hosts"]] == ["h1"]
    bad = tmp_path / "bad.toml"
    bad.write_text("[[host]]\nname = 'h1'\nadress = 'h1'\n")
    err = vpatch("status", "--inventory", bad)
    assert err.code == 2 and err.err.startswith(f"error: {bad}:3:1: host[0]")
    assert "hint:" in err.err
    nogroup = vpatch("status", "--inventory", inv, "--group", "nope")
    assert nogroup.code == 2 and "no host is in that group" in nogroup.err
