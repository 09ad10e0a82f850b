"""`vpatch rollout --resume` on the rollout lab (tests/support/rolloutlab.py): real sshd hosts,
real vLLM 0.16.0 files, real supervisord, stand-in servers whose acceptance follows the code
they loaded.

A resume looks before it judges: a host rolled back, patched again, or whose server was
restarted after its window is `changed_since` (nothing judged or run there, exit 1), and the
summary and `vpatch status` say the same. A host that dies mid-rollout leaves a lease that
--resume takes over. A window too short for its evidence is `not_enough_evidence`, never
"serves worse". One 2-host lab serves the module; the tests run in file order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import PIPE, Popen
from typing import Any

import pytest

from tests import jsondoc
from tests.conftest import REPO, VPATCH, Run, vpatch
from tests.support import rolloutlab

pytestmark = pytest.mark.vllm
BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
# A window as long as it is given (no --min-drafts end): two hosts are in it together.
GATES = ["--window", "8", "--min-drafts", "0", "--min-throughput-ratio", "0.9"]


@pytest.fixture(scope="module")
def lab2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rolloutlab.RolloutLab]:
    lab = rolloutlab.start(2, tmp_path_factory.mktemp("resumelab"))
    try:
        yield lab
    finally:
        lab.close()


def _ssh(lab: rolloutlab.RolloutLab, inv: Path) -> list[str]:
    return ["--inventory", str(inv), "--ssh-config", str(lab.ssh.ssh_config)]


def _rollout(lab: rolloutlab.RolloutLab, inv: Path, *more: str | Path) -> Run:
    return vpatch("rollout", BACKPORT, *_ssh(lab, inv), "--level", "static", *GATES, *more)


def _start(lab: rolloutlab.RolloutLab, inv: Path, report: Path, *more: str) -> Popen[str]:
    argv = [*VPATCH, "rollout", str(BACKPORT), *_ssh(lab, inv), "--level", "static", *GATES]
    argv += ["--report", str(report), *more]
    return subprocess.Popen(argv, cwd=REPO, stdout=PIPE, stderr=PIPE, text=True, env=os.environ)


def _until(what: Callable[[], bool], timeout: float = 180) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "the rollout never got there"
        time.sleep(0.1)


def _in(report: Path, step: str, n: int) -> bool:
    """Whether the report written as the rollout goes says its first n hosts are in `step`."""
    if not report.exists():
        return False
    try:
        hosts = json.loads(report.read_text())["hosts"]
    except ValueError:  # (replaced whole by a rename: never half; a race with the test only)
        return False
    return all((h["rollout"] or {}).get("stopped_in") == step for h in hosts[:n])


def _by_host(run: Run) -> dict[str, dict[str, Any]]:
    return {h["target"]: h for h in run.doc["hosts"]}


def _lease(lab: rolloutlab.RolloutLab, i: int) -> dict[str, Any] | None:
    path = lab.hosts[i].ssh.home / "vllm" / ".vpatch" / "rollout.lease"
    return json.loads(path.read_text()) if path.exists() else None


def _ctrl_c_in_the_window(lab: rolloutlab.RolloutLab, inv: Path, report: Path, n: int) -> None:
    """A rollout stopped by Ctrl-C while its first n hosts are in their window step: each
    stops once the window is measured and recorded (next: the gates)."""
    proc = _start(lab, inv, report, "--parallel", str(n))
    try:
        _until(lambda: _in(report, "window", n))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out + err
    doc = jsondoc.check(json.loads(report.read_text()))
    for h in doc["hosts"][:n]:
        r = h["rollout"]
        assert (r["verdict"], r["reached"]) == ("interrupted", "window"), h
    assert all(lab.files(i) != lab.pristine for i in range(n))


def test_resume_after_a_rollback_or_a_server_restart_is_changed_since(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """Ctrl-C with h1 and h2 in their windows; then `vpatch rollback` on h1 (the parked
    lease allows it) and a server restart on h2. --resume: both `changed_since`, with what
    changed, exit 1; no gate judged, nothing run (h2 keeps its files and its new server);
    the summary says no host stays patched, `vpatch status` says the same verdict, and the
    leases are given up. Before, it judged the stored windows: `kept`, exit 0, on pip's bytes."""
    inv = lab2.inventory(tmp_path / "hosts.toml")
    report = tmp_path / "r.json"
    _ctrl_c_in_the_window(lab2, inv, report, 2)
    one = lab2.part(0, 1).inventory(tmp_path / "h1.toml")
    back = vpatch("rollback", BACKPORT, *_ssh(lab2, one))
    assert back.code == 0 and lab2.files(0) == lab2.pristine, back.out + back.err
    pid = lab2.pid(1)
    lab2.ctl(1, "restart", "vllm")
    lab2.wait_healthy(1)
    restarted, files = lab2.pid(1), lab2.files(1)
    assert restarted != pid

    resumed = _rollout(lab2, inv, "--resume", report, "--json")
    assert resumed.code == 1, resumed.out + resumed.err
    hosts = _by_host(resumed)
    h1, h2 = hosts["h1"], hosts["h2"]
    assert (h1["rollout"]["verdict"], h2["rollout"]["verdict"]) == ("changed_since",) * 2
    assert "is no longer applied to" in h1["error"] and "(rolled back)" in h1["error"]
    assert h1["error"].startswith("changed since its window step: ")
    assert f"the server restarted or stopped: pid {pid} " in h2["error"], h2["error"]
    for h in (h1, h2):
        assert not h["ok"] and h["rollout"]["patched"] is False
        assert [p["step"] for p in h["rollout"]["phases"]][-1] == "window"  # no gate judged
        assert "vpatch judged nothing and touched nothing" in h["hint"]
    assert lab2.pid(1) == restarted and lab2.files(1) == files  # nothing ran on h2
    assert lab2.files(0) == lab2.pristine
    assert _lease(lab2, 0) is None and _lease(lab2, 1) is None

    human = _rollout(lab2, inv, "--resume", report)  # the journals' verdicts stand
    assert human.code == 1, human.out + human.err
    assert "rollout: not ok: 0 of 2 host(s) patched" in human.out, human.out
    assert "staying patched" not in human.out and "changed_since" in human.out
    status = vpatch("status", *_ssh(lab2, inv), "--json")
    steps = {h["target"]: h["rollout_step"] for h in status.doc["hosts"]}
    assert [steps[n]["verdict"] for n in ("h1", "h2")] == ["changed_since"] * 2
    said = vpatch("status", *_ssh(lab2, inv))
    assert "verdict kept" not in said.out and "window ok, changed_since" in said.out, said.out


def test_resume_after_a_rollback_and_an_apply_by_hand_is_changed_since(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """Ctrl-C in h1's window; the patch rolled back and applied again by hand: the same
    bytes, another transaction. A person acted on the host: --resume judges nothing."""
    lab = lab2.part(0, 1)
    inv = lab.inventory(tmp_path / "hosts.toml")
    report = tmp_path / "r.json"
    _ctrl_c_in_the_window(lab, inv, report, 1)
    patched = lab.files(0)
    assert vpatch("rollback", BACKPORT, *_ssh(lab, inv)).code == 0
    again = vpatch("apply", BACKPORT, *_ssh(lab, inv), "--level", "static")
    assert again.code == 0 and lab.files(0) == patched, again.out + again.err
    resumed = _rollout(lab, inv, "--resume", report, "--json")
    assert resumed.code == 1, resumed.out + resumed.err
    h1 = _by_host(resumed)["h1"]
    assert (
        h1["rollout"]["verdict"] == "changed_since" and " again since (transaction " in h1["error"]
    )
    assert _lease(lab, 0) is None


def test_a_host_that_dies_in_its_restart_step_is_resumed_and_its_lease_taken_over(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """h2 goes down while it restarts (its sshd, sessions, supervisord and server killed):
    the restart and the way back fail, their records and the lease's park never reach it.
    Back up, its lease names the lost run: a new rollout is refused and told `--resume
    REPORT`, never to remove a file by hand; --resume (two failed steps ahead of the host's
    journal) goes on from the journal, takes the lease over, and keeps the patch."""
    lab = lab2.part(1, 1)
    back = vpatch("rollback", BACKPORT, *_ssh(lab, lab.inventory(tmp_path / "plain.toml")))
    assert back.code == 0 and lab.files(0) == lab.pristine, back.out + back.err
    began, go, held = lab.held_restart(0)
    inv = lab.inventory(tmp_path / "hosts.toml", h2=held)
    report = tmp_path / "r.json"
    proc = _start(lab, inv, report)
    try:
        _until(began.exists)
        lab.die(0)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out + err
    r = jsondoc.check(json.loads(report.read_text()))["hosts"][0]["rollout"]
    said = [(p["step"], p["ok"]) for p in r["phases"]]
    assert said == [("baseline", True), ("apply", True), ("restart", False), ("rollback", False)]
    assert r["verdict"] == "attention"
    go.touch()
    lab.revive(0)  # supervisord starts the server on the patched files, as after a reboot
    lease = _lease(lab, 0)
    assert lease is not None and lease["run"] == r["run"] and not lease["parked"]

    other = _rollout(lab, inv)
    assert other.code == 1, other.out + other.err
    assert "its controller is gone" in other.err
    assert f"`--resume REPORT` (run {r['run']}'s report" in other.err, other.err
    assert "remove" not in other.err and "rollout.lease" not in other.err
    resumed = _rollout(lab, inv, "--resume", report, "--json")
    assert resumed.code == 0, resumed.out + resumed.err
    h2 = _by_host(resumed)["h2"]["rollout"]
    steps = ["baseline", "apply", "restart", "health", "window", "gates"]
    assert h2["verdict"] == "kept" and [p["step"] for p in h2["phases"]] == steps, h2
    assert _lease(lab, 0) is None and lab.healthy(0) and lab.files(0) != lab.pristine


def test_a_window_too_short_for_its_evidence_is_not_enough_evidence(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """--confidence with windows of a few scrapes, by the fixed rule: the rank test of
    tokens/s needs five samples a side and gets two. Rolled back (it was not proven good),
    worded as what it is: `not_enough_evidence`, its numbers, and how to give the next
    window more."""
    lab = lab2.part(0, 1)
    inv = lab.inventory(tmp_path / "hosts.toml")
    assert vpatch("rollback", BACKPORT, *_ssh(lab, inv)).code == 0
    short = ["--confidence", "0.95", "--rule", "fixed", "--window", "1", "--scrape-every", "0.5"]
    res = vpatch(
        "rollout", BACKPORT, *_ssh(lab, inv), "--level", "static", "--min-drafts", "0",
        "--min-throughput-ratio", "0.9", *short, "--max-window", "1.5",
    )  # fmt: skip
    assert res.code == 1, res.out + res.err
    assert "error: h1: gates failed: not enough evidence: tokens_per_s_ratio" in res.err, res.err
    assert "serves worse" not in res.err and "does not serve well" not in res.err
    assert "samples a side, its test needs 5" in res.err
    assert "--max-window, 1.5 s now" in res.err and "--scrape-every, 0.5 s now" in res.err
    assert "not_enough_evidence" in res.out.splitlines()[1]
    doc = vpatch("status", *_ssh(lab, inv), "--json").doc
    assert doc["hosts"][0]["rollout_step"]["verdict"] == "not_enough_evidence"
    assert lab.files(0) == lab.pristine and lab.healthy(0)
