"""Real vLLM serving environments for tests and the demo, built at test time and cached.

Nothing from vLLM is ever committed: wheels come from the package index through pip (honouring
the user's pip configuration) and are cached outside the repo and outside /root (SSH test hosts
mask /root), by default under /var/cache/vpatch-test.

Layout of the cache:
    base/                 venv with torch (CPU) + the small deps `vllm.config.speculative` imports
    wheels/               `pip download --no-deps vllm==X`
    envs/vllm-X/          template venv: `pip install --no-deps` of the wheel (real RECORD, real
                          .pyc) plus a .pth pointing at base's site-packages
Tests never touch a template: `clone()` makes a hard-link copy (`cp -al`), which is safe because
vpatch only ever writes by rename, so a patched copy never alters the template's inodes.

`python -m tests.envs build 0.16.0 ...` prebuilds; `python -m tests.envs demo` runs the demo.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CACHE = Path(os.environ.get("VPATCH_TEST_CACHE", "/var/cache/vpatch-test"))
# The interpreter test hosts use: the system one, never pyenv's (root's .bashrc runs pyenv).
HOST_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
# Pinned so an index update cannot silently change what "imports on CPU" means.
BASE_DEPS = [
    "torch==2.13.0",
    "numpy==2.4.6",
    "regex==2026.11.19",
    "pydantic==2.14.4",
    "cachetools==8.0.2",
    "cbor2==6.3.0",
    "cloudpickle==3.1.3",
    "psutil==7.2.2",
    "setproctitle==1.3.8",
    "pyyaml==6.0.4",
    "pyzmq==27.3.0",
    "packaging==26.4",
    "transformers==5.24.0",
    "aiohttp==3.14.5",
    "requests==2.34.2",
    "blake3==1.0.11",
    "pillow==13.0.0",
    "gguf==0.19.0",
]
_BASE_STAMP = "deps-v1: " + " ".join(BASE_DEPS)
# What a release imports on top of BASE_DEPS before `vllm.config.speculative` loads (0.24 pulls
# in the MCP tool server: openai and openai-harmony), installed --no-deps into its template.
RELEASE_DEPS: dict[str, list[str]] = {
    "vllm==0.24.0": [
        "openai==3.57.0",
        "openai-harmony==0.0.8",
        "httpx2==2.16.2",
        "httpcore2==2.16.2",
        "anyio==4.16.0",
        "h11==0.16.0",
        "sniffio==1.3.1",
        "jiter==0.19.0",
    ],
}


def _run(cmd: list[str], **kw: object) -> None:
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


@contextmanager
def _cache_lock() -> Iterator[None]:
    """Serialise builds across concurrent test processes."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise FileNotFoundError(f"no site-packages under {venv}")
    return found[0]


def _quiet() -> list[str]:
    """pip's -q, except for a person at a terminal (`make demo`): there pip's own progress
    bars show what the minutes of an env build are spent on; logs and the suite stay quiet."""
    return [] if sys.stderr.isatty() else ["-q"]


def _pip(*args: str) -> None:
    _run([str(CACHE / "base" / "bin" / "python"), "-m", "pip", *_quiet(), *args])


def base_env() -> Path:
    """The shared dependency venv (torch CPU etc.); built once."""
    base = CACHE / "base"
    stamp = base / ".vpatch-ready"
    if stamp.exists() and stamp.read_text() == _BASE_STAMP:
        return base
    with _cache_lock():
        if stamp.exists() and stamp.read_text() == _BASE_STAMP:
            return base
        shutil.rmtree(base, ignore_errors=True)
        _run([HOST_PYTHON, "-m", "venv", str(base)])
        _pip("install", *BASE_DEPS)
        stamp.write_text(_BASE_STAMP)
    return base


def _pip_here(*args: str) -> None:
    """pip of the interpreter running the tests (no base venv: for installs without deps)."""
    _run([sys.executable, "-m", "pip", *_quiet(), *args])


def wheel(package: str, version: str, *, base: bool = True) -> Path:
    """Download (once) the real wheel of package==version, without dependencies.

    `base=False` downloads with the test interpreter's pip instead of the base venv's, for
    callers that never import the package and so do not need torch and friends built first."""
    dest = CACHE / "wheels"
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if found:
        return found[0]
    if base:
        base_env()
    with _cache_lock():
        found = sorted(dest.glob(pattern))
        if not found:
            dest.mkdir(parents=True, exist_ok=True)
            pip = _pip if base else _pip_here
            pip("download", "--no-deps", "-d", str(dest), f"{package}=={version}")
            found = sorted(dest.glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip downloaded no wheel matching {pattern}")
    return found[0]


def template(version: str, package: str = "vllm", *, bare: bool = False) -> Path:
    """A pristine venv with package==version installed by pip --no-deps; never modified.

    `bare`: the package alone, without the base venv behind it (nor its torch build), which is
    enough for `--level static`: it reads RECORD and rewrites files, it never imports them."""
    env = CACHE / "envs" / (f"{package}-{version}-bare" if bare else f"{package}-{version}")
    stamp = env / ".vpatch-ready"
    extras = [] if bare else RELEASE_DEPS.get(f"{package}=={version}", [])
    ready = " ".join([version, *extras])
    if stamp.exists() and stamp.read_text() == ready:
        return env
    whl = wheel(package, version, base=not bare)
    base = None if bare else base_env()
    pip = _pip_here if bare else _pip
    with _cache_lock():
        if stamp.exists() and stamp.read_text() == ready:
            return env
        shutil.rmtree(env, ignore_errors=True)
        _run([HOST_PYTHON, "-m", "venv", "--without-pip", str(env)])
        pip("--python", str(env / "bin" / "python"), "install", "--no-deps", str(whl), *extras)
        if base is not None:
            (site_packages(env) / "_vpatch_test_base.pth").write_text(f"{site_packages(base)}\n")
        stamp.write_text(ready)
    return env


def clone(version: str, dest: Path, package: str = "vllm", *, bare: bool = False) -> Path:
    """A private, writable copy of the template (hard links; vpatch writes by rename)."""
    src = template(version, package, bare=bare)
    _run(["cp", "-al", str(src), str(dest)])
    return dest


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        for v in argv[1:]:
            print(template(v))
        return 0
    if argv[:1] == ["demo"]:
        from tests.demo import run_demo

        return run_demo()
    print("usage: python -m tests.envs build VERSION... | demo", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
