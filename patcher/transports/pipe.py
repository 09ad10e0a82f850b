"""How the agent reaches a target: a local subprocess, or one SSH connection (fabric; the
OpenSSH client's transport, patcher.transports.openssh, shares the subprocess machinery here).

Only this module knows fabric. Both transports run the same thing: the target's interpreter as
`python -I -c BOOT`, with the agent's source as the first stdin line (a JSON map of module name to
source, and to code objects for an interpreter like the controller's, loaded by a tiny in-memory
importer). Nothing has to be installed on the host, the host's
own `vpatch` (if any) is never used, and no value from a spec ever reaches a shell: the remote
command line is a constant plus the quoted interpreter path.

One agent process per transport ("agent session"): it is started on the first call and then
answers one JSON request line with one JSON answer line, so a whole apply (inspect, commit,
verify) costs one interpreter start and one bundle upload per host, not one per call. `close()`
sends EOF and the agent exits. A call that times out or loses its agent ends the session; the
next call starts a fresh one. Ray and the Ansible module still run the agent one-shot (bundle,
request, EOF): the agent speaks both.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    import paramiko

    from patcher.transports import sshconfig

from patcher.errors import AgentError, HostError, UsageError
from patcher.transports import session as session_words
from patcher.transports import sshnames
from patcher.transports.answers import ANSWERS

# The loader the host runs as `python -I -c BOOT`. What it costs is paid by every agent start,
# so it imports nothing it can do without: the bundle line (a JSON object of strings, ASCII as
# json.dumps writes it below, read as bytes: the text layer's decoding of it cost ~0.5 ms) is
# parsed with the C string scanner json itself uses (`json` would import `re` and `enum`),
# module specs come from the import system's own frozen module (`importlib.util` costs ~4 ms),
# and a module's code object is taken from the bundle when it carries one for this
# interpreter's bytecode magic (compiling the agent's source is ~12 ms per start), decoded only
# when the module is imported.
BOOT = """\
import sys
try:
    from _json import scanstring as s
except ImportError:
    s=None
l=sys.stdin.buffer.readline().decode('latin-1')
if s:
    m={};i=l.find('"')
    while i>=0:
        k,i=s(l,i+1);v,i=s(l,l.index('"',i)+1);m[k]=v;i=l.find('"',i)
else:
    import json;m=json.loads(l)
try:
    import _frozen_importlib as B,_frozen_importlib_external as E
except ImportError:
    import importlib.machinery as B,importlib.util as E
import marshal,binascii
c='#'+E.MAGIC_NUMBER.hex()+':'
class F:
    def find_spec(self,name,path=None,target=None):
        if name in m:
            return B.ModuleSpec(name,self,is_package=name=='vpatch_agent')
    def create_module(self,spec):
        return None
    def exec_module(self,mod):
        n=mod.__name__;x=m.get(c+n)
        x=marshal.loads(binascii.a2b_base64(x)) if x else compile(m[n],'<'+n+'>','exec')
        exec(x,mod.__dict__)
sys.meta_path.insert(0,F())
import vpatch_agent
vpatch_agent.main()
"""

_READLINE = "l=sys.stdin.buffer.readline().decode('latin-1')\n"
# privsep's stage 0 (patcher/agent/privsep.py), run as root by the trusted interpreter with
# `-I -S`: it reads the bundle by its length (the fixed-width `#n` that opens it), never a
# byte further, so the worker it starts reads the requests from the same stdin. It needs
# only privsep, procs, protocol and wire: the package's own modules are not run. (Its
# command line names no `import vpatch_agent`: that marks the worker, the one that answers.)
BOOT0 = BOOT.replace(
    _READLINE,
    "import os\n"
    "def r(n):\n"
    "    b=b''\n"
    "    while len(b)<n:\n"
    "        x=os.read(0,n-len(b))\n"
    "        if not x:break\n"
    "        b+=x\n"
    "    return b\n"
    "h=r(18);l=(h+r(int(h[8:18])-18)).decode('latin-1')\n",
).replace(
    "import vpatch_agent\nvpatch_agent.main()\n",
    "P=sys.modules['vpatch_agent']=type(sys)('vpatch_agent');P.__path__=[]\n"
    "__import__('vpatch_agent.privsep');P.privsep.stage0(l)\n",
)
# The worker's loader (the environment's interpreter, after the drop): BOOT reading the
# bundle stage 0 re-feeds on fd 3; the requests then come on stdin. Carried by the bundle.
CHILD_BOOT = BOOT.replace("sys.stdin.buffer.readline()", "open(3,'rb').readline()")
_HEADER = '{"#n": "%010d", '  # 18 bytes: the bundle's length, first


def agent_argv(python: str, root: bool, trusted: str) -> list[str]:
    """How the agent starts: as root, under the trusted interpreter (privsep's stage 0, which
    decides who works and starts the environment's interpreter as that user); else the
    environment's interpreter itself, with the login user's power."""
    if root:
        return [trusted, "-I", "-S", "-c", BOOT0, python]
    return [python, "-I", "-c", BOOT]


@cache
def agent_bundle(code: bool = True) -> bytes:
    """First stdin line for BOOT: every agent module's source, keyed by its import name, and
    (`code`) under `#MAGIC:name` its marshalled code object (_code).

    BOOT uses the code objects only on an interpreter whose bytecode magic number is this
    one's: the number CPython itself checks before trusting a .pyc, and the one that changes
    whenever the marshal format or the bytecode does. Any other interpreter compiles the
    source."""
    import base64
    from importlib.util import MAGIC_NUMBER

    root = Path(__file__).parent.parent / "agent"
    mods, codes = {}, {}
    for f in sorted(root.glob("*.py")):
        name = "vpatch_agent" if f.stem == "__init__" else f"vpatch_agent.{f.stem}"
        mods[name] = f.read_text()
        if code:
            codes[f"#{MAGIC_NUMBER.hex()}:{name}"] = base64.b64encode(_code(f, name)).decode()
    body = json.dumps({"#child": CHILD_BOOT} | mods | codes)
    size = len(_HEADER % 0) + len(body)  # the header replaces body's "{", the newline ends it
    return (_HEADER % size + body[1:]).encode() + b"\n"


def _code(path: Path, name: str) -> bytes:
    """The module's marshalled code object: the body of its `__pycache__` .pyc when that is
    current by the import system's own test (timestamp-based, this interpreter's magic, the
    source's mtime and size), else compiled once more and the .pyc rewritten (py_compile,
    atomic; skipped where the package is read-only). Compiled as BOOT would compile the
    source: no inherited future flags, asserts kept (the host runs without -O). Reading it
    back costs ~1 ms where compiling every module costs ~20 ms on every run."""
    import marshal
    import py_compile
    from importlib.util import MAGIC_NUMBER, cache_from_source

    pyc = Path(cache_from_source(str(path), optimization=""))
    for attempt in range(2):
        try:
            st, data = path.stat(), pyc.read_bytes()
        except OSError:
            data = b""
        header = (
            MAGIC_NUMBER + bytes(4) + _u32(int(st.st_mtime)) + _u32(st.st_size) if data else b""
        )
        if data and data[:16] == header:
            return data[16:]
        if attempt == 0:
            try:
                py_compile.compile(
                    str(path),
                    cfile=str(pyc),
                    dfile=f"<{name}>",
                    doraise=True,
                    optimize=0,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )
            except (OSError, py_compile.PyCompileError):
                break
    obj = compile(path.read_text(), f"<{name}>", "exec", dont_inherit=True, optimize=0)
    return marshal.dumps(obj)


def _u32(n: int) -> bytes:
    return (n & 0xFFFFFFFF).to_bytes(4, "little")


def _wait(reads: list[Any], writes: list[Any], timeout: float) -> tuple[list[Any], list[Any]]:
    """select() for objects with fileno(), through poll(): select() refuses descriptors above
    1024, which a controller with a few hundred hosts in flight (sockets, paramiko's per-channel
    pipes) passes."""
    poller = select.poll()
    for obj in reads:
        poller.register(obj.fileno(), select.POLLIN)
    for obj in writes:
        poller.register(obj.fileno(), select.POLLOUT | (select.POLLIN if obj in reads else 0))
    ready = dict(poller.poll(max(0.0, timeout) * 1000))
    done = select.POLLHUP | select.POLLERR
    readable = [o for o in reads if ready.get(o.fileno(), 0) & (select.POLLIN | done)]
    writable = [o for o in writes if ready.get(o.fileno(), 0) & (select.POLLOUT | done)]
    return readable, writable


def request_line(request: dict[str, Any]) -> bytes:
    """One request of a session: compact JSON never contains a raw newline."""
    return json.dumps(request).encode() + b"\n"


_ERR_KEEP = 64 * 1024  # stderr kept per call: error messages quote only its last line
# The largest answer line a controller reads from an agent. An inspect carries the text of
# every target file (each at most 8 MiB: agent/fsops.MAX_FILE_BYTES) JSON-escaped (up to 6x
# for control characters), plus journaled files' texts and backups: 256 MiB is several such
# files' worst case, and bounds what a broken or hostile agent can make the controller hold.
MAX_ANSWER_BYTES = 256 << 20


def _too_big(target: str) -> AgentError:
    return AgentError(
        f"{target}: agent answer is larger than {MAX_ANSWER_BYTES >> 20} MiB; refused",
        "inspect fewer or smaller files per run; report this if the files are ordinary",
    )


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

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]: ...

    def close(self) -> None: ...


class PipeTransport:
    """One agent session in a local child process reached through pipes, started by the first
    call and ended by `close()` (or when the transport is garbage-collected, or at interpreter
    exit). The child is the agent itself (LocalTransport) or an `ssh` client running it on a
    host (transports.openssh): subclasses say which argv, and what an agent that ended without
    answering means."""

    target: str
    call_timeout: float
    # Added to the first call's deadline of a session: the time a child may spend connecting
    # before the agent runs (an SSH handshake), which the call's own timeout does not cover.
    connect_grace: float = 0.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: _LocalSession | None = None
        self._early = False  # started by start(), not yet called: owes the first request

    def start(self) -> None:
        """Begin the session now, ahead of its first call: the child connects (an SSH
        handshake, a remote interpreter starting) and takes the bundle while this process
        still loads specs and plans. The first call then only sends its request; a child that
        failed meanwhile reports its error there, exactly as if it had started with it."""
        with self._lock:
            if self._session is not None:
                return
            self._session = _LocalSession.start(self.target, self._argv())
            self._session.unsent = agent_bundle()
            self._session.feed()
            self._early = True

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _no_answer(self, out: bytes, err: bytes, code: int) -> dict[str, Any]:
        """The child exited without an answer line: its exit code and stderr say why."""
        if code < 0 and not out.strip():  # OOM killer, kill -9, a crash
            raise session_words.killed(self.target, -code)
        return decode_answer(self.target, out, err, code)

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        with self._lock:
            try:
                return self._call(request, timeout or self.call_timeout)
            except BaseException:
                # Whatever broke the call (an error above, or e.g. KeyboardInterrupt while
                # waiting), the session may still owe an answer: never read it as the next one.
                self._end(kill=False)
                raise
            finally:
                ANSWERS.settle()

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        payload = request_line(request)
        session, early, self._early = self._session, self._early, False
        if session is not None and not early and session.proc.poll() is not None:
            session.end()  # died between calls (OOM killer...): nothing was asked of it
            session = None
        # A new session, or one started early, may have written to stderr already: all of it
        # is this call's (ssh's connect errors among it).
        mark = session.err_size() if session is not None and not early else 0
        if session is None:
            session = self._session = _LocalSession.start(self.target, self._argv())
            payload = agent_bundle() + payload
            deadline += self.connect_grace
        elif early:  # still connecting, maybe: the handshake's time is the call's grace too
            payload, session.unsent = session.unsent + payload, b""
            deadline += self.connect_grace
        try:
            line = session.exchange(payload, deadline)
        except TimeoutError:
            self._end(kill=True)
            raise session_words.timed_out(self.target, timeout) from None
        if line is None:  # the agent exited without answering
            out, err = bytes(session.out), session.err_since(mark)
            return self._no_answer(out, err, self._end(kill=False))
        try:
            return decode_answer(self.target, line, session.err_since(mark), 0)
        except AgentError:
            self._end(kill=True)  # it printed something that is not an answer: out of step
            raise

    def _end(self, kill: bool) -> int:
        session, self._session = self._session, None
        return session.end(kill=kill) if session is not None else 0

    def close(self) -> None:
        """EOF to the agent, which exits; killed if it has not within 2 s. Never waits for a
        call running in another thread for long: that call then sees its agent gone."""
        got = self._lock.acquire(timeout=5)
        try:
            # Never asked anything: it would read a cut bundle at EOF, so it is killed.
            self._end(kill=self._early)
            self._early = False
        finally:
            if got:
                self._lock.release()


class LocalTransport(PipeTransport):
    """Runs the agent with a local interpreter (default: `python3` on PATH), one process per
    transport."""

    def __init__(
        self,
        python: str = "python3",
        target: str = "local",
        call_timeout: float = 600.0,
        trusted_python: str = "",
    ) -> None:
        super().__init__()
        self.target = target
        self.trusted_python = trusted_python or TRUSTED_PYTHON
        self.call_timeout = call_timeout  # --timeout: per agent call, as over SSH
        exe = shutil.which(python)
        if exe is None:
            raise HostError(
                f"{target}: python interpreter {python!r} not found",
                "pass --python with the interpreter of the environment to patch",
            )
        self.python = exe

    def _argv(self) -> list[str]:
        return agent_argv(self.python, os.geteuid() == 0, self.trusted_python)


class _LocalSession:
    """One local child process (the agent, or the ssh client running it): stdin/stdout pipes,
    stderr to an unlinked temp file (nothing to drain, so a chatty agent cannot block on it),
    its own process group for a clean kill."""

    def __init__(self, proc: subprocess.Popen[bytes], err: IO[bytes], target: str) -> None:
        self.proc, self.err, self.out, self.target = proc, err, bytearray(), target
        self.unsent = b""  # what start() could not write yet without blocking
        # No zombie or orphan even if nobody calls close(): GC or interpreter exit ends it too.
        self._finalizer = weakref.finalize(self, _end_local, proc, err, 2.0, False)

    @classmethod
    def start(cls, target: str, argv: list[str]) -> _LocalSession:
        # O_APPEND: the child's writes never land where a read of ours left the shared offset.
        err = tempfile.TemporaryFile(mode="a+b", buffering=0)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                bufsize=0,
                start_new_session=True,
            )
        except OSError as exc:
            err.close()
            raise HostError(f"{target}: cannot run {argv[0]}: {exc.strerror}") from None
        assert proc.stdin is not None
        os.set_blocking(proc.stdin.fileno(), False)
        return cls(proc, err, target)

    def feed(self) -> None:
        """Write as much of `unsent` as the pipe takes now, never blocking."""
        assert self.proc.stdin is not None
        try:
            done = os.write(self.proc.stdin.fileno(), self.unsent)
        except (BlockingIOError, BrokenPipeError, ConnectionResetError):
            return  # full, or the child is gone: the first call finds out which
        self.unsent = self.unsent[done:]

    def exchange(self, payload: bytes, deadline: float) -> bytes | None:
        """Send payload, return the next answer line (without its newline), or None if the
        agent's stdout ended first; TimeoutError at the deadline. Reads while writing, so
        neither side can block the other on a full pipe."""
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        todo = memoryview(payload)
        scanned = 0  # bytes of self.out known to hold no newline (a long answer is scanned once)
        while True:
            nl = self.out.find(b"\n", scanned)
            if nl >= 0:
                line = bytes(self.out[:nl])
                del self.out[: nl + 1]
                return line
            scanned = len(self.out)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            wants = [stdin] if todo else []
            readable, writable = _wait([stdout], wants, left)
            if writable:
                try:
                    todo = todo[os.write(stdin.fileno(), todo) :]
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    todo = todo[:0]  # the agent is gone: its exit status says why, below
            if readable:
                chunk = os.read(stdout.fileno(), 1 << 20)
                if not chunk:
                    return None
                ANSWERS.charge(
                    self.target, len(chunk)
                )  # the fleet's budget (patcher.transports.answers)
                self.out += chunk
                if len(self.out) > MAX_ANSWER_BYTES and b"\n" not in self.out[scanned:]:
                    raise _too_big(self.target)

    def err_size(self) -> int:
        return os.fstat(self.err.fileno()).st_size

    def err_since(self, mark: int) -> bytes:
        """What the agent wrote to stderr since `mark` (at most the last _ERR_KEEP bytes)."""
        end = self.err_size()
        start = max(mark, end - _ERR_KEEP)
        return os.pread(self.err.fileno(), end - start, start) if end > start else b""

    def end(self, kill: bool = False) -> int:
        """Stop the agent (EOF, or SIGKILL to its group) and reap it; its exit code."""
        self._finalizer.detach()
        return _end_local(self.proc, self.err, 2.0, kill)


def _end_local(proc: subprocess.Popen[bytes], err: IO[bytes], grace: float, kill: bool) -> int:
    """Close stdin (EOF: the agent exits), reap; SIGKILL the group if asked or after `grace`.

    The group is only signalled while the agent is unreaped (alive or a zombie), so its pgid
    cannot have been reused by then."""
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
    if not kill:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill = True
    if kill and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
    proc.wait()
    for fh in (proc.stdout, err):
        if fh is not None:
            fh.close()
    return proc.returncode


# The interpreter privsep's stage 0 runs under as root (--trusted-python): the host's own,
# root-owned python3, checked by stage 0 before it looks at anything else.
TRUSTED_PYTHON = "/usr/bin/python3"


def remote_command(
    python: str, sudo: bool = False, trusted: str = "", sudo_user: str | None = None
) -> str:
    """The one shell line sent over SSH: constant bootstrap, quoted interpreter paths.

    Through sudo as root the agent is root: stage 0 under the trusted interpreter. Through
    `sudo -n -u USER` (an Ansible become_user, hosts.toml's sudo_user) it is that user, who
    runs the env's interpreter with that user's own power. Without sudo, the login may still
    be root: the shell asks `id -u` and takes the stage-0 path then."""
    q = shlex.quote
    stage0 = " ".join(map(q, agent_argv(python, True, trusted or TRUSTED_PYTHON)))
    plain = f"{q(python)} -I -c {q(BOOT)}"
    if sudo and sudo_user and sudo_user != "root":
        return f"sudo -n -u {q(sudo_user)} {plain}"
    if sudo:
        return f"sudo -n {stage0}"
    return f'if [ "$(id -u)" = 0 ]; then exec {stage0}; fi; exec {plain}'


# ---------------------------------------------------------------------------------------------
# SSH


class SshOptions(NamedTuple):
    """Connection settings shared by every host of one command."""

    python: str = "python3"
    ssh_config: str | None = None
    identity: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    sudo: bool = False
    sudo_user: str | None = None  # with sudo: `sudo -n -u USER` (None: root)
    connect_timeout: float = 10.0
    trusted_python: str = ""  # privsep's stage 0 as root (TRUSTED_PYTHON when empty)
    call_timeout: float = 600.0
    keepalive: int = 15


def exec_error(target: str, opts: SshOptions, err: bytes, status: int) -> HostError:
    """Why the remote command ended without an answer (status -1: no exit status came),
    from its exit status and the last line of its stderr; the same words for both SSH
    clients."""
    tail = (err.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:300]
    if status == -1:
        return session_words.lost(target)
    if opts.sudo and "sudo" in tail:
        return HostError(
            f"{target}: sudo refused: {tail}",
            "the login user needs passwordless sudo (NOPASSWD) for the trusted interpreter "
            "(--trusted-python, default /usr/bin/python3)",
        )
    if status == 127 or "No such file" in tail or "not found" in tail:
        return HostError(
            f"{target}: python {opts.python!r} not found on the host",
            "pass --python with the path of the serving environment's interpreter",
        )
    return HostError(
        f"{target}: agent failed (exit {status}): {tail}",
        "check the target python is 3.9+",
    )


_TARGET = re.compile(
    r"^(?:ssh://)?(?:(?P<user>[^@/:\s]+)@)?(?P<host>\[[^\]]+\]|[^@/:\s\[\]]+)(?::(?P<port>\d{1,5}))?/?$"
)


def parse_target(target: str) -> tuple[str | None, str, int | None]:
    """`[ssh://][user@]host[:port]` -> (user, host, port); IPv6 hosts go in brackets."""
    m = _TARGET.fullmatch(target)
    if not m or (m["port"] and not 0 < int(m["port"]) < 65536):
        raise UsageError(
            f"--host {target!r} is not [ssh://][user@]host[:port]",
            "examples: gpu-01, root@10.0.0.5:2222, ssh://ops@[fd00::1]:22",
        )
    user, host = m["user"], m["host"].strip("[]")
    # Before anything can see them: `ssh -G` runs ssh_config `Match exec` commands with the
    # host and user substituted in (patcher.transports.sshconfig).
    problem = sshnames.host_problem(host)
    if problem:
        raise UsageError(f"--host {target!r}: host name {problem}", sshnames.HOST_HINT)
    problem = sshnames.user_problem(user) if user is not None else None
    if problem:
        raise UsageError(f"--host {target!r}: user name {problem}", "e.g. --host ops@gpu-01")
    return user, host, int(m["port"]) if m["port"] else None


@cache
def _quiet_paramiko() -> None:
    """paramiko's transport thread logs connection failures with tracebacks to stderr through
    logging's last-resort handler; vpatch reports them itself, once, as per-host errors. (Set
    when the first paramiko transport is made: logging is not imported otherwise.)"""
    import logging

    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    logging.getLogger("paramiko").propagate = False


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's `SHA256:...` form, as `ssh-keygen -lf` prints it."""
    import base64
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey, authority: str | None) -> None:
        super().__init__(hostname)
        self.hostname, self.key, self.authority = hostname, key, authority


class _RevokedHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


class _HostKeyPolicy:
    """Refuse unknown keys (fabric would auto-add them), or record them when the user said so;
    a revoked key is refused either way (transports.sshconfig drops it from the known keys, so
    paramiko asks here about it).

    paramiko only calls `missing_host_key`, so no base class is needed (and importing paramiko
    stays deferred until an SSH target is actually used: local runs start ~0.2 s faster)."""

    def __init__(self, accept_new: bool, known_hosts: Path, known: sshconfig.KnownHosts) -> None:
        self.accept_new = accept_new
        self.known_hosts = known_hosts
        self.known = known

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if self.known.is_revoked(key):
            raise _RevokedHostKey(hostname, key)
        if not self.accept_new:
            raise _UnknownHostKey(hostname, key, self.known.authority_for(hostname))
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.known_hosts, "a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class SshTransport:
    """Runs the agent on a remote interpreter over ONE SSH connection: one session channel,
    hence one agent process, for every call (reopened only after a timeout or a lost agent)."""

    def __init__(
        self, target: str, host: str, user: str | None, port: int | None, opts: SshOptions
    ) -> None:
        """`target` labels the host in reports; host/user/port may be ssh_config aliases."""
        _quiet_paramiko()
        from fabric import Config, Connection

        from patcher.transports import sshconfig

        self.target = target
        self.opts = opts
        connect_kwargs: dict[str, Any] = {
            "banner_timeout": opts.connect_timeout,
            "auth_timeout": opts.connect_timeout,
            "channel_timeout": opts.connect_timeout,
        }
        resolved = sshconfig.resolve(
            target, host, user, port, opts.ssh_config, opts.connect_timeout
        )
        if resolved is not None and not resolved.proxied:
            # OpenSSH resolved it (Include, Match...): connect to exactly that, with no second
            # opinion from paramiko's parser (an empty SSHConfig loads no file).
            import paramiko

            config = Config(ssh_config=paramiko.SSHConfig())
            host, user, port = resolved.hostname, resolved.user, resolved.port
            keys = [opts.identity] if opts.identity else resolved.identity_files
            if resolved.identities_only:
                connect_kwargs["look_for_keys"] = False
            if not resolved.agent:
                connect_kwargs["allow_agent"] = False
        else:
            # No OpenSSH client, or a ProxyJump/ProxyCommand host: fabric's own ssh_config
            # handling (paramiko's parser) connects, through the proxy when there is one.
            config = Config(runtime_ssh_path=opts.ssh_config) if opts.ssh_config else Config()
            keys = [opts.identity] if opts.identity else []
        if keys:
            connect_kwargs["key_filename"] = keys
        self.conn = Connection(
            host,
            user=user,
            port=port,
            config=config,
            connect_timeout=opts.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        user_files, system_files = self._known_hosts_files(resolved)
        self.known_hosts = Path(user_files[0])  # where --accept-new-host-key records keys
        self.known = sshconfig.load_known_hosts(user_files, system_files)
        client = self.conn.client
        # fabric AUTO-ADDS unknown keys: our policy instead, and the keys of every known_hosts
        # file OpenSSH would read (@revoked and @cert-authority understood).
        client._system_host_keys = self.known.system
        client._host_keys = self.known.user
        client.set_missing_host_key_policy(
            _HostKeyPolicy(opts.accept_new_host_key, self.known_hosts, self.known)
        )
        self._lock = threading.Lock()
        self._chan: paramiko.Channel | None = None  # the agent session, opened by the 1st call
        self._out, self._err = bytearray(), bytearray()
        self._open()

    def _known_hosts_files(
        self, resolved: sshconfig.Resolved | None
    ) -> tuple[list[str], list[str]]:
        """(user files, global files): --known-hosts alone when given; else what `ssh -G`
        lists; else paramiko's reading of the ssh_config, with OpenSSH's defaults."""
        if self.opts.known_hosts:
            return [self.opts.known_hosts], []
        if resolved is not None and resolved.user_known_hosts:
            return resolved.user_known_hosts, resolved.global_known_hosts
        cfg = self.conn.ssh_config

        def listed(key: str, default: str) -> list[str]:
            value = str(cfg.get(key) or default)
            return [os.path.expanduser(p) for p in value.split()]

        return (
            listed("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2"),
            listed("globalknownhostsfile", "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"),
        )

    def _open(self) -> None:
        import paramiko

        t = self.target
        started = time.monotonic()
        try:
            self.conn.open()
        except _UnknownHostKey as exc:
            hint = (
                f"check the fingerprint, then rerun with --accept-new-host-key or add it with "
                f"`ssh-keyscan` to {self.known_hosts}"
            )
            if exc.authority:
                hint = (
                    f"{exc.authority} trusts a @cert-authority for this host, but vpatch's SSH "
                    "client (paramiko) cannot check host certificates: " + hint
                )
            raise HostError(
                f"{t}: unknown host key for {exc.hostname} ({exc.key.get_name()} "
                f"{fingerprint(exc.key)}), refused",
                hint,
            ) from None
        except _RevokedHostKey as exc:
            raise HostError(
                f"{t}: the host key of {exc.hostname} ({exc.key.get_name()} "
                f"{fingerprint(exc.key)}) is marked @revoked in known_hosts; refused",
                "a revoked key is never trusted: find out why it was revoked, and give the host "
                "a new key",
            ) from None
        except paramiko.BadHostKeyException as exc:
            if self.known.is_revoked(exc.key):
                raise HostError(
                    f"{t}: the host key of {exc.hostname} ({fingerprint(exc.key)}) is marked "
                    "@revoked in known_hosts; refused",
                    "a revoked key is never trusted: find out why, give the host a new key",
                ) from None
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
        with self._lock:
            try:
                return self._call(request, timeout or self.opts.call_timeout)
            except BaseException:
                self._drop()  # a session that may still owe an answer is never reused
                raise
            finally:
                ANSWERS.settle()

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request on the session channel (opened on first use): send a line, read until
        an answer line arrives, the agent ends, or the deadline passes."""
        import paramiko

        transport = self.conn.client.get_transport()
        if transport is None or not transport.is_active():
            self._drop()
            raise HostError(f"{self.target}: connection lost", "run `vpatch status` on this host")
        deadline = time.monotonic() + timeout
        payload = request_line(request)
        self._err = bytearray()
        try:
            chan = self._chan
            if chan is not None and (chan.closed or chan.eof_received or chan.exit_status_ready()):
                self._drop()  # the agent ended between calls: nothing was asked of it
                chan = None
            if chan is None:
                chan = transport.open_session(timeout=self.opts.connect_timeout)
                chan.exec_command(
                    remote_command(
                        self.opts.python,
                        self.opts.sudo,
                        self.opts.trusted_python,
                        self.opts.sudo_user,
                    )
                )
                self._chan, self._out = chan, bytearray()
                payload = agent_bundle() + payload
            # Our own send loop, not invoke's stdin pump (it reads 1 byte per 10 ms), and not a
            # blocking sendall: output is drained while the payload goes out.
            todo = memoryview(payload)
            scanned = 0  # bytes of self._out known to hold no newline
            while True:
                while todo and chan.send_ready():  # one packet per send, never blocks
                    try:
                        todo = todo[chan.send(bytes(todo[: 1 << 16])) :]
                    except (OSError, paramiko.SSHException):
                        # The remote command ended before reading its input (e.g. the
                        # interpreter is missing): its exit status and stderr say why.
                        todo = todo[:0]
                got = self._drain(chan)
                nl = self._out.find(b"\n", scanned)
                if nl >= 0:
                    line = bytes(self._out[:nl])
                    del self._out[: nl + 1]
                    break
                scanned = len(self._out)
                if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                    return self._ended(chan)
                if not transport.is_active():
                    return self._ended(chan)
                if time.monotonic() > deadline:
                    self._drop()
                    raise session_words.timed_out(self.target, timeout)
                if not got:
                    _wait([chan], [], 0.05)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            self._drop()
            raise session_words.lost(self.target, why=str(exc or type(exc).__name__)) from None
        try:
            return decode_answer(self.target, line, bytes(self._err), 0)
        except AgentError:
            self._drop()  # it printed something that is not an answer: out of step
            raise

    def _drain(self, chan: paramiko.Channel) -> bool:
        """Move whatever stdout/stderr has arrived into our buffers (stderr keeps its tail):
        a chatty agent never stalls on a full stderr window."""
        got = False
        while chan.recv_ready():
            chunk = chan.recv(1 << 20)
            ANSWERS.charge(
                self.target, len(chunk)
            )  # the fleet's budget (patcher.transports.answers)
            self._out += chunk
            got = True
            if len(self._out) > MAX_ANSWER_BYTES and b"\n" not in self._out[-(1 << 20) :]:
                raise _too_big(self.target)  # the earlier bytes were scanned by _call
        while chan.recv_stderr_ready():
            self._err += chan.recv_stderr(1 << 20)
            got = True
        if len(self._err) > _ERR_KEEP:
            del self._err[:-_ERR_KEEP]
        return got

    def _ended(self, chan: paramiko.Channel) -> dict[str, Any]:
        """The agent (or the connection) ended without an answer line: why, from its exit
        status and stderr, worded as when every call was its own process."""
        status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        self._drain(chan)
        out, err = bytes(self._out), bytes(self._err)
        self._drop()
        if status != 0 and not out.strip():
            raise self._exec_error(err, status)
        return decode_answer(self.target, out, err, status)

    def _drop(self) -> None:
        """Forget the session (closing its channel); the next call starts a fresh agent."""
        chan, self._chan = self._chan, None
        self._out = bytearray()
        if chan is not None:
            try:
                chan.close()
            except Exception:  # a dead transport may raise anything here
                pass

    def _exec_error(self, err: bytes, status: int) -> HostError:
        return exec_error(self.target, self.opts, err, status)

    def close(self) -> None:
        """EOF on the session's stdin so the agent exits (waited for briefly), then disconnect."""
        import paramiko

        got = self._lock.acquire(timeout=5)
        try:
            chan, self._chan = self._chan, None
            if chan is not None and not chan.closed:
                try:
                    chan.shutdown_write()
                    chan.status_event.wait(2.0)  # set by the exit status, or when it closes
                    chan.close()
                except (OSError, paramiko.SSHException, EOFError):
                    pass  # the connection is gone already: so is the agent's stdin
        finally:
            if got:
                self._lock.release()
        self.conn.close()
