"""`make demo`: the main job end to end on a real vLLM release, from a fresh machine.

Builds (or reuses) a local serving env with vLLM 0.16.0 installed by pip, makes a private copy,
then runs the real CLI: apply (with diff), verify (probe passes), rollback (bytes restored), and
prints a short report with the hashes that prove it. The env stays (under the test cache, one
per machine, replaced by the next `make demo`) and the demo ends with the README's commands
spelled out for it, so a newcomer's next step is to paste them.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests import envs

VERSION = "0.16.0"
SPEC = Path(__file__).resolve().parent.parent / "patches" / "vllm-eagle3-mla-targets.toml"
REL = "vllm/config/speculative.py"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _step(title: str, *args: str) -> tuple[int, float]:
    print(f"\n=== {title}\n$ vpatch {' '.join(args)}", flush=True)
    started = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "patcher.cli", *args])
    took = time.monotonic() - started
    print(f"(exit {code}, {took:.1f}s)", flush=True)
    return code, took


def run_demo() -> int:
    print(f"building a vLLM {VERSION} serving env (cached under {envs.CACHE}) ...", flush=True)
    work = envs.CACHE / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = envs.clone(VERSION, work / "venv")
    python = str(env / "bin" / "python")
    target = envs.site_packages(env) / REL
    pristine = _sha(target)
    py = ["--python", python]
    steps = [
        _step("verify before: the probe fails on the pristine file", "verify", str(SPEC), *py),
        _step("apply (with diff)", "apply", str(SPEC), *py, "--diff"),
        _step("verify: probe passes", "verify", str(SPEC), *py),
        _step("status", "status", *py),
        _step("rollback: exact bytes back", "rollback", *py),
    ]
    restored = _sha(target)
    print("\n=== report")
    print(f"vLLM {VERSION} at {env}")
    print(f"pristine sha256  {pristine}")
    same = "(identical)" if restored == pristine else "(DIFFERENT)"
    print(f"restored sha256  {restored}  {same}")
    print(f"apply+verify(full): {steps[1][1]:.1f}s; verify alone: {steps[2][1]:.1f}s")
    expected = [1, 0, 0, 0, 0]
    ok = [c for c, _ in steps] == expected and restored == pristine
    print("demo: ok" if ok else f"demo: FAILED (exit codes {[c for c, _ in steps]})")
    if ok:
        _try_it(python)
    return 0 if ok else 1


def _try_it(python: str) -> None:
    """The README's commands, spelled out for the env the demo leaves behind."""
    repo = Path(__file__).resolve().parent.parent
    vpatch = repo / ".venv" / "bin" / "vpatch"
    vp = str(vpatch) if vpatch.exists() else "vpatch"
    spec = "vllm-eagle3-mla-targets"
    print(f"\n=== try it yourself: the env stays at {Path(python).parent.parent}")
    for line in (
        f"{vp} apply {spec} --python {python} --diff",
        f"{vp} verify {spec} --python {python}",
        f"{vp} status --python {python}",
        f"{vp} diff vllm --python {python}          # every file that is not pip's",
        f"{vp} rollback --python {python}",
        f"{vp} matrix {spec} --versions '>=0.15'   # which releases it fits (no host)",
    ):
        print(f"  {line}")
