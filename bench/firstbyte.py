"""How long `vpatch apply` takes from process start to the first byte a host receives.

    python -m bench.firstbyte            # 15 runs; --runs N for more

The host is local: a stand-in package in its own venv (tests/standin.py), patched with
`vpatch apply --level static` and a warm on-disk rewrite cache (patcher/caches/rewrites.py), as a
controller that has patched this content before runs it. Each run is rolled back (outside the
clock) so every apply does the same work.

How the first byte is seen, from outside vpatch (nothing in it is instrumented): `--python`
names a tiny C shim, compiled here with the system's cc. The local transport starts it as the
agent interpreter; it waits in poll() until its stdin is readable, notes CLOCK_MONOTONIC (the
clock Python's time.monotonic_ns reads, one for every process) and execs the real interpreter
with the same arguments, so the agent reads the untouched bytes. A shim in Python could start
later than vpatch writes, and would then measure its own start, not vpatch's write.

Printed: the median (and min) of that first byte's time since the moment before vpatch's
process was spawned, next to the floor (`python -c pass` of this interpreter) and
`vpatch --version`, whose medians are total wall times.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.timing import child_env
from tests import standin
from tests.support.standin_specs import SPEC_A

REPO = Path(__file__).resolve().parent.parent

SHIM_C = r"""
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *real = getenv("FIRSTBYTE_REAL"), *log = getenv("FIRSTBYTE_LOG");
    struct pollfd fd = {0, POLLIN, 0};
    struct timespec ts;
    if (!real || !log) return 111;
    while (poll(&fd, 1, -1) < 0) {}
    clock_gettime(CLOCK_MONOTONIC, &ts);
    FILE *f = fopen(log, "a");
    if (f) { fprintf(f, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec); fclose(f); }
    argv[0] = (char *)real;
    execv(real, argv);
    return 127;
}
"""


def vpatch_argv() -> list[str]:
    script = Path(sys.executable).parent / "vpatch"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from patcher.entry import main; raise SystemExit(main())"]


def build_shim(work: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("bench.firstbyte needs a C compiler (cc) for its first-byte shim")
    src, exe = work / "shim.c", work / "shim"
    src.write_text(SHIM_C)
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def wall_ms(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.monotonic_ns()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
        out.append((time.monotonic_ns() - started) / 1e6)
    return out


def first_byte_ms(argv: list[str], env: dict[str, str], log: Path, cwd: Path) -> float:
    log.unlink(missing_ok=True)
    started = time.monotonic_ns()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"vpatch apply failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    first = int(log.read_text().split()[0])
    return (first - started) / 1e6


def show(name: str, ms: list[float]) -> None:
    print(f"{name:<34} median {statistics.median(ms):6.1f} ms   min {min(ms):6.1f} ms")


def main() -> int:
    first_line = (__doc__ or "").split("\n")[0]
    p = argparse.ArgumentParser(prog="python -m bench.firstbyte", description=first_line)
    p.add_argument("--runs", type=int, default=15, help="measured runs of each row (15)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="vpatch-firstbyte-") as tmp:
        work = Path(tmp)
        shim = build_shim(work)
        python = standin.make_env(work / "host")
        spec = work / "servekit-kimi.toml"
        spec.write_text(SPEC_A)
        log = work / "first.log"
        env = child_env(
            {
                "VPATCH_CACHE_DIR": str(work / "cache"),
                "VPATCH_NO_CACHE": "",
                "FIRSTBYTE_REAL": str(python),
                "FIRSTBYTE_LOG": str(log),
            }
        )
        vp = vpatch_argv()
        apply = [*vp, "apply", str(spec), "--level", "static", "--python", str(shim)]
        rollback = [*vp, "rollback", "--python", str(python)]

        def run_once() -> float:
            ms = first_byte_ms(apply, env, log, work)
            subprocess.run(rollback, env=env, cwd=work, capture_output=True, check=True)
            return ms

        run_once()  # warm-up: fills the rewrite cache and the .pyc caches
        run_once()
        fb = [run_once() for _ in range(args.runs)]
        floor = wall_ms([sys.executable, "-c", "pass"], env, args.runs)
        version = wall_ms([*vp, "--version"], env, args.runs)
    show("floor: python -c pass (wall)", floor)
    show("vpatch --version (wall)", version)
    show("vpatch apply: first byte to host", fb)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
