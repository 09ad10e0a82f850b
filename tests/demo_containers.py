"""`make demo-containers`: running containers as vpatch targets, on a real podman with a private
store (tests/support/containerlab.py; its image is built once from Debian packages and cached).

Three containers serve the stand-in's endpoint on their own loopback (no port published), the
last one a control. The story, each command printed with what it said:
1. `vpatch status`: nothing recorded.
2. `vpatch rollout` of a patch that halves the tokens/s, `--canary 1 --control 1`, restart =
   `podman restart C` (run on this machine, the container's host): rolled back on the canary.
3. `vpatch rollout` of the good patch: kept; `vpatch status` marks it `ephemeral`.
4. A rollout whose restart re-creates the container: refused, nothing written.
5. `podman rm` + `podman run` of the same image: `vpatch status` says the patch is gone.

Run as `python -m tests.demo_containers` (root: rootful podman).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support import containerlab
from tests.support.standin_specs import SPEC_A, SPEC_B

REPO = Path(__file__).resolve().parent.parent
ROLL = ["--canary", "1", "--control", "1", "--level", "static", "--window", "3",
        "--scrape-every", "0.5", "--min-drafts", "0", "--max-window", "20",
        "--min-throughput-ratio", "0.9"]  # fmt: skip


def _say(lab: containerlab.Lab, *args: str) -> None:
    shown = " ".join(a if " " not in a else repr(a) for a in args)
    print(f"\n$ vpatch {shown}", flush=True)
    began = time.monotonic()
    env = {**lab.env, "XDG_STATE_HOME": str(lab.home / "state")}  # the reports: removed with it
    res = subprocess.run([sys.executable, "-m", "patcher.cli", *args], cwd=REPO, env=env,
                         capture_output=True, text=True)  # fmt: skip
    print((res.stdout + res.stderr).rstrip())
    print(f"(exit {res.returncode}, {time.monotonic() - began:.1f} s)", flush=True)


def main() -> None:
    gone = containerlab.missing()
    if gone:
        sys.exit(f"error: the demo needs {gone}\nhint: make test-deps installs them")
    work = Path(tempfile.mkdtemp(prefix="vpatch-demo-ct-"))
    began = time.monotonic()
    with containerlab.podman_lab() as lab:
        print(f"lab: podman, private store, image ready in {time.monotonic() - began:.1f} s")
        names = [lab.run(f"demo{i}", containerlab.PYTHON, "-c", containerlab.LAB_SERVER)
                 for i in (1, 2, 3)]  # fmt: skip
        url = containerlab.LAB_URL
        inv = work / "hosts.toml"
        inv.write_text(
            "\n".join(
                f'[[host]]\nname = "{n}"\naddress = "local"\ntransport = "podman"\n'
                f'container = "{n}"\npython = "{containerlab.PYTHON}"\n'
                f'restart = "podman restart -t 5 {n}"\n'
                f'health = "{url}/health"\nmetrics = "{url}/metrics"\n'
                for n in names
            )
        )
        good, bad = work / "servekit-kimi.toml", work / "servekit-batch.toml"
        good.write_text(SPEC_A)
        bad.write_text(SPEC_B)
        _say(lab, "status", "--inventory", str(inv))
        _say(lab, "rollout", str(bad), "--inventory", str(inv), *ROLL)
        _say(lab, "rollout", str(good), "--inventory", str(inv), *ROLL)
        _say(lab, "status", "--inventory", str(inv), "--host", names[0])
        again = work / "recreate.toml"
        again.write_text(
            inv.read_text().replace(
                f'restart = "podman restart -t 5 {names[1]}"',
                f'restart = "podman rm -f {names[1]} && podman run -d --name {names[1]} IMAGE"',
            )
        )
        _say(lab, "rollout", str(good), "--inventory", str(again), "--host", names[1], *ROLL)
        print(f"\n$ podman rm -f {names[0]} && podman run ... {names[0]}  (a re-create)")
        lab.rm(names[0])
        lab.run(names[0], containerlab.PYTHON, "-c", containerlab.LAB_SERVER)
        _say(lab, "status", "--inventory", str(inv), "--host", names[0])
    shutil.rmtree(work, ignore_errors=True)
    print(f"\ndemo: {time.monotonic() - began:.1f} s; every container, image and store removed")


if __name__ == "__main__":
    main()
