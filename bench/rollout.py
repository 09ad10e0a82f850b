"""What `vpatch rollout` costs beyond the restart and health wait it runs: 1 and 8 hosts.

    python -m bench.rollout                     # 1 and 8 hosts, 3 repetitions
    python -m bench.rollout --sizes 1 --reps 1  # a smoke run
    python -m bench.rollout --json              # the row as JSON (bench/run.py reads it)

The hosts are bench/lab.py's stand-in hosts (real sshd, the stand-in package). The server is
a stand-in too: the restart command is `sleep RESTART_S` (what `systemctl restart` of a model
server costs at the least is its start-up, here fixed), and health is one HTTP server on the
loopback that answers 200. Per repetition and host count, every host reset to pip's bytes
before each command:

- floor    what the restart and the health check cost by hand: `xargs -P N ssh hN 'sleep S;
           python -c "urlopen(HEALTH)"'`
- apply    `vpatch apply SPEC --level static` (the patch alone)
- rollout  `vpatch rollout SPEC --level static --restart 'sleep S' --health URL`: apply,
           restart, health, and a journal record of every step on every host

The goal (issue 26): rollout <= 1.1 x (apply + floor) plus the window (no --metrics here, so
no window): the rollout's own machinery (its steps, the step records, the polling) costs at
most a tenth of doing the same by hand. Wall and controller CPU (user+sys of the process tree)
are both reported; on a loaded machine the wall figures move, the CPU less so.
"""

from __future__ import annotations

import argparse
import http.server
import json
import shlex
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import lab as labs
from bench.measured import vpatch_argv
from bench.timing import Timed, child_env, summary, timed
from tests import sshd as harness
from tests.support.standin_specs import SPEC_A

REPO = Path(__file__).resolve().parent.parent
RESTART_S = 3.0
GOAL = 1.1


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/health" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class RolloutBench:
    def __init__(self, work: Path, lab: labs.StandinLab, health: str, restart_s: float) -> None:
        self.work, self.lab, self.health = work, lab, health
        self.restart = f"sleep {restart_s:g}"
        self.spec = work / "servekit-kimi.toml"
        self.spec.write_text(SPEC_A)
        self.cache = work / "cache"
        self.samples: dict[tuple[str, int], list[Timed]] = {}

    def _vpatch(self, command: str, inv: Path, n: int, *extra: str) -> Timed:
        argv = vpatch_argv()
        argv += [command, str(self.spec), "--inventory", str(inv), "--python", labs.PYTHON]
        argv += ["--ssh-config", str(self.lab.lab.ssh_config), "--parallel", str(n)]
        argv += ["--level", "static", "--json", *extra]
        return timed(argv, env=child_env({"VPATCH_CACHE_DIR": str(self.cache)}), cwd=str(REPO))

    def _check(self, what: str, t: Timed, n: int) -> None:
        if t.code != 0:
            raise SystemExit(f"bench.rollout: {what} failed (exit {t.code}):\n{t.err[-1500:]}")
        if what == "rollout":
            doc = json.loads(t.out)
            verdicts = [h["rollout"]["verdict"] for h in doc["hosts"]]
            if verdicts != ["kept"] * n:
                raise SystemExit(f"bench.rollout: verdicts {verdicts}, wanted kept x {n}")

    def once(self, hosts: Sequence[harness.SshHost], record: bool) -> None:
        n = len(hosts)
        inv = labs.write_inventory(self.work / f"hosts-{n}.toml", hosts)
        names = self.work / f"names-{n}"
        names.write_text("".join(h.name + "\n" for h in hosts))
        probe = f"import urllib.request as u; u.urlopen({self.health!r}, timeout=5)"
        remote = f"{self.restart} && {labs.PYTHON} -I -c {shlex.quote(probe)}"
        ssh = ["ssh", "-F", str(self.lab.lab.ssh_config), "-T", "-n", "{}", "--", remote]
        runs = {
            "floor": lambda: timed(["xargs", "-a", str(names), "-P", str(n), "-I{}", *ssh]),
            "apply": lambda: self._vpatch("apply", inv, n),
            "rollout": lambda: self._vpatch(
                "rollout", inv, n, "--restart", self.restart, "--health", self.health
            ),
        }
        for name, run in runs.items():
            self.lab.reset(hosts)
            t = run()
            self._check(name, t, n)
            if record:
                self.samples.setdefault((name, n), []).append(t)

    def row(self, n: int) -> dict[str, Any]:
        med = {
            name: {
                "wall_s": round(summary([t.wall for t in self.samples[(name, n)]])["median"], 3),
                "controller_cpu_s": round(
                    summary([t.cpu for t in self.samples[(name, n)]])["median"], 3
                ),
            }
            for name in ("floor", "apply", "rollout")
        }
        by_hand = med["apply"]["wall_s"] + med["floor"]["wall_s"]
        ratio = med["rollout"]["wall_s"] / by_hand
        return {
            "hosts": n,
            "runs": len(self.samples[("rollout", n)]),
            **med,
            "rollout_over_floor": round(med["rollout"]["wall_s"] / med["floor"]["wall_s"], 3),
            "rollout_over_apply_plus_floor": round(ratio, 3),
            "overhead_s": round(med["rollout"]["wall_s"] - by_hand, 3),
            "goal": f"rollout <= {GOAL} x (apply + floor)",
            "goal_met": ratio <= GOAL,
        }


def run(sizes: Sequence[int], reps: int, restart_s: float = RESTART_S) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="vpatch-bench-rollout-"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    health = f"http://127.0.0.1:{server.server_address[1]}/health"
    lab = labs.start_standin(max(sizes), work)
    try:
        bench = RolloutBench(work, lab, health, restart_s)
        bench.once(lab.hosts[: min(sizes)], record=False)  # warm-up: .pyc, rewrite cache
        for n in sizes:
            for _ in range(reps):
                bench.once(lab.hosts[:n], record=True)
        return {
            "restart": bench.restart,
            "health": "one HTTP server on the loopback answering 200",
            "window": None,
            "rows": [bench.row(n) for n in sizes],
        }
    finally:
        server.shutdown()
        lab.lab.close(remove=False)
        shutil.rmtree(work, ignore_errors=True)


def text(doc: dict[str, Any]) -> str:
    lines = [
        f"rollout overhead (restart `{doc['restart']}`, health one GET, no window):",
        "hosts  floor s  apply s  rollout s  rollout/(apply+floor)  ctl CPU s (rollout)  goal",
    ]
    for r in doc["rows"]:
        lines.append(
            f"{r['hosts']:>5}  {r['floor']['wall_s']:>7.2f}  {r['apply']['wall_s']:>7.2f}  "
            f"{r['rollout']['wall_s']:>9.2f}  {r['rollout_over_apply_plus_floor']:>21.3f}  "
            f"{r['rollout']['controller_cpu_s']:>19.2f}  {'met' if r['goal_met'] else 'MISSED'}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rollout", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1,8", help="comma-separated host counts (1,8)")
    p.add_argument("--reps", type=int, default=3, help="repetitions per host count (3)")
    p.add_argument("--restart-s", type=float, default=RESTART_S, help="the stand-in restart")
    p.add_argument("--json", action="store_true", help="print the row as one JSON document")
    args = p.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    doc = run(sizes, max(1, args.reps), args.restart_s)
    print(json.dumps(doc, indent=2) if args.json else text(doc))
    return 0 if all(r["goal_met"] for r in doc["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
