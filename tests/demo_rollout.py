"""`make demo-rollout`: the seed's story on 4 lab hosts and a control host
(tests/support/rolloutlab.py), from a fresh machine: real sshd hosts, real vLLM 0.16.0 files,
real supervisord, load on every host.

1. `vpatch rollout vllm-eagle3-mla-targets --canary 1 --control 1`: the canary loads EAGLE-3,
   accepts ~15 % and serves ~0.66x of the control host in the same window: rolled back,
   restarted, healthy; the other 3 hosts untouched.
2. `vpatch rollout vllm-eagle3-mla-backport --canary 1 --batch 2 --control 1`: kept on all 4,
   each judged against the control host's window.
The control host (h5, the last target) is only scraped: its files and server pid stay as they
were through both rollouts. On a terminal each rollout draws its live view on stderr (every
host's phase, its time against its limit, the window's evidence so far), redrawn in place;
piped, the same events are plain timestamped lines. After each, the demo counts the events
its report's stream (REPORT.events) holds: what `vpatch rollout watch REPORT` replays.

Run as `python -m tests.demo_rollout` (root: the lab's sshd hosts need mount namespaces).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support import rolloutlab

REPO = Path(__file__).resolve().parent.parent
GATES = ["--window", "10", "--min-drafts", "500", "--min-throughput-ratio", "0.9"]
CONTROL = ["--control", "1", "--scrape-every", "1", "--max-window", "30"]


# What a rollout waits for on the hosts; the rest of its wall time is vpatch's own cost.
WAITING = ("baseline", "restart", "health", "window", "rollback_restart", "rollback_health")


def _overhead(report: Path, batches: list[list[int]], wall: float) -> str:
    """The wall time less, batch after batch, the longest host's waits (the measuring
    windows, the restart command, the health wait): what vpatch itself cost."""
    hosts = json.loads(report.read_text())["hosts"]
    waited = 0.0
    for batch in batches:
        phases = [hosts[i]["rollout"]["phases"] for i in batch if hosts[i]["rollout"]]
        waited += max(
            (sum(p["seconds"] for p in ph if p["step"] in WAITING) for ph in phases), default=0.0
        )
    own: dict[str, float] = {}  # vpatch's own steps, summed over the hosts
    for h in hosts:
        for p in (h["rollout"] or {}).get("phases", []):
            if p["step"] not in WAITING:
                own[p["step"]] = own.get(p["step"], 0.0) + p["seconds"]
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in own.items())
    return (
        f"wall {wall:.1f} s = waiting on the hosts {waited:.1f} s + vpatch {wall - waited:.1f} s"
        f" (its steps over all hosts: {steps})"
    )


def _rollout(
    lab: rolloutlab.RolloutLab, work: Path, spec: str, batches: list[list[int]], *more: str
) -> int:
    inv, report = work / "hosts.toml", work / f"{spec}.json"
    args = [
        "rollout",
        str(REPO / "patches" / f"{spec}.toml"),
        "--level",
        "static",
        *GATES,
        *CONTROL,
        *more,
    ]
    print(f"\n$ vpatch {' '.join(args)} --inventory hosts.toml", flush=True)
    where = ["--inventory", str(inv), "--ssh-config", str(lab.ssh.ssh_config)]
    started = time.monotonic()
    code = subprocess.call(
        [sys.executable, "-m", "patcher.cli", *args, *where, "--report", str(report)], cwd=REPO
    )
    took = time.monotonic() - started
    print(f"(exit {code}; {_overhead(report, batches, took)})", flush=True)
    print(_stream(report), flush=True)
    return code


def _stream(report: Path) -> str:
    """What the run's event stream beside its report holds, by kind."""
    kinds: dict[str, int] = {}
    path = Path(f"{report}.events")
    for line in path.read_text().splitlines():
        kind = json.loads(line)["kind"]
        kinds[kind] = kinds.get(kind, 0) + 1
    said = ", ".join(f"{n} {k}" for k, n in kinds.items())
    return f"(events in {path.name}: {said}; `vpatch rollout watch {report.name}` replays them)"


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="vpatch-demo-rollout-"))
    print("starting 5 lab hosts (sshd + supervisord + a vLLM 0.16.0 server each) ...", flush=True)
    lab = rolloutlab.start(5, work / "lab")
    try:
        lab.inventory(work / "hosts.toml")
        pids = [lab.pid(i) for i in range(5)]
        first = _rollout(lab, work, "vllm-eagle3-mla-targets", [[0]], "--canary", "1")
        untouched = all(lab.files(i) == lab.pristine and lab.pid(i) == pids[i] for i in (1, 2, 3))
        canary_back = lab.files(0) == lab.pristine and lab.healthy(0)
        batches = [[0], [1, 2], [3]]
        more = ("--canary", "1", "--batch", "2")
        second = _rollout(lab, work, "vllm-eagle3-mla-backport", batches, *more)
        print("\n=== report")
        print(f"whitelist: exit {first}; canary restored to pip's bytes and healthy: {canary_back}")
        print(f"whitelist: hosts 2-4 untouched (bytes and server pid): {untouched}")
        control = lab.files(4) == lab.pristine and lab.pid(4) == pids[4]
        print(f"control h5: scraped only, bytes and server pid as they were: {control}")
        for i in range(4):
            c = lab.counters(i)
            rate = c.accepted / c.draft_tokens if c.draft_tokens else 0.0
            print(f"h{i + 1}: server pid {pids[i]} -> {lab.pid(i)}, acceptance now {rate:.0%}")
        ok = first == 1 and second == 0 and untouched and canary_back and control
        print("demo-rollout: ok" if ok else "demo-rollout: FAILED")
        return 0 if ok else 1
    finally:
        lab.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
