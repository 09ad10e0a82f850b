"""Steering a running `vpatch rollout` on the rollout lab (tests/support/rolloutlab.py: real
sshd hosts, real vLLM 0.16.0 files under a real supervisord, stand-in servers under load):
pause, promote and abort each change what happens next, and the hosts' bytes, their server
pids, the report, the hosts' journals and `vpatch status` agree afterwards; a steer written by
another (non-root) user is refused. The run's events say each steer the controller took and
the host a pause holds, and `vpatch rollout watch REPORT` (plain lines: no terminal) shows
them.

Nothing here waits on a duration: each steer is written while the rollout provably is where
the test needs it (a restart held until the test lets it go, a window without traffic that
only the promote ends, a host the report says a pause holds)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import envs, jsondoc
from tests.conftest import REPO, VPATCH, vpatch
from tests.support import rolloutlab, running
from tests.support.stranger import shared_dir, stranger

pytestmark = pytest.mark.vllm
BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
# A window after the patch that only a steer ends: a 2 s baseline scraped every second has
# fewer per-interval samples than the tokens/s rank test needs (stats.MIN_SAMPLES), so that
# gate stays undecided and the window extends up to --max-window, however loaded the machine.
FLAGS = ["--level", "static", "--window", "2", "--min-drafts", "0", "--scrape-every", "1"]
FLAGS += ["--confidence", "0.95", "--max-window", "900", "--min-throughput-ratio", "0.9"]
FLAGS += ["--parallel", "1"]
# A plain line of `watch` that says a steer taken (the run's, or a host's), or a host held.
STEERED = re.compile(
    r"(rollout \w+|h\d+): (\w+: )?(pause|resume|promote|abort) \d+ by |h\d+: held "
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rolloutlab.RolloutLab]:
    lab = rolloutlab.start(3, tmp_path_factory.mktemp("steerlab"))
    try:
        yield lab
    finally:
        lab.close()


def _in(report: Path, host: str) -> str | None:
    r = running.report_hosts(report).get(host, {}).get("rollout")
    return None if r is None else r["stopped_in"]


def _held(report: Path, host: str) -> bool:
    patches = running.report_hosts(report).get(host, {}).get("patches") or [{}]
    return "held before its start: paused" in (patches[0].get("message") or "")


def _steer(verb: str, report: Path) -> None:
    done = vpatch("rollout", verb, report)
    assert done.code == 0 and f": {verb} written (" in done.out, done.out + done.err


def _journal_steers(lab: rolloutlab.RolloutLab, i: int, run: str) -> list[str]:
    """The steer notes host i's journal holds for `run`, in order."""
    path = lab.hosts[i].ssh.home / "vllm" / ".vpatch" / "journal.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    return [e["steer"]["verb"] for e in lines if e.get("run") == run and "steer" in e]


def _stranger_steers(report: Path) -> subprocess.CompletedProcess[str]:
    """`vpatch rollout abort REPORT` as another user (the system's python on this checkout:
    the test's venv is under root's home)."""
    with stranger() as other:
        return subprocess.run(
            [envs.HOST_PYTHON, "-m", "patcher.cli", "rollout", "abort", str(report)],
            user=other.uid, group=other.gid, extra_groups=[], capture_output=True, text=True,
            cwd="/", env={"PYTHONPATH": str(REPO)}, timeout=120,
        )  # fmt: skip


def test_pause_promote_and_abort_each_change_what_happens_next(
    lab: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """h1, h2, h3 one at a time. While h1 restarts (held), `pause`: h1 goes on through its
    health and into its window, which (its tokens/s gate undecided) only a steer can end:
    `promote` ends it and h1 keeps the patch, which its gates had not decided; then h2 is
    held before its start, untouched (a stranger's steer is refused meanwhile). `resume`
    starts h2; while it restarts (held), `abort`: its health step is not run, it goes back,
    and h3 never starts. A watcher started with the run shows each steer as it was taken."""
    pids = [lab.pid(i) for i in range(3)]
    assert all(pids) and all(lab.files(i) == lab.pristine for i in range(3))
    began1, go1, held1 = lab.held_restart(0)
    began2, go2, held2 = lab.held_restart(1)
    inv = lab.inventory(tmp_path / "hosts.toml", h1=held1, h2=held2)
    with shared_dir() as shared:  # a report others can read: the stranger reaches the channel
        report = shared / "r.json"
        argv = [*VPATCH, "rollout", BACKPORT, "--inventory", inv]
        argv += ["--ssh-config", lab.ssh.ssh_config, *FLAGS, "--report", report]
        proc = subprocess.Popen(
            list(map(str, argv)), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        watcher = None
        try:
            running.until(proc, began1.exists)  # the report and its events are there from the start
            watcher = subprocess.Popen(
                [*VPATCH, "rollout", "watch", str(report)], cwd=REPO, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            run = _steer_through(proc, lab, report, (began1, go1), (began2, go2))
            out, err = proc.communicate(timeout=600)
            watched, watch_err = watcher.communicate(timeout=120)
        finally:
            go1.touch()
            go2.touch()
            for p in (proc, watcher):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.communicate()
        assert proc.returncode == 1, out + err  # aborted: not ok
        assert watcher is not None and watcher.returncode == 1, watched + watch_err  # not ok
        _watched(watched, run)
        doc = jsondoc.check(json.loads(report.read_text()))
        _agree(lab, inv, run, {h["target"]: h for h in doc["hosts"]}, pids)
        ended = vpatch("rollout", "resume", report)
        assert ended.code == 2 and f"rollout {run} has ended: nothing to steer" in ended.err


def _steer_through(
    proc: subprocess.Popen[str],
    lab: rolloutlab.RolloutLab,
    report: Path,
    h1: tuple[Path, Path],
    h2: tuple[Path, Path],
) -> str:
    """The steers, each written where the rollout provably is; the run id."""
    running.until(proc, h1[0].exists)  # h1 is in its restart step, held there
    run = running.report_hosts(report)["h1"]["rollout"]["run"]
    _steer("pause", report)
    h1[1].touch()
    running.until(proc, lambda: _in(report, "h1") == "window")
    _steer("promote", report)
    running.until(proc, lambda: _held(report, "h2"))  # h1 ended; h2 waits before its start
    _held_in_events(report)
    hosts = running.report_hosts(report)
    assert hosts["h1"]["rollout"]["verdict"] == "promoted", hosts["h1"]
    assert hosts["h2"]["rollout"]["phases"] == [] and hosts["h3"]["rollout"]["phases"] == []
    lease = lab.hosts[1].ssh.home / "vllm" / ".vpatch" / "rollout.lease"
    assert not lease.exists() and lab.files(1) == lab.pristine  # never contacted
    assert not h2[0].exists()

    channel = Path(f"{report}.steer")
    before = channel.read_bytes()
    refused = _stranger_steers(report)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert [ln.split(":")[0] for ln in refused.stderr.splitlines()] == ["error", "hint"]
    assert "permission denied" in refused.stderr and "(or root) may steer" in refused.stderr
    assert channel.read_bytes() == before and _held(report, "h2")

    _steer("resume", report)
    running.until(proc, h2[0].exists)  # h2 is in its restart step, held there
    _steer("abort", report)
    h2[1].touch()
    return run


def _held_in_events(report: Path) -> None:
    """REPORT.events once h2 is held: the pause the controller took (the run's), the
    promote (the run's, then h1's in its window), and h2's phase `held` by that pause."""
    lines = Path(f"{report}.events").read_text().splitlines()
    said = [json.loads(ln) for ln in lines if ln.endswith("}")]  # a last line may be unfinished
    steers = [(e.get("host"), e.get("phase"), e["steer"]["verb"]) for e in said if "steer" in e]
    assert steers == [
        (None, None, "pause"),
        (None, None, "promote"),
        ("h1", "window", "promote"),
        ("h2", "held", "pause"),
    ], steers
    held = next(e for e in said if e.get("phase") == "held")
    assert held["kind"] == "phase" and held["steer"]["seq"] == 2


def _watched(lines: str, run: str) -> None:
    """What `vpatch rollout watch` printed (plain lines): a line per steer of the run, one
    per host each changed, h2 held by the pause."""
    said = [ln.split(" ", 1)[1] for ln in lines.splitlines()]
    steers = [ln for ln in said if STEERED.match(ln)]
    head = f"rollout {run}: "
    assert [ln.split(" by ")[0] for ln in steers] == [
        f"{head}pause 2",
        f"{head}promote 3",
        "h1: window: promote 3",
        "h2: held (paused: pause 2",
        f"{head}resume 4",
        f"{head}abort 5",
        "h2: health: abort 5",
    ], steers
    assert any(ln.startswith(f"{head}pause 2 by ") and "vpatch rollout resume" in ln for ln in said)


def _agree(
    lab: rolloutlab.RolloutLab,
    inv: Path,
    run: str,
    hosts: dict[str, dict[str, Any]],
    pids: list[int],
) -> None:
    """The report, the bytes, the server pids, the journals and `vpatch status` agree."""
    h1, h2, h3 = (hosts[f"h{i}"]["rollout"] for i in (1, 2, 3))
    steps = ["baseline", "apply", "restart", "health", "window", "gates"]
    assert (h1["verdict"], [p["step"] for p in h1["phases"]]) == ("promoted", steps), h1
    assert all(p["ok"] for p in h1["phases"]) and h1["patched"] and hosts["h1"]["ok"]
    gates = h1["phases"][-1]["detail"]
    assert gates.startswith("promoted (promote ") and "would not have kept it" in gates
    assert "not enough evidence" in gates  # the tokens/s gate as the window left it
    assert [(s["verb"], s["step"]) for s in h1["steers"]] == [("promote", "window")]
    assert lab.files(0) != lab.pristine and lab.pid(0) not in (0, pids[0]) and lab.healthy(0)

    walked = [(p["step"], p["ok"]) for p in h2["phases"]]
    assert walked == [
        ("baseline", True),
        ("apply", True),
        ("restart", True),
        ("health", False),
        ("rollback", True),
        ("rollback_restart", True),
        ("rollback_health", True),
    ], h2
    assert h2["verdict"] == "aborted" and h2["phases"][3]["detail"].startswith("not run: aborted")
    assert [s["verb"] for s in h2["steers"]] == ["pause", "resume", "abort"]
    assert lab.files(1) == lab.pristine and lab.pid(1) not in (0, pids[1]) and lab.healthy(1)

    assert (h3["verdict"], h3["phases"]) == ("aborted", [])
    assert "aborted (abort " in hosts["h3"]["patches"][0]["message"]
    assert lab.files(2) == lab.pristine and lab.pid(2) == pids[2]  # never touched

    assert _journal_steers(lab, 0, run) == ["promote"]
    assert _journal_steers(lab, 1, run) == ["pause", "resume", "abort"]
    assert _journal_steers(lab, 2, run) == []
    st = vpatch("status", "--inventory", inv, "--ssh-config", lab.ssh.ssh_config, "--json")
    last = {h["target"]: h["rollout_step"] for h in st.doc["hosts"]}
    assert (last["h1"]["run"], last["h1"]["step"], last["h1"]["verdict"]) == (
        run,
        "gates",
        "promoted",
    )
    assert (last["h2"]["run"], last["h2"]["step"], last["h2"]["verdict"]) == (
        run,
        "rollback_health",
        "aborted",
    )
    assert last["h3"] is None
    applied = {h["target"]: [p["outcome"] for p in h["patches"]] for h in st.doc["hosts"]}
    assert applied["h1"] and all(o == "applied" for o in applied["h1"]), applied
    assert not any(o == "applied" for o in applied["h2"] + applied["h3"]), applied
