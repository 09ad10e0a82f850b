"""A host whose environment belongs to an unprivileged user who attacks root's vpatch through
the file system (tests/integration/test_hostile_fs.py).

The operator is root (as `--sudo` makes it); the environment is owned by `nobody`, and every
move of the attacker is made as `nobody` (`Host.owner`), so it can only do what that user can.
Root's own directory (`victim`, 0700, with a 0600 secret) must come out of every attack
untouched: bytes, mode, owner and mtime of every entry (badinputs.tree_hash).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests import envs
from tests.conftest import REPO, VPATCH, Run
from tests.support.standin_specs import REL

NOBODY = 65534
SECRET = "root-only-secret-4b1d\n"  # the text no answer may carry


@dataclass
class Host:
    base: Path  # world-traversable, root-owned
    env: Path  # the venv, owned by nobody
    victim: Path  # root's own directory (0700) with a 0600 secret

    @property
    def python(self) -> Path:
        return self.env / "bin" / "python"

    @property
    def site(self) -> Path:
        return envs.site_packages(self.env)

    @property
    def pkg(self) -> Path:
        return self.site / "servekit"

    @property
    def target(self) -> Path:
        return self.site / REL

    @property
    def secret(self) -> Path:
        return self.victim / "secret"

    @property
    def record(self) -> Path:
        return next(self.site.glob("servekit-*.dist-info")) / "RECORD"

    def owner(self, *argv: str | Path) -> None:
        """Run a command as the environment's owner."""
        subprocess.run([str(a) for a in argv], user=NOBODY, group=NOBODY, check=True)

    def owner_write(self, path: Path, data: str) -> None:
        """The owner (re)writes one of its files with `data`."""
        tmp = self.base / "owner.tmp"
        tmp.write_text(data)
        os.chown(tmp, NOBODY, NOBODY)
        self.owner("cp", tmp, path)
        tmp.unlink()

    def owner_record_line(self, rel: str, data: bytes) -> None:
        """The owner adds `rel` to its distribution's RECORD with the sha256 of `data`."""
        import base64

        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.owner_write(self.record, self.record.read_text() + f"{rel},sha256={digest},1\n")


def make_host(template: Path) -> Host:
    """A copy of the stand-in venv `template`, given to nobody, next to root's victim dir."""
    base = Path(tempfile.mkdtemp(prefix="vpatch-hostile-fs-"))
    os.chmod(base, 0o755)
    env = base / "env"
    shutil.copytree(template, env, symlinks=True)
    for p in [env, *env.rglob("*")]:
        os.lchown(p, NOBODY, NOBODY)
    victim = base / "victim"
    victim.mkdir(mode=0o700)
    (victim / "secret").write_text(SECRET)
    os.chmod(victim / "secret", 0o600)
    return Host(base, env, victim)


def cli(
    *args: str | Path,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> Run:
    """The real CLI as root, with a deadline (a hang is a failure, not a stuck suite)."""
    proc = subprocess.run(
        [*VPATCH, *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        preexec_fn=preexec,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def start_cli(*args: str | Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*VPATCH, *map(str, args)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def _ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def parked_agent(parent: int, timeout: float = 60) -> int:
    """The pid of `parent`'s descendant that stopped itself (SIGSTOP) at an armed fault point
    (as root the agent is privsep's worker: a grandchild)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat_line = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat_line.rsplit(")", 1)[1].split()
            if fields[0] == "T" and parent in _ancestors(int(fields[1])):
                return int(entry)
        time.sleep(0.05)
    raise AssertionError("the agent never parked")


def agent(
    python: Path, *requests: dict[str, object], timeout: float = 60
) -> list[dict[str, object]]:
    """The answers of a real `python -I` agent (BOOT, the bundle line) to `requests`: what
    reaches the controller, before the controller makes anything of it."""
    import json

    from patcher.transports.bundle import BOOT, agent_bundle

    lines = b"".join(json.dumps(r).encode() + b"\n" for r in requests)
    proc = subprocess.run(
        [str(python), "-I", "-c", BOOT],
        input=agent_bundle() + lines,
        capture_output=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return [json.loads(line) for line in proc.stdout.splitlines()]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
