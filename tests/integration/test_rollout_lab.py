"""`vpatch rollout` on the rollout lab (tests/support/rolloutlab.py): real sshd hosts, real
vLLM 0.16.0 files, real supervisord, servers whose acceptance follows the code they loaded.

The seed's story: the whitelist spec lets EAGLE-3 load and it accepts 15 % (0.66x tokens/s):
the canary is rolled back, restarted, healthy again, and no other host is touched. The
back-port then rolls out to every host (new server pids, acceptance >= 0.4).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest

from tests import jsondoc
from tests.conftest import REPO, SPEC, VPATCH, Run, vpatch
from tests.support import rolloutlab

pytestmark = pytest.mark.vllm
BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
# Short windows: the lab's load drafts ~180 times a second per host.
GATES = ["--window", "4", "--min-drafts", "200", "--min-throughput-ratio", "0.9"]


def rollout(lab: rolloutlab.RolloutLab, inv: Path, spec: Path, *more: str) -> Run:
    return vpatch(
        "rollout",
        spec,
        "--inventory",
        inv,
        "--ssh-config",
        lab.ssh.ssh_config,
        "--level",
        "static",
        *GATES,
        *more,
    )


def by_host(run: Run) -> dict[str, dict[str, Any]]:
    return {h["target"]: h for h in run.doc["hosts"]}


def _lab(factory: pytest.TempPathFactory, n: int) -> Iterator[rolloutlab.RolloutLab]:
    lab = rolloutlab.start(n, factory.mktemp(f"rolloutlab{n}"))
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture(scope="module")
def lab4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rolloutlab.RolloutLab]:
    yield from _lab(tmp_path_factory, 4)


def test_whitelist_stops_at_the_canary_then_the_backport_rolls_out(
    lab4: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    inv = lab4.inventory(tmp_path / "hosts.toml")
    pids = [lab4.pid(i) for i in range(4)]
    files = [lab4.files(i) for i in range(4)]
    assert all(pids) and all(f == lab4.pristine for f in files)

    res = rollout(lab4, inv, SPEC, "--canary", "1", "--json", "--report", tmp_path / "r.json")
    assert res.code == 1, res.out + res.err
    hosts = by_host(res)
    canary = hosts["h1"]["rollout"]
    assert (canary["verdict"], canary["reached"]) == ("rolled_back", "gates"), canary
    steps = [(p["step"], p["ok"]) for p in canary["phases"]]
    assert steps == [
        ("baseline", True),
        ("apply", True),
        ("restart", True),
        ("health", True),
        ("window", True),
        ("gates", False),
        ("rollback", True),
        ("rollback_restart", True),
        ("rollback_health", True),
    ]
    assert all(p["started"].endswith("Z") and p["seconds"] >= 0 for p in canary["phases"])
    # The stock server does not speculate (vLLM refuses EAGLE-3 there): no acceptance before.
    assert canary["before"]["acceptance_rate"] is None and canary["before"]["tokens_per_s"] > 0
    assert canary["after"]["acceptance_rate"] == pytest.approx(0.15, abs=0.03)
    gates = {g["name"]: g for g in canary["gates"]}
    assert not gates["acceptance"]["ok"] and not gates["tokens_per_s_ratio"]["ok"]
    assert gates["tokens_per_s_ratio"]["value"] == pytest.approx(0.66, abs=0.12)
    # Rolled back to the exact bytes, restarted (a third server), healthy again.
    assert lab4.files(0) == lab4.pristine
    assert lab4.healthy(0) and lab4.pid(0) not in (0, pids[0])
    # The other three: never started, not one byte or process touched.
    for i, name in enumerate(("h2", "h3", "h4"), 1):
        assert hosts[name]["rollout"] is None and hosts[name]["patches"][0]["outcome"] == "skipped"
        assert lab4.files(i) == files[i] and lab4.pid(i) == pids[i]
    assert (tmp_path / "r.json").read_text().strip() == res.out.strip()

    human = rollout(lab4, inv, BACKPORT, "--canary", "1", "--batch", "2")
    assert human.code == 0, human.out + human.err
    assert "rollout canary (1 host(s)): 1 kept" in human.err
    assert human.err.count("rollout batch") == 2
    table = human.out.splitlines()
    assert table[0].split() == ["host", "step", "reached", "acceptance", "tokens/s", "verdict"]
    assert [ln.split()[0] for ln in table[1:5]] == ["h1", "h2", "h3", "h4"]
    assert all(ln.split()[-1] == "kept" for ln in table[1:5])
    for i in range(4):
        after = lab4.counters(i)
        assert after.spec_decode and after.accepted / after.draft_tokens >= 0.4
        assert lab4.healthy(i) and lab4.pid(i) != pids[i]
        assert lab4.files(i) != lab4.pristine


@pytest.fixture(scope="module")
def lab3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rolloutlab.RolloutLab]:
    yield from _lab(tmp_path_factory, 3)


def test_failing_restart_health_timeout_and_missing_metrics(
    lab3: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """h1: the restart command fails once (the way back's restart works); h2: the patched
    server never gets healthy (its drafter never loads); h3: the metrics URL is wrong."""
    once = (
        "test -e /root/lab/failed-once || { touch /root/lab/failed-once; "
        "echo 'vllm: ERROR (spawn error)' >&2; exit 7; }; /root/lab/ctl restart vllm"
    )
    (lab3.hosts[1].lab / "hang-health").write_text("")
    inv = lab3.inventory(
        tmp_path / "hosts.toml",
        h1={"restart": once},
        h3={"metrics": f"{lab3.hosts[2].base}/no-such-metrics"},
    )
    pids = [lab3.pid(i) for i in range(3)]
    res = rollout(lab3, inv, BACKPORT, "--health-timeout", "45", "--json")
    assert res.code == 1, res.out + res.err
    hosts = by_host(res)

    h1 = hosts["h1"]["rollout"]
    assert (h1["verdict"], h1["reached"]) == ("rolled_back", "restart")
    restart = next(p for p in h1["phases"] if p["step"] == "restart")
    assert "exited 7" in restart["detail"] and "spawn error" in restart["detail"]
    assert [p["step"] for p in h1["phases"]][-3:] == [
        "rollback",
        "rollback_restart",
        "rollback_health",
    ]

    h2 = hosts["h2"]["rollout"]
    assert (h2["verdict"], h2["reached"]) == ("rolled_back", "health")
    health = next(p for p in h2["phases"] if p["step"] == "health")
    assert not health["ok"] and "not healthy after" in health["detail"] and health["seconds"] >= 45
    assert "HTTP 503" in health["detail"]

    h3 = hosts["h3"]["rollout"]
    assert (h3["verdict"], h3["reached"]) == ("untouched", "baseline")
    assert "HTTP 404" in h3["phases"][0]["detail"] and len(h3["phases"]) == 1
    assert lab3.pid(2) == pids[2]  # never restarted

    for i in range(3):
        assert lab3.files(i) == lab3.pristine, f"h{i + 1} not as pip installed it"
        assert lab3.healthy(i)
    assert lab3.pid(0) != pids[0] and lab3.pid(1) != pids[1]


def test_ctrl_c_lets_the_host_in_flight_finish_and_starts_no_other(
    lab3: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """SIGINT while h1 measures its baseline: h1 still goes through every step (kept: patched,
    restarted, gated), h2 and h3 are never started, and the report says so."""
    (lab3.hosts[1].lab / "hang-health").unlink(missing_ok=True)
    inv = lab3.inventory(tmp_path / "hosts.toml")
    pids = [lab3.pid(i) for i in range(3)]
    files = [lab3.files(i) for i in range(3)]
    report = tmp_path / "r.json"
    argv = [*VPATCH, "rollout", BACKPORT, "--inventory", inv, "--ssh-config", lab3.ssh.ssh_config]
    argv += ["--level", "static", *GATES, "--parallel", "1", "--report", report]
    proc = subprocess.Popen(list(map(str, argv)), cwd=REPO, stdout=PIPE, stderr=PIPE, text=True)
    deadline = time.monotonic() + 120
    while lab3.files(0) == files[0] and time.monotonic() < deadline:  # h1 reached apply
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, out + err
    doc = jsondoc.check(json.loads(report.read_text()))
    hosts = {h["target"]: h for h in doc["hosts"]}
    h1 = hosts["h1"]["rollout"]
    assert h1["verdict"] == "kept" and [p["step"] for p in h1["phases"]][-1] == "gates", h1
    assert lab3.pid(0) != pids[0] and lab3.healthy(0) and lab3.files(0) != files[0]
    for i, name in ((1, "h2"), (2, "h3")):
        assert hosts[name]["rollout"] is None
        assert "interrupted (Ctrl-C)" in hosts[name]["patches"][0]["message"]
        assert lab3.files(i) == files[i] and lab3.pid(i) == pids[i]
