"""`vpatch.core.patch` as a rollout under ansible-playbook's own `serial`: real ansible-core,
real sshd hosts with the stand-in package, a restart command that is a small script on each
host, and a health and metrics endpoint served by a stand-in server on 127.0.0.1
(tests/support/gateserver.py) that every window measures at 50 % draft acceptance.

A gate it fails (acceptance >= 90 %) rolls the first host of the serial batch back to pip's
bytes, restarts it again, fails its task, and `max_fail_percentage: 0` stops the play before
the second host is touched; a gate it passes (>= 40 %) keeps the patch on both.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests import envs, scale
from tests import sshd as harness
from tests.support import gateserver
from tests.support.handedits import record_sha
from tests.support.standin_specs import REL, SPEC_A

PY = "/root/ml-env/bin/python"
RESTART = "#!/bin/sh\necho restarted >> /root/restarts\n"
SERIAL = {"serial": 1, "max_fail_percentage": 0}


@pytest.fixture(scope="module")
def collections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scale.collection(tmp_path_factory.mktemp("collection"))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def task(spec: Path, url: str, min_acceptance: str) -> dict[str, Any]:
    return {
        "name": "rollout",
        "vpatch.core.patch": {
            "spec": str(spec),
            "python": PY,
            "restart": "/root/restart.sh",
            "health_url": f"{url}/health",
            "health_timeout": 20,
            "metrics_url": f"{url}/metrics",
            "window": 1,
            "min_drafts": 0,
            "min_acceptance": min_acceptance,
        },
    }


def restarts(host: harness.SshHost) -> int:
    path = host.home / "restarts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_serial_rollout_gate_failing_rolls_back_and_stops_gate_passing_keeps(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, collections: Path
) -> None:
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    h1, h2 = lab.hosts
    for h in lab.hosts:
        script = h.home / "restart.sh"
        script.write_text(RESTART)
        script.chmod(0o755)
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    files = {h.name: envs.site_packages(h.home / "ml-env") / REL for h in lab.hosts}
    pristine = {name: sha(f) for name, f in files.items()}
    play = scale.AnsibleLab(tmp_path / "ansible", lab, collections)

    with gateserver.serve(rate=0.5) as url:
        bad = play.play([task(spec, url, "0.9")], name="bad", play_keys=SERIAL)
        check_rolled_back_and_stopped(bad, lab, files, pristine)
        good = play.play([task(spec, url, "0.4")], name="good", play_keys=SERIAL)

    # The gate passes: both hosts, one at a time, patched and restarted once, kept.
    assert good.code == 0, good.out + good.err
    # one task result per serial batch: h1's, then h2's
    assert [list(t["hosts"]) for t in good.doc["tasks"]] == [[h1.name], [h2.name]]
    for h in lab.hosts:
        r = {n: x for t in good.doc["tasks"] for n, x in t["hosts"].items()}[h.name]
        assert r.get("failed") is not True and r["changed"] is True, r
        assert r["rollout"]["verdict"] == "kept"
        assert set(r["outcomes"].values()) == {"applied"}, r["outcomes"]
        assert sha(files[h.name]) != pristine[h.name]
    assert (restarts(h1), restarts(h2)) == (3, 1)


def check_rolled_back_and_stopped(
    bad: scale.Played, lab: harness.SshLab, files: dict[str, Path], pristine: dict[str, str]
) -> None:
    h1, h2 = lab.hosts
    # The gate fails on the canary: rolled back to pip's bytes, restarted twice (the patch's
    # restart, then the way back's), the task failed; the second host never started.
    assert bad.code == 2, bad.out + bad.err
    res = bad.results()
    assert set(res) == {h1.name}, res
    r = res[h1.name]
    assert r["failed"] is True and r["changed"] is True
    assert r["rollout"]["verdict"] == "rolled_back" and r["rollout"]["reached"] == "gates"
    assert [p["step"] for p in r["rollout"]["phases"]] == [
        "baseline",
        "apply",
        "restart",
        "health",
        "window",
        "gates",
        "rollback",
        "rollback_restart",
        "rollback_health",
    ]
    [gate] = [g for g in r["rollout"]["gates"] if g["name"] == "acceptance"]
    assert gate["ok"] is False and gate["value"] == pytest.approx(0.5, abs=0.05)
    assert r["vpatch"]["command"] == "rollout" and "gates failed" in r["msg"]
    assert sha(files[h1.name]) == record_sha(files[h1.name].parents[1], REL) == pristine[h1.name]
    assert (restarts(h1), restarts(h2)) == (2, 0)
    assert sha(files[h2.name]) == pristine[h2.name]
