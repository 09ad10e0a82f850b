"""Real vLLM model modules on CPU, for the probes of patches/vllm-eagle3-mla-backport.toml.

The base test venv (tests/envs.py) carries what `vllm.config.speculative` imports. Importing
`vllm.model_executor.models.deepseek_v2`, `.kimi_k25` and `vllm.v1.spec_decode.eagle` (0.16-0.18)
needs a few more of vLLM's own dependencies, all small: they are installed once, pinned,
with `pip install --no-deps --target` into the cache (never the shared base venv, which other
test runs use concurrently), and a clone sees them through a `.pth` file. vLLM's CUDA kernels
(`vllm._C`) and triton stay absent: vLLM logs that and the modules still import.

`run_probes` runs every probe of a spec in ONE fresh `python -I` of the target, each probe in
its own namespace with `module` bound, exactly as vpatch's agent runs one (patcher/agent/
probe.py); only the interpreter is shared, so a state of the files costs one ~8 s torch import
instead of one per probe. The probes restore whatever module attribute they stand in for, so
sharing the interpreter cannot leak one probe's stand-ins into the next. vpatch itself runs them
(one interpreter each) where a test checks `vpatch verify --level full`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from patcher.specs.model import PatchSpec
from tests import envs

# vLLM requirements the CPU base lacks, at versions that import with its torch/transformers.
EXTRAS = [
    "msgspec==0.23.0",
    "einops==0.8.2",
    "pybase64==1.5.1",
    "py-cpuinfo==9.0.0",
    "compressed-tensors==0.13.0",
    "loguru==0.7.3",
    "prometheus_client==0.26.0",
]
_STAMP = "extras-v1: " + " ".join(EXTRAS)

FILES = (
    "vllm/config/speculative.py",
    "vllm/model_executor/models/deepseek_v2.py",
    "vllm/model_executor/models/kimi_k25.py",
    "vllm/v1/spec_decode/eagle.py",
)


def extras_dir() -> Path:
    """The pinned extras, installed once (by the base venv's pip: msgspec and pybase64 are
    compiled for its Python)."""
    dest = envs.CACHE / "extras" / "vllm-models-v1"
    if (dest / ".ready").exists() and (dest / ".ready").read_text() == _STAMP:
        return dest
    base = envs.base_env()
    with envs._cache_lock():
        if not ((dest / ".ready").exists() and (dest / ".ready").read_text() == _STAMP):
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            pip = [str(base / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
            subprocess.run([*pip, "--target", str(tmp), *EXTRAS], check=True)
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
            (dest / ".ready").write_text(_STAMP)
    return dest


def add_extras(site_packages: Path) -> None:
    """Let a (cloned, private) environment import the model modules: a .pth to the extras."""
    (site_packages / "_vpatch_test_vllm_models.pth").write_text(f"{extras_dir()}\n")


# Runs in the target: each probe as the agent's _BOOT runs it, but all in one interpreter.
_RUNNER = """
import importlib, json, sys, traceback
out = []
for probe in json.loads(sys.stdin.read()):
    try:
        module = importlib.import_module(probe["module"])
        src = compile(probe["code"], "<probe>", "exec")
        exec(src, {"module": module, "__name__": "__vpatch_probe__"})
        out.append({"name": probe["name"], "ok": True, "detail": "passed"})
    except Exception as exc:
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        out.append({"name": probe["name"], "ok": False, "detail": last})
print("PROBES " + json.dumps(out))
"""


def run_probes(python: Path, spec: PatchSpec) -> list[dict[str, Any]]:
    """{name, ok, detail} per probe of `spec`, in spec order, run in the target's python -I."""
    probes = [{"name": p.name, "module": p.module, "code": p.code} for p in spec.probe]
    proc = subprocess.run(
        [str(python), "-I", "-c", _RUNNER],
        input=json.dumps(probes),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBES ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    got: list[dict[str, Any]] = json.loads(lines[-1].removeprefix("PROBES "))
    return got
