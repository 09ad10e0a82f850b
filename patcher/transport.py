"""How the agent reaches a target: a local subprocess, or one SSH connection (fabric).

Only this module knows fabric. Both transports run the same thing: the target's interpreter as
`python -I -c BOOT`, with the agent's source as the first stdin line (a JSON map of module name to
source, loaded by a tiny in-memory importer) and the request after it. Nothing has to be
installed on the host, the host's own `vpatch` (if any) is never used, and no value from a spec
ever reaches a shell: the remote command line is a constant plus the quoted interpreter path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import select
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import paramiko

from patcher.errors import AgentError, HostError, UsageError

# paramiko's transport thread logs connection failures with tracebacks to stderr through
# logging's last-resort handler; vpatch reports them itself, once, as per-host errors.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

BOOT = """\
import sys,json,importlib.util
m=json.loads(sys.stdin.readline())
class F:
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
        if proc.returncode < 0 and not proc.stdout.strip():  # OOM killer, kill -9, a crash
            raise HostError(
                f"{self.target}: agent killed by signal {-proc.returncode}; outcome unknown",
                "files are either pristine or fully patched; run `vpatch status` to see which",
            )
        return decode_answer(self.target, proc.stdout, proc.stderr, proc.returncode)

    def close(self) -> None:
        pass


def remote_command(python: str, sudo: bool = False) -> str:
    """The one shell line sent over SSH: constant bootstrap, quoted interpreter path."""
    cmd = f"{shlex.quote(python)} -I -c {shlex.quote(BOOT)}"
    return f"sudo -n {cmd}" if sudo else cmd


# ---------------------------------------------------------------------------------------------
# SSH


@dataclass(frozen=True)
class SshOptions:
    """Connection settings shared by every host of one command."""

    python: str = "python3"
    ssh_config: str | None = None
    identity: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    sudo: bool = False
    connect_timeout: float = 10.0
    call_timeout: float = 600.0
    keepalive: int = 15


_TARGET = re.compile(
    r"^(?:ssh://)?(?:(?P<user>[^@/:\s]+)@)?(?P<host>\[[^\]]+\]|[^@/:\s\[\]]+)(?::(?P<port>\d{1,5}))?/?$"
)


def parse_target(target: str) -> tuple[str | None, str, int | None]:
    """`[ssh://][user@]host[:port]` -> (user, host, port); IPv6 hosts go in brackets."""
    m = _TARGET.match(target)
    if not m or (m["port"] and not 0 < int(m["port"]) < 65536):
        raise UsageError(
            f"--host {target!r} is not [ssh://][user@]host[:port]",
            "examples: gpu-01, root@10.0.0.5:2222, ssh://ops@[fd00::1]:22",
        )
    return m["user"], m["host"].strip("[]"), int(m["port"]) if m["port"] else None


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's `SHA256:...` form, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


class _HostKeyPolicy:
    """Refuse unknown keys (fabric would auto-add them), or record them when the user said so.

    paramiko only calls `missing_host_key`, so no base class is needed (and importing paramiko
    stays deferred until an SSH target is actually used: local runs start ~0.2 s faster)."""

    def __init__(self, accept_new: bool, known_hosts: Path) -> None:
        self.accept_new = accept_new
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if not self.accept_new:
            raise _UnknownHostKey(hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.known_hosts, "a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class SshTransport:
    """Runs the agent on a remote interpreter over ONE SSH connection, reused for every call."""

    def __init__(
        self, target: str, host: str, user: str | None, port: int | None, opts: SshOptions
    ) -> None:
        """`target` labels the host in reports; host/user/port may be ssh_config aliases."""
        import paramiko
        from fabric import Config, Connection

        self.target = target
        self.opts = opts
        config = Config(runtime_ssh_path=opts.ssh_config) if opts.ssh_config else Config()
        connect_kwargs: dict[str, Any] = {
            "banner_timeout": opts.connect_timeout,
            "auth_timeout": opts.connect_timeout,
            "channel_timeout": opts.connect_timeout,
        }
        if opts.identity:
            connect_kwargs["key_filename"] = [opts.identity]
        self.conn = Connection(
            host,
            user=user,
            port=port,
            config=config,
            connect_timeout=opts.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        self.known_hosts = self._known_hosts_file()
        client = self.conn.client
        # fabric loads the system known_hosts and AUTO-ADDS unknown keys: undo both.
        client._system_host_keys = paramiko.HostKeys()
        client._host_keys = paramiko.HostKeys()
        if self.known_hosts.exists():
            client.load_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(
            _HostKeyPolicy(opts.accept_new_host_key, self.known_hosts)
        )
        self._open()

    def _known_hosts_file(self) -> Path:
        if self.opts.known_hosts:
            return Path(self.opts.known_hosts)
        configured = self.conn.ssh_config.get("userknownhostsfile")
        if configured:
            return Path(os.path.expanduser(str(configured).split()[0]))
        return Path(os.path.expanduser("~/.ssh/known_hosts"))

    def _open(self) -> None:
        import paramiko

        t = self.target
        started = time.monotonic()
        try:
            self.conn.open()
        except _UnknownHostKey as exc:
            raise HostError(
                f"{t}: unknown host key for {exc.hostname} ({exc.key.get_name()} "
                f"{fingerprint(exc.key)}), refused",
                f"check the fingerprint, then rerun with --accept-new-host-key or add it with "
                f"`ssh-keyscan` to {self.known_hosts}",
            ) from None
        except paramiko.BadHostKeyException as exc:
            raise HostError(
                f"{t}: HOST KEY CHANGED for {exc.hostname}: got {fingerprint(exc.key)}, "
                f"known_hosts has {fingerprint(exc.expected_key)}; refused (possible "
                "man-in-the-middle, or the host was reinstalled)",
                f"if the change is expected, remove the old key from {self.known_hosts}",
            ) from None
        except paramiko.AuthenticationException as exc:
            raise HostError(
                f"{t}: authentication failed ({exc})",
                "check --identity / the user, and that the key is in authorized_keys",
            ) from None
        except TimeoutError:
            raise HostError(
                f"{t}: connection timed out after {self.opts.connect_timeout:g}s",
                "is the host up and the port reachable?",
            ) from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            if time.monotonic() - started >= self.opts.connect_timeout * 0.9:
                raise HostError(
                    f"{t}: connection timed out after {self.opts.connect_timeout:g}s "
                    f"(no SSH banner/answer: {exc or type(exc).__name__})",
                    "is the host up, and is it sshd listening on that port?",
                ) from None
            raise HostError(
                f"{t}: cannot connect ({exc or type(exc).__name__})",
                "is sshd running there and the address right?",
            ) from None
        transport = self.conn.client.get_transport()
        if transport is not None:
            transport.set_keepalive(self.opts.keepalive)

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        payload = agent_bundle() + json.dumps(request).encode()
        cmd = remote_command(self.opts.python, self.opts.sudo)
        out, err, status = self._exec(cmd, payload, timeout or self.opts.call_timeout)
        if status != 0 and not out.strip():
            raise self._exec_error(err, status)
        return decode_answer(self.target, out, err, status)

    def _exec(self, cmd: str, payload: bytes, timeout: float) -> tuple[bytes, bytes, int]:
        """exec_command + sendall + shutdown_write: invoke's stdin pump reads 1 byte per 10 ms."""
        import paramiko

        transport = self.conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise HostError(f"{self.target}: connection lost", "run `vpatch status` on this host")
        try:
            chan = transport.open_session(timeout=self.opts.connect_timeout)
            chan.exec_command(cmd)
            try:
                chan.sendall(payload)
                chan.shutdown_write()
            except (OSError, paramiko.SSHException):
                # The remote command ended before reading its input (e.g. the interpreter is
                # missing): its exit status and stderr, read below, say why.
                pass
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                got = False
                while chan.recv_ready():
                    out += chan.recv(1 << 20)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 20)
                    got = True
                if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                    break
                if not transport.is_active():
                    break
                if time.monotonic() > deadline:
                    chan.close()
                    raise HostError(
                        f"{self.target}: agent call timed out after {timeout:g}s; outcome unknown",
                        "run `vpatch status` on this host to see what state it is in",
                    )
                if not got:
                    select.select([chan], [], [], 0.05)
            status = chan.recv_exit_status() if chan.exit_status_ready() else -1
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(1 << 20)
            chan.close()
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise HostError(
                f"{self.target}: connection lost mid-call ({exc or type(exc).__name__}); "
                "outcome unknown",
                "files are either pristine or fully patched; run `vpatch status` to see which",
            ) from None
        return bytes(out), bytes(err), status

    def _exec_error(self, err: bytes, status: int) -> HostError:
        tail = (err.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:300]
        if status == -1:
            return HostError(
                f"{self.target}: connection lost mid-call; outcome unknown",
                "files are either pristine or fully patched; run `vpatch status` to see which",
            )
        if self.opts.sudo and "sudo" in tail:
            return HostError(
                f"{self.target}: sudo refused: {tail}",
                "the login user needs passwordless sudo (NOPASSWD) for the target python",
            )
        if status == 127 or "No such file" in tail or "not found" in tail:
            return HostError(
                f"{self.target}: python {self.opts.python!r} not found on the host",
                "pass --python with the path of the serving environment's interpreter",
            )
        return HostError(
            f"{self.target}: agent failed (exit {status}): {tail}",
            "check the target python is 3.9+",
        )

    def close(self) -> None:
        self.conn.close()
