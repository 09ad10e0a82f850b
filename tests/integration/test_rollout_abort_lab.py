"""`vpatch rollout abort` while a host waits for its server's health: the wait ends before
its next call to the host (the run's steering channel is read between two), the host goes
back, and its verdict is `aborted`. Real sshd host with the stand-in package, a stand-in
server (tests/support/gateserver.py) whose /health answers 503 from the host's restart on
until the test heals it, so the forward wait could only end by --health-timeout (15 min)
or the abort: the rollout ending at all says the abort ended it.

Nothing waits on a duration: the abort is written once the report says the host is in its
health step, and the server is healed once the report says that step failed."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests import jsondoc
from tests import sshd as harness
from tests.conftest import REPO, VPATCH, vpatch
from tests.support import gateserver, running
from tests.support.standin_specs import SPEC_A

PY = "/root/ml-env/bin/python"
RESTART = "#!/bin/sh\necho restarted >> /root/restarts\n"


class _Health:
    """/health is sick from the host's first restart on until `heal()`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.healed = threading.Event()

    def sick(self) -> bool:
        return self.marker.exists() and not self.healed.is_set()


def _host(report: Path) -> dict[str, Any]:
    hosts = list(running.report_hosts(report).values()) or [{}]
    return dict(hosts[0].get("rollout") or {})


def _health_failed(report: Path) -> bool:
    return any(p["step"] == "health" and not p["ok"] for p in _host(report).get("phases", []))


def test_abort_ends_a_health_wait_and_the_host_goes_back(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    [host] = lab.hosts
    script = host.home / "restart.sh"
    script.write_text(RESTART)
    script.chmod(0o755)
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    target = host.home / "ml-env"
    before = {p: p.read_bytes() for p in sorted(target.rglob("*.py"))}
    health = _Health(host.home / "restarts")
    report = tmp_path / "r.json"
    with gateserver.serve(rate=0.7, sick=health.sick) as base:
        inv = tmp_path / "hosts.toml"
        inv.write_text(
            f"[defaults]\npython = '{PY}'\n\n[[host]]\nname = '{host.name}'\n"
            f"address = '{host.name}'\nmetrics = '{base}/metrics'\n"
        )
        argv = [*VPATCH, "rollout", spec, "--inventory", inv, "--ssh-config", lab.ssh_config]
        argv += ["--level", "static", "--restart", "/root/restart.sh", "--health"]
        argv += [f"{base}/health", "--health-timeout", "900", "--window", "1"]
        argv += ["--scrape-every", "0.5", "--min-drafts", "0", "--report", report]
        proc = subprocess.Popen(
            list(map(str, argv)), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            running.until(proc, lambda: _host(report).get("stopped_in") == "health")
            done = vpatch("rollout", "abort", report)
            assert done.code == 0 and ": abort written (" in done.out, done.out + done.err
            running.until(proc, lambda: _health_failed(report))
            health.healed.set()  # the way back's own health wait then passes
            out, err = proc.communicate(timeout=300)
        finally:
            health.healed.set()
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 1, out + err  # aborted: not ok
    doc = jsondoc.check(json.loads(report.read_text()))
    r = doc["hosts"][0]["rollout"]
    assert r["verdict"] == "aborted", r["phases"]
    steps = [(p["step"], p["ok"]) for p in r["phases"]]
    assert steps == [
        ("baseline", True),
        ("apply", True),
        ("restart", True),
        ("health", False),
        ("rollback", True),
        ("rollback_restart", True),
        ("rollback_health", True),
    ], r["phases"]
    [wait] = [p for p in r["phases"] if p["step"] == "health"]
    assert wait["detail"].startswith("aborted (abort ") and "in the health wait" in wait["detail"]
    assert [s["verb"] for s in r["steers"]] == ["abort"], r["steers"]
    assert (host.home / "restarts").read_text().count("restarted") == 2
    assert {p: p.read_bytes() for p in sorted(target.rglob("*.py"))} == before
