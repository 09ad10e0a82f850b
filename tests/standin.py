"""A light stand-in package, installed by real pip from a real wheel (real RECORD, real .pyc).

vLLM envs cost ~8 s per import; most engine behaviour (stacking, drift, refusals, rollback) is
the same on any package, so those tests use this one. The wheel is built with zipfile (a wheel
is a zip with a dist-info), then installed by pip into a fresh venv of the system interpreter.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from tests import envs

PACKAGE = "servekit"

CONFIG_PY = '''"""Stand-in for a serving engine's config module."""


class SpecConfig:
    def verify(self):
        supported = [
            "llama",
            "qwen",
        ]
        if not any(s in self.model_type for s in supported):
            raise ValueError(f"only supported for {supported}")
        return True


LIMITS = {"max_batch": 8}


def budget(tokens, factor=2):
    return tokens * factor
'''

PROBE = """
from types import SimpleNamespace as NS
assert module.SpecConfig.verify(NS(model_type="kimi_k2")) is True
"""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(dest: Path, version: str = "1.0.0", config: str = CONFIG_PY) -> Path:
    return package_wheel(
        dest,
        PACKAGE,
        version,
        {f"{PACKAGE}/__init__.py": f'__version__ = "{version}"\n', f"{PACKAGE}/config.py": config},
    )


def package_wheel(dest: Path, package: str, version: str, sources: dict[str, str]) -> Path:
    """A wheel of `package` holding `sources` (path in site-packages -> text)."""
    files = {name: text.encode() for name, text in sources.items()}
    info = f"{package}-{version}.dist-info"
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
    ).encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: vpatch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    whl = dest / f"{package}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return whl


def make_env(dest: Path, version: str = "1.0.0", config: str = CONFIG_PY) -> Path:
    """A venv at `dest` with the stand-in installed by pip; returns its python."""
    dest.mkdir(parents=True, exist_ok=True)
    venv = dest / "venv"
    install_venv(venv, build_wheel(dest.parent, version, config))
    return venv / "bin" / "python"


def install_venv(venv: Path, whl: Path) -> None:
    """A venv of the hosts' interpreter (not pyenv's) with `whl` installed by real pip (the dev
    venv's, so the venv needs no pip of its own): a RECORD exactly as on a server."""
    subprocess.run(
        [envs.HOST_PYTHON, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    pip = [sys.executable, "-m", "pip", "-q", "--python", str(venv / "bin" / "python")]
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", str(whl)], check=True, capture_output=True
    )


def bare_venv(venv: Path) -> tuple[Path, Path]:
    """(python, site-packages) of an empty venv of the hosts' interpreter: for agent requests
    that write a file of their own (a commit writes only inside the env's site-packages)."""
    subprocess.run(
        [envs.HOST_PYTHON, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    return venv / "bin" / "python", envs.site_packages(venv)


# Runs the agent's `handle` in-process in ANOTHER interpreter (argv[1]: the bundle file) on one
# request from stdin and prints [answer, faults.REACHED]: for tests that need the steps a
# request went through, in an environment that is not the test runner's.
def _reached_boot() -> str:
    """The transport's own BOOT loader, reading the bundle from a file instead of stdin."""
    from patcher.transports.bundle import BOOT

    loader = BOOT.replace("sys.stdin.buffer.readline()", "open(sys.argv[1], 'rb').readline()")
    assert loader != BOOT and loader.endswith("vpatch_agent.main()\n")
    return loader.removesuffix("vpatch_agent.main()\n") + (
        "from vpatch_agent import faults, wire\n"
        "res=vpatch_agent.handle(wire.loads(sys.stdin.read()))\n"
        "print(wire.dumps([res, faults.REACHED]))\n"
    )


REACHED_BOOT = _reached_boot()


def handle_in(
    python: Path, request: dict[str, object], tmp: Path, prelude: str = ""
) -> tuple[dict[str, Any], list[str]]:
    """(answer, fault points reached) of one request handled by `python`'s own agent
    (`prelude`: code run before the agent loads, a test's instrumentation)."""
    from patcher.transports.bundle import agent_bundle

    bundle = tmp / "bundle.json"
    bundle.write_bytes(agent_bundle())
    proc = subprocess.run(
        [str(python), "-I", "-c", prelude + REACHED_BOOT, str(bundle)],
        input=json.dumps(request).encode(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    answer, reached = json.loads(proc.stdout)
    return answer, reached
