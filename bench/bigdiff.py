"""`vpatch diff` of a 20,000-line module with 2,000 changed lines, against `diff -u` (issue 40).

    python -m bench.bigdiff               # both modules, 3 repetitions
    python -m bench.bigdiff --reps 5
    python -m bench.bigdiff --reps 7 --against OLD/bin/vpatch   # before/after, same rounds

Two modules, each 20,000 lines in a wheel of its own (tests/support/wheellab.fake_wheel),
installed into a venv without pip, then 2,000 random lines edited in place:

- `unique`:     every line unique (generated code: `v{i} = compute(x, {i})`)
- `repetitive`: lines drawn from 150 (no line unique: difflib's worst case, matched by the
                system's diff through patcher/authoring/sysdiff.py)

Rows (wall and CPU of the whole command, bench/timing.py; medians): `vpatch diff PACKAGE
--python VENV --wheelhouse DIR` (the pristine side from the wheelhouse: no network), the same
with nothing changed (vpatch's start-up and scan: the floor), and `diff -u` of the two texts.
The goal: vpatch diff <= floor + 3x `diff -u`; each module's line says whether it is met.

Which vpatch: bench/measured.py (`VPATCH_BENCH_VPATCH`, else the dev venv's, which runs the
tree that venv was installed from, editable: not a git worktree's; the first line says which).
`--against CMD` measures a second one (another tree's, e.g. the commit before a change) in the
same rounds, the two alternating which goes first: a before/after on one machine in one
minute, where figures from two runs would differ by the machine's load.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.measured import vpatch_argv, vpatch_install
from bench.timing import child_env, summary, timed
from tests.support import wheellab

LINES = 20_000
CHANGED = 2_000


def _module(kind: str) -> list[str]:
    rng = random.Random(40)
    if kind == "unique":
        return [f"    v{i} = compute(x, {i})\n" for i in range(LINES)]
    vocab = [f"    x{i} = y{i % 17}\n" for i in range(150)]
    return [rng.choice(vocab) for _ in range(LINES)]


def _edited(lines: list[str]) -> list[str]:
    rng = random.Random(41)
    out = list(lines)
    for i in rng.sample(range(LINES), CHANGED):
        out[i] = out[i].rstrip("\n") + "  # changed\n"
    return out


def measure(kind: str, reps: int, work: Path, against: str | None = None) -> dict[str, object]:
    """The rows of one module (with `against`: its floor and diff rows too, `*_against`)."""
    name = f"bigdiff_{kind}"
    text = _module(kind)
    house = work / f"{kind}-wheels"
    house.mkdir()
    wheel = wheellab.fake_wheel(house, name, "1.0", {f"{name}/big.py": "".join(text).encode()})
    venv = work / f"{kind}-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "-q", "--python", str(python), "install", "--no-deps"]
    subprocess.run([*pip, "--no-index", str(wheel)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    big = site / name / "big.py"
    before = work / f"{kind}-before.py"
    before.write_text("".join(text))
    env = child_env({"VPATCH_WHEEL_STORE": str(work / f"{kind}-store")})
    args = ["diff", name, "--python", str(python), "--wheelhouse", str(house)]
    contenders = {"": [*vpatch_argv(), *args]}
    if against:
        contenders["_against"] = [against, *args]
    rows: dict[str, list[float]] = {"diff_u": []}
    cpu: dict[str, list[float]] = {"diff_u": []}
    for suffix in contenders:
        for row in ("floor", "vpatch"):
            rows[row + suffix], cpu[row + suffix] = [], []
    for argv in contenders.values():
        timed(argv, env=env)  # warm-up: .pyc files, the store
    for rep in range(reps):
        order = list(contenders.items())
        for suffix, argv in order if rep % 2 == 0 else order[::-1]:
            big.write_text("".join(text))
            got = timed(argv, env=env)
            rows["floor" + suffix].append(got.wall)
            cpu["floor" + suffix].append(got.cpu)
            big.write_text("".join(_edited(text)))
            got = timed(argv, env=env)
            if got.code != 0 or "  # changed" not in got.out:
                raise RuntimeError(f"vpatch diff did not report the edit: {got.err[-500:]}")
            rows["vpatch" + suffix].append(got.wall)
            cpu["vpatch" + suffix].append(got.cpu)
        got = timed(["diff", "-u", str(before), str(big)])
        rows["diff_u"].append(got.wall)
        cpu["diff_u"].append(got.cpu)
    return {
        "module": kind,
        "wall": {k: summary(v) for k, v in rows.items()},
        "cpu": {k: summary(v) for k, v in cpu.items()},
    }


def bound_check(wall: dict[str, dict[str, float]], suffix: str = "") -> str:
    """PURE: the goal's line for one vpatch's medians: vpatch diff against floor + 3x diff -u."""
    got, floor, diff_u = (
        wall[k]["median"] for k in ("vpatch" + suffix, "floor" + suffix, "diff_u")
    )
    bound = floor + 3 * diff_u
    verdict = "met" if got <= bound else "MISSED"
    return (
        f"vpatch diff {got:.3f} s vs floor + 3x diff -u = {floor:.3f} + 3 x {diff_u:.3f} = "
        f"{bound:.3f} s: {verdict} ({(bound - got) * 1000:+.1f} ms to spare)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bigdiff")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument(
        "--against", metavar="CMD", help="another vpatch, measured in the same rounds (before)"
    )
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vpatch-bigdiff-") as tmp:
        results = [
            measure(kind, args.reps, Path(tmp), args.against) for kind in ("unique", "repetitive")
        ]
    print(f"vpatch: {vpatch_install()}; against: {args.against or '-'}")
    for r in results:
        wall, cpu = r["wall"], r["cpu"]
        assert isinstance(wall, dict) and isinstance(cpu, dict)
        for suffix, who in (("", "vpatch"), ("_against", "against")):
            if "vpatch" + suffix not in wall:
                continue
            w, c = ({k: v[k + suffix]["median"] for k in ("vpatch", "floor")} for v in (wall, cpu))
            print(
                f"{r['module']:>10} {who:>7}: vpatch diff {w['vpatch']:.3f} s wall "
                f"({c['vpatch']:.3f} s CPU); nothing changed {w['floor']:.3f} s "
                f"({c['floor']:.3f}); diff -u {wall['diff_u']['median']:.3f} s "
                f"({cpu['diff_u']['median']:.3f})"
            )
            print(f"{'':>10} {'':>7}  {bound_check(wall, suffix)}")
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
