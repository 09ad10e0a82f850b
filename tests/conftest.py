"""Shared fixtures: real environments (stand-in package or real vLLM) and a vpatch runner."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import envs, jsondoc, standin

# No on-disk rewrite cache (patcher/caches/rewrites.py) unless a test asks for one: tests assert
# exact libcst parse counts, which a cache shared between tests would make order-dependent (and
# ~/.cache is not the suite's to fill). Set before any test starts a vpatch, so every child
# process inherits it; tests/unit/test_rewrite_cache.py and the bench turn it back on.
os.environ["VPATCH_NO_CACHE"] = "1"
# `vpatch rollout` writes its report as it goes, by default in the XDG state dir
# (patcher/rolloutrun.default_report): the operator's state, not the suite's to fill.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="vpatch-test-state-")
atexit.register(shutil.rmtree, os.environ["XDG_STATE_HOME"], True)

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
        """The one JSON document on stdout, checked against vpatch's own schema."""
        doc: dict[str, Any] = jsondoc.check(json.loads(self.out))
        return doc

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


# Real SSH test hosts (tests/sshd.py). Imported here, not at the top, so this block can be
# appended without touching the imports above.
from tests import sshd as sshd_harness  # noqa: E402


@pytest.fixture
def ssh_lab_factory(tmp_path: Path, request: pytest.FixtureRequest) -> sshd_harness.LabFactory:
    """Factory: `make(n, env_factory=None, user="root", sudoers=False)` starts a lab of n real
    sshd hosts; every lab is stopped at teardown. Fails (never skips) without sshd, so a
    machine missing it cannot pass the SSH tests by not running them."""
    if not os.access(sshd_harness.SSHD, os.X_OK):
        pytest.fail(
            f"{sshd_harness.SSHD} is missing: apt-get install openssh-server "
            "(.ci/run installs it on CI)"
        )
    labs: list[sshd_harness.SshLab] = []

    def close_all() -> None:
        for lab in labs:
            # pytest owns tmp_path (and keeps recent ones): leave the logs for post-mortems.
            lab.close(remove=False)

    request.addfinalizer(close_all)

    def make(
        n: int,
        env_factory: sshd_harness.EnvFactory | None = None,
        user: str = "root",
        sudoers: bool = False,
    ) -> sshd_harness.SshLab:
        lab = sshd_harness.start_lab(
            n, tmp_path / f"sshlab{len(labs)}", env_factory, user, sudoers=sudoers
        )
        labs.append(lab)
        return lab

    return make


# CI (`CI=true`, as .ci/run is started) runs the property tests derandomized: a red run must
# mean a change broke something, not that a new random draw found an old corner. Local runs
# keep exploring (and hypothesis keeps what they find in .hypothesis/).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    _hypothesis_settings.load_profile("ci")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The conformance suites' counts (a test's `record_property("conformance", line)`), at
    the end of the run: they travel with the test's report, so xdist workers' arrive too."""
    lines = [
        str(value)
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", "") == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == "conformance"
    ]
    if lines:
        terminalreporter.section("conformance counts")
        for line in lines:
            terminalreporter.write_line(line)
