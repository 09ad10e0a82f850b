"""One host's `vpatch apply --level static` against the floor, for source trees side by side.

    python -m bench.onehost --reps 30 main=/tmp/main-tree now=.
    python -m bench.onehost --kex default --mux main=/tmp/a/bin/vpatch now=/tmp/b/bin/vpatch
    python -m bench.onehost --reps 20 --rtt 30 main=/tmp/main-tree now=.   # bench/delay.py
    python -m bench.onehost --reps 20 --rtt 30 --mbit 20 main=/tmp/main-tree now=.

Each NAME=DIR is a tree holding a `patcher/` package (this checkout, or another revision
unpacked with `git archive REV patcher | tar -x -C DIR`), run by this venv's interpreter with
DIR first on sys.path; a NAME=PATH to a `vpatch` executable runs that one (an install as users
make it, what `make bench` measures: bench/measured.py). One lab host (the stand-in,
bench/lab.py); every round measures the floor (`ssh h sed -i`) and then each tree's apply, the
trees' order reversed every other round, the host reset to pip's bytes before each run and the
result checked (outside the clock). One untimed warm-up round fills the spec cache, the
rewrite cache, the fact cache and the .pyc files: the apply of a spec seen before, issue 41's
row. `--kex` as bench.run's (default: OpenSSH's own choice; lab: curve25519, whose handshake
costs the `ssh` child ~10 ms of CPU instead of ~80); `--mux` adds each tree's apply over a warm
shared connection (bench/mux.py: NAME-mux, the master's CPU during the run counted), where the
`ssh` child costs a few ms and what is left is vpatch's own fixed cost. Printed: medians of wall
and controller CPU (user+sys of the process tree, bench/timing.py), each tree's ratio to the
floor, and the median of per-round differences between consecutive trees (steadier than a
difference of medians when the machine's load drifts).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import shlex
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench import lab as labs
from bench.mux import Mux
from bench.rttlab import RttLab
from bench.run import SED, BenchError, expected_text
from bench.timing import Timed, child_env, timed
from tests.support.standin_specs import SPEC_A

LAUNCH = (
    "import sys; sys.path.insert(0, {src!r}); sys.argv[0] = 'vpatch'; "
    "from patcher.entry import main; sys.exit(main())"
)


def _tree(text: str) -> tuple[str, str]:
    name, sep, src = text.partition("=")
    if not sep or not ((Path(src) / "patcher").is_dir() or Path(src).is_file()):
        raise argparse.ArgumentTypeError(
            f"{text}: want NAME=DIR, DIR holding patcher/, or NAME=PATH of a vpatch executable"
        )
    return name, str(Path(src).resolve())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.onehost", description=__doc__.split("\n")[0])
    p.add_argument("trees", nargs="+", type=_tree, metavar="NAME=DIR")
    p.add_argument("--reps", type=int, default=15, help="timed rounds (15)")
    p.add_argument("--kex", choices=["default", "lab"], default="default", help="as bench.run's")
    p.add_argument("--mux", action="store_true", help="each tree over a warm master too")
    p.add_argument(
        "--rtt", type=float, default=0.0, help="round-trip time in ms (bench/delay.py; 0: loopback)"
    )
    p.add_argument(
        "--mbit", type=float, default=0.0, help="with --rtt: bandwidth per direction (0: none)"
    )
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="vpatch-onehost-"))
    lab = labs.start_standin(1, work)
    if args.kex == "default":
        labs.default_kex(lab.lab)
    rtt = RttLab(lab.lab, work, args.mbit) if args.rtt > 0 else None
    if rtt is not None:
        rtt.set(args.rtt)
    mux = Mux(lab.lab, work)
    host = lab.hosts[0]
    inv = labs.write_inventory(work / "hosts.toml", [host])
    spec = work / "spec.toml"
    spec.write_text(SPEC_A)
    expected = expected_text(lab.pristine_text())
    remote = f"sed -i {shlex.quote(SED)} {shlex.quote(lab.remote_target)}"
    floor = ["ssh", "-F", str(lab.lab.ssh_config), "-T", "-n", host.name, "--", remote]
    env = child_env({"VPATCH_CACHE_DIR": str(work / "cache")})

    def apply(src: str, shared: bool = False) -> Timed:
        vpatch = [src] if Path(src).is_file() else [sys.executable, "-c", LAUNCH.format(src=src)]
        config = mux.config if shared else lab.lab.ssh_config
        argv = [*vpatch, "apply", str(spec), "--inventory", str(inv), "--ssh-config", str(config)]
        argv += ["--python", labs.PYTHON, "--parallel", "1", "--json", "--level", "static"]
        before = mux.cpu() if shared else 0.0
        t = timed(argv, env=env, cwd=src if Path(src).is_dir() else str(work))
        if shared:  # the master encrypted this session: its CPU is the controller's too
            t = dataclasses.replace(t, cpu=t.cpu + mux.cpu() - before)
        outcome = json.loads(t.out)["hosts"][0]["patches"][0]["outcome"] if t.code == 0 else "?"
        if outcome != "applied" or lab.target(host).read_text() != expected:
            raise BenchError(f"{src}: exit {t.code}, outcome {outcome}\n{t.err[-1500:]}")
        return t

    trees: list[tuple[str, str, bool]] = [(name, src, False) for name, src in args.trees]
    if args.mux:
        trees += [(f"{name}-mux", src, True) for name, src in args.trees]
    runs: dict[str, list[Timed]] = {"floor": [], **{name: [] for name, _, _ in trees}}
    try:
        if args.mux:
            mux.warm([host])
        for r in range(args.reps + 1):
            lab.reset([host])
            t = timed(floor)
            if t.code != 0:
                raise BenchError(f"floor: exit {t.code}\n{t.err[-1500:]}")
            measured = [("floor", t)]
            for name, src, shared in trees if r % 2 else trees[::-1]:
                lab.reset([host])
                measured.append((name, apply(src, shared)))
            if r:  # round 0 warms the caches
                for name, t in measured:
                    runs[name].append(t)
    finally:
        mux.close()
        if rtt is not None:
            rtt.close()
        lab.lab.close()
    med = {n: statistics.median(t.wall for t in ts) for n, ts in runs.items()}
    for name, ts in runs.items():
        cpu = statistics.median(t.cpu for t in ts)
        ratio = "" if name == "floor" else f"  {med[name] / med['floor']:.2f}x floor"
        print(f"{name:<12} wall {med[name] * 1e3:7.1f} ms  cpu {cpu * 1e3:7.1f} ms{ratio}")
    for (a, _, x_shared), (b, _, y_shared) in itertools.pairwise(trees):
        if x_shared != y_shared:
            continue  # a cold apply against one over a master: not the same work
        wall = statistics.median(y.wall - x.wall for x, y in zip(runs[a], runs[b], strict=True))
        cpu = statistics.median(y.cpu - x.cpu for x, y in zip(runs[a], runs[b], strict=True))
        print(f"{b} - {a}: per-round wall {wall * 1e3:+.1f} ms, cpu {cpu * 1e3:+.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
