"""A fleet table projected from measured parts: hosts on their own CPUs, a controller of K cores.

    python -m bench.project RESULTS.json [RESULTS.json ...]     # markdown on stdout

On the lab, controller and hosts share 2 cores; on a fleet each host pays its own CPU at the
same time, and what grows with N is the controller's CPU. From a bench run's rows (every RTT
and host count it holds) this takes, per tool and RTT:
- L: one host's wall time at that RTT (the 1-host row: its own handshake, round trips and the
  host's work, the controller's fixed cost included);
- c: the controller's CPU per extra host, (ctl CPU at the largest N - ctl CPU at 1) / (N - 1);
- F: the controller's fixed CPU, ctl CPU at 1 host - c;
and projects N hosts on K cores as the larger of what every host waits on and what the
controller must compute, max(L, (F + N * c) / usable cores): the hosts' waits overlap the
controller's work, so the two are not added (a lower bound). Usable cores: K for tools
whose per-host CPU runs in processes of their own (OpenSSH children: the floor, vpatch,
ansible's forks); 1 for pyinfra, whose SSH (paramiko) and its per-host work run in one Python
process. Every host at once (parallel = N), as the bench runs them. A projection, labelled so:
a lower bound that ignores the controller's memory, file descriptors, and the network's own
limits, from figures taken on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

TOOLS = {  # row name -> (label, usable cores: None = all of the controller's)
    "floor": ("floor (`ssh host sed -i`)", None),
    "vpatch-apply": ("vpatch apply", None),
    "pyinfra": ("pyinfra", 1),
    "ansible-pipelining": ("ansible-core (pipelining)", None),
    # the next command within ControlPersist: a session over the master, no handshake
    "floor-mux": ("floor, warm shared connection", None),
    "vpatch-apply-mux": ("vpatch apply, warm shared connection", None),
}
FLEETS = (128, 1_000, 10_000)
CORES = (2, 16)


class Parts(NamedTuple):
    latency: float  # L, s
    fixed: float  # F, s of controller CPU
    per_host: float  # c, s of controller CPU a host
    host_cpu: float  # the hosts' CPU a host (sshd included), s


def _median(row: dict[str, Any], key: str) -> float:
    v = row.get(key)
    return float(v["median"]) if isinstance(v, dict) else math.nan


def parts(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, float], Parts]:
    """(tool, RTT) -> its measured parts, from the rows of one or more runs."""
    by: dict[tuple[str, float], dict[int, dict[str, Any]]] = {}
    for r in rows:
        if r["name"] in TOOLS:
            by.setdefault((r["name"], float(r.get("rtt_ms", 0.0))), {})[int(r["hosts"])] = r
    out = {}
    for key, sizes in by.items():
        if 1 not in sizes:
            continue
        one, top = sizes[1], max(sizes)
        cpu1 = _median(one, "controller_cpu_s")
        c = (_median(sizes[top], "controller_cpu_s") - cpu1) / (top - 1) if top > 1 else math.nan
        hosts_cpu = _median(sizes[top], "hosts_cpu_s") / top
        out[key] = Parts(_median(one, "wall_s"), cpu1 - c, c, hosts_cpu)
    return out


def wall(p: Parts, n: int, cores: int, usable: int | None) -> float:
    """The projected wall time of n hosts on a controller of `cores` cores (seconds)."""
    k = cores if usable is None else min(cores, usable)
    return max(p.latency, (p.fixed + n * max(p.per_host, 0.0)) / k)


def table(measured: dict[tuple[str, float], Parts]) -> list[str]:
    rtts = sorted({rtt for _, rtt in measured})
    head = ["tool", "RTT ms", "L s", "ctl CPU/host ms", "hosts CPU/host ms"]
    head += [f"{n:,} hosts, {k} cores" for n in FLEETS for k in CORES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rtt in rtts:
        for name, (label, usable) in TOOLS.items():
            p = measured.get((name, rtt))
            if p is None:
                continue
            cells = [
                label,
                f"{rtt:g}",
                f"{p.latency:.2f}",
                f"{p.per_host * 1e3:.1f}",
                f"{p.host_cpu * 1e3:.1f}",
            ]
            cells += [f"{wall(p, n, k, usable):.1f}" for n in FLEETS for k in CORES]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.project", description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", type=Path)
    args = p.parse_args(argv)
    rows = [r for f in args.results for r in json.loads(f.read_text())["rows"]]
    print("\n".join(table(parts(rows))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
