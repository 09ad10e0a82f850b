"""`make demo-rollout`: the seed's story on 4 lab hosts (tests/support/rolloutlab.py), from a
fresh machine: real sshd hosts, real vLLM 0.16.0 files, real supervisord, load on every host.

1. `vpatch rollout vllm-eagle3-mla-targets --canary 1`: the canary loads EAGLE-3, accepts
   ~15 % and serves ~0.66x: rolled back, restarted, healthy; the other 3 hosts untouched.
2. `vpatch rollout vllm-eagle3-mla-backport --canary 1 --batch 2`: kept on all 4.

Run as `python -m tests.demo_rollout` (root: the lab's sshd hosts need mount namespaces).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support import rolloutlab

REPO = Path(__file__).resolve().parent.parent
GATES = ["--window", "10", "--min-drafts", "500", "--min-throughput-ratio", "0.9"]


def _rollout(lab: rolloutlab.RolloutLab, inv: Path, spec: str, *more: str) -> tuple[int, float]:
    args = [
        "rollout",
        str(REPO / "patches" / f"{spec}.toml"),
        "--inventory",
        str(inv),
        "--ssh-config",
        str(lab.ssh.ssh_config),
        "--level",
        "static",
        *GATES,
        *more,
    ]
    print(
        f"\n$ vpatch {' '.join(args[:2])} --inventory hosts.toml {' '.join(args[7:])}", flush=True
    )
    started = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "patcher.cli", *args], cwd=REPO)
    took = time.monotonic() - started
    print(f"(exit {code}, {took:.1f} s)", flush=True)
    return code, took


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="vpatch-demo-rollout-"))
    print("starting 4 lab hosts (sshd + supervisord + a vLLM 0.16.0 server each) ...", flush=True)
    lab = rolloutlab.start(4, work / "lab")
    try:
        inv = lab.inventory(work / "hosts.toml")
        pids = [lab.pid(i) for i in range(4)]
        first, _ = _rollout(lab, inv, "vllm-eagle3-mla-targets", "--canary", "1")
        untouched = all(lab.files(i) == lab.pristine and lab.pid(i) == pids[i] for i in (1, 2, 3))
        canary_back = lab.files(0) == lab.pristine and lab.healthy(0)
        second, _ = _rollout(lab, inv, "vllm-eagle3-mla-backport", "--canary", "1", "--batch", "2")
        print("\n=== report")
        print(f"whitelist: exit {first}; canary restored to pip's bytes and healthy: {canary_back}")
        print(f"whitelist: hosts 2-4 untouched (bytes and server pid): {untouched}")
        for i in range(4):
            c = lab.counters(i)
            rate = c.accepted / c.draft_tokens if c.draft_tokens else 0.0
            print(f"h{i + 1}: server pid {pids[i]} -> {lab.pid(i)}, acceptance now {rate:.0%}")
        ok = first == 1 and second == 0 and untouched and canary_back
        print("demo-rollout: ok" if ok else "demo-rollout: FAILED")
        return 0 if ok else 1
    finally:
        lab.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
