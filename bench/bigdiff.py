"""`vpatch diff` of a 20,000-line module with 2,000 changed lines, against `diff -u` (issue 40).

    python -m bench.bigdiff               # both modules, 3 repetitions
    python -m bench.bigdiff --reps 5

Two modules, each 20,000 lines in a wheel of its own (tests/support/wheellab.fake_wheel),
installed into a venv without pip, then 2,000 random lines edited in place:

- `unique`:     every line unique (generated code: `v{i} = compute(x, {i})`)
- `repetitive`: lines drawn from 150 (no line unique: difflib's worst case, matched by the
                system's diff through patcher/authoring/sysdiff.py)

Rows (wall and CPU of the whole command, bench/timing.py; medians): `vpatch diff PACKAGE
--python VENV --wheelhouse DIR` (the pristine side from the wheelhouse: no network), the same
with nothing changed (vpatch's start-up and scan: the floor), and `diff -u` of the two texts.
The goal: vpatch diff <= floor + 3x `diff -u`.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.measured import vpatch_argv
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


def measure(kind: str, reps: int, work: Path) -> dict[str, object]:
    """The rows of one module."""
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
    argv = [*vpatch_argv(), "diff", name, "--python", str(python), "--wheelhouse", str(house)]
    rows: dict[str, list[float]] = {"floor": [], "vpatch": [], "diff_u": []}
    cpu: dict[str, list[float]] = {"floor": [], "vpatch": [], "diff_u": []}
    timed(argv, env=env)  # warm-up: .pyc files, the store
    for _ in range(reps):
        big.write_text("".join(text))
        got = timed(argv, env=env)
        rows["floor"].append(got.wall)
        cpu["floor"].append(got.cpu)
        big.write_text("".join(_edited(text)))
        got = timed(argv, env=env)
        if got.code != 0 or "  # changed" not in got.out:
            raise RuntimeError(f"vpatch diff did not report the edit: {got.err[-500:]}")
        rows["vpatch"].append(got.wall)
        cpu["vpatch"].append(got.cpu)
        got = timed(["diff", "-u", str(before), str(big)])
        rows["diff_u"].append(got.wall)
        cpu["diff_u"].append(got.cpu)
    return {
        "module": kind,
        "wall": {k: summary(v) for k, v in rows.items()},
        "cpu": {k: summary(v) for k, v in cpu.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bigdiff")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vpatch-bigdiff-") as tmp:
        results = [measure(kind, args.reps, Path(tmp)) for kind in ("unique", "repetitive")]
    for r in results:
        wall, cpu = r["wall"], r["cpu"]
        assert isinstance(wall, dict) and isinstance(cpu, dict)
        print(
            f"{r['module']:>10}: vpatch diff {wall['vpatch']['median']:.2f} s wall "
            f"({cpu['vpatch']['median']:.2f} s CPU); nothing changed "
            f"{wall['floor']['median']:.2f} s ({cpu['floor']['median']:.2f}); diff -u "
            f"{wall['diff_u']['median']:.3f} s ({cpu['diff_u']['median']:.3f})"
        )
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
