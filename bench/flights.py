"""What one host's command waits on, flight by flight, at a given RTT: the floor (`ssh host sed
-i`) and `vpatch apply --level static` side by side, through the RTT lab's forwarder.

    python -m bench.flights                 # RTT 30 ms, OpenSSH's default key exchange
    python -m bench.flights --rtt 2 --vpatch .venv/installed/bin/vpatch

Each command runs twice on a host reset to pip's bytes (the first warms the caches: the kept
agent, the spec and rewrite caches, the fact cache, as a controller that has met the host
before); the second is printed: every chunk as the forwarder saw it arrive (ms since the
first), `->` client to server, `<-` server to client where a flight begins, `+N` a chunk
continuing it, and the round trips counted (bench/delay.py). Where two commands' flights
part ways is where one waits on the network and the other does not.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench import lab as labs
from bench.rttlab import RttLab
from bench.run import SED, BenchError
from bench.timing import child_env, timed
from tests.support.standin_specs import SPEC_A


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flights", description=__doc__.split("\n")[0])
    p.add_argument("--rtt", type=float, default=30.0, help="round-trip time in ms (30)")
    p.add_argument("--vpatch", default=shutil.which("vpatch") or "vpatch", help="the vpatch run")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="vpatch-flights-"))
    lab = labs.start_standin(1, work)
    labs.default_kex(lab.lab)
    rtt = RttLab(lab.lab, work)
    rtt.set(args.rtt)
    host = lab.hosts[0]
    inv = labs.write_inventory(work / "hosts.toml", [host])
    spec = work / "spec.toml"
    spec.write_text(SPEC_A)
    remote = f"sed -i {shlex.quote(SED)} {shlex.quote(lab.remote_target)}"
    floor = ["ssh", "-F", str(lab.lab.ssh_config), "-T", "-n", host.name, "--", remote]
    apply = [args.vpatch, "apply", str(spec), "--inventory", str(inv), "--level", "static"]
    apply += ["--ssh-config", str(lab.lab.ssh_config), "--python", labs.PYTHON, "--json"]
    env = child_env({"VPATCH_CACHE_DIR": str(work / "cache")})
    try:
        for name, argv_ in (("floor", floor), ("vpatch apply", apply)):
            for _ in range(2):
                lab.reset([host])
                rtt.reset()
                rtt._ask("trace on")
                t = timed(argv_, env=env)
                if t.code != 0:
                    raise BenchError(f"{name}: exit {t.code}\n{t.err[-1500:]}")
            trace = rtt._ask("trace")["trace"]
            trips = rtt.trips()
            print(f"== {name}: wall {t.wall * 1e3:.0f} ms, round trips {trips['round_trips']:.0f}")
            start = float(trace[0].split()[0]) if trace else 0.0
            for line in trace:
                at, rest = line.split(" ", 1)
                print(f"{(float(at) - start) * 1e3:8.1f}  {rest.split(' ', 1)[1]}")
    finally:
        rtt.close()
        lab.lab.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
