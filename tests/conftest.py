"""Shared fixtures: real environments (stand-in package or real vLLM) and a vpatch runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import envs, standin

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "patches" / "vllm-eagle3-mla-targets.toml"
VPATCH = [sys.executable, "-m", "patcher.cli"]


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads(self.out)

    def patch(self, host: int = 0, index: int = 0) -> dict[str, Any]:
        p: dict[str, Any] = self.doc["hosts"][host]["patches"][index]
        return p


def vpatch(*args: str | Path, env: dict[str, str] | None = None) -> Run:
    """Run the real CLI in a subprocess, as a user would."""
    proc = subprocess.run(
        [*VPATCH, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=900,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def fingerprint(root: Path) -> dict[str, tuple[int, int, int]]:
    """(size, mtime_ns, inode) of every file under root: any write, even by rename, shows."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


@dataclass
class Env:
    """A target environment: its root dir, interpreter and site-packages."""

    root: Path
    python: Path

    @property
    def site(self) -> Path:
        return envs.site_packages(self.root)

    def file(self, rel: str) -> Path:
        return self.site / rel

    @property
    def journal(self) -> Path:
        return self.root / ".vpatch" / "journal.jsonl"


@pytest.fixture
def standin_env(tmp_path: Path) -> Env:
    python = standin.make_env(tmp_path / "host")
    return Env(python.parent.parent, python)


@pytest.fixture
def vllm_env(tmp_path: Path) -> Callable[[str], Env]:
    """Factory: a private hard-link clone of a cached real vLLM install."""

    def make(version: str) -> Env:
        root = envs.clone(version, tmp_path / f"vllm-{version}")
        return Env(root, root / "bin" / "python")

    return make
