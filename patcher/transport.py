"""How the agent reaches a target: a local subprocess, or one SSH connection (fabric).

Only this module knows fabric. Both transports run the same thing: the target's interpreter as
`python -I -c BOOT`, with the agent's source as the first stdin line (a JSON map of module name to
source, loaded by a tiny in-memory importer) and the request after it. Nothing has to be
installed on the host, the host's own `vpatch` (if any) is never used, and no value from a spec
ever reaches a shell: the remote command line is a constant plus the quoted interpreter path.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from patcher.errors import AgentError, HostError

BOOT = """\
import sys,json,importlib.abc,importlib.util
m=json.loads(sys.stdin.readline())
class F(importlib.abc.MetaPathFinder,importlib.abc.Loader):
    def find_spec(self,name,path=None,target=None):
        if name in m:
            return importlib.util.spec_from_loader(name,self,is_package=name=='vpatch_agent')
    def create_module(self,spec):
        return None
    def exec_module(self,mod):
        exec(compile(m[mod.__name__],'<'+mod.__name__+'>','exec'),mod.__dict__)
sys.meta_path.insert(0,F())
import vpatch_agent
vpatch_agent.main()
"""


@cache
def agent_bundle() -> bytes:
    """First stdin line for BOOT: every agent module's source, keyed by its import name."""
    root = Path(__file__).parent / "agent"
    mods = {}
    for f in sorted(root.glob("*.py")):
        name = "vpatch_agent" if f.stem == "__init__" else f"vpatch_agent.{f.stem}"
        mods[name] = f.read_text()
    return json.dumps(mods).encode() + b"\n"


def decode_answer(target: str, stdout: bytes, stderr: bytes, status: int) -> dict[str, Any]:
    """The agent's JSON answer, or an AgentError that says what went wrong on the host."""
    try:
        res = json.loads(stdout.decode("utf-8", "replace"))
    except ValueError:
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {status}"]
        raise AgentError(
            f"{target}: agent gave no answer ({tail[0][:300]})",
            "check that the target's python is 3.9+ and can run `python -I -c pass`",
        ) from None
    if not isinstance(res, dict):
        raise AgentError(f"{target}: agent answer is not an object", "report this as a bug")
    return res


class Transport(Protocol):
    target: str

    def call(self, request: dict[str, Any], timeout: float = 600) -> dict[str, Any]: ...

    def close(self) -> None: ...


class LocalTransport:
    """Runs the agent with a local interpreter (default: `python3` on PATH)."""

    def __init__(self, python: str = "python3", target: str = "local") -> None:
        self.target = target
        exe = shutil.which(python)
        if exe is None:
            raise HostError(
                f"{target}: python interpreter {python!r} not found",
                "pass --python with the interpreter of the environment to patch",
            )
        self.python = exe

    def call(self, request: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
        payload = agent_bundle() + json.dumps(request).encode()
        try:
            proc = subprocess.run(
                [self.python, "-I", "-c", BOOT],
                input=payload,
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise HostError(
                f"{self.target}: agent timed out after {timeout:g}s",
                "run `vpatch status` to see what state the host is in",
            ) from None
        except OSError as exc:
            raise HostError(f"{self.target}: cannot run {self.python}: {exc.strerror}") from None
        return decode_answer(self.target, proc.stdout, proc.stderr, proc.returncode)

    def close(self) -> None:
        pass


def remote_command(python: str, sudo: bool = False) -> str:
    """The one shell line sent over SSH: constant bootstrap, quoted interpreter path."""
    cmd = f"{shlex.quote(python)} -I -c {shlex.quote(BOOT)}"
    return f"sudo -n {cmd}" if sudo else cmd
