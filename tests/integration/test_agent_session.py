"""One agent process per host and run ("agent session"), locally and over real sshd hosts.

Every answer carries the agent's pid, so "one process" is proved by the answers themselves:
an apply at level full (inspect, commit, verify) and a verify after it on the same transport
are all answered by ONE pid per host (it used to be one process per call). Around that: a fault
armed by one request does not outlive it, a probe that reads stdin cannot swallow the next
request, a timeout ends only that session, a lost agent is reported as before, and close()
leaves no agent process behind (checked in /proc).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from patcher.errors import HostError
from patcher.plan.base import Options
from patcher.run import engine
from patcher.specs.model import PatchSpec, load_spec
from patcher.transports import Transport
from patcher.transports.openssh import OpenSshTransport
from patcher.transports.paramiko_ssh import SshTransport
from patcher.transports.pipe import LocalTransport
from patcher.transports.ssh import SshOptions
from tests import envs, standin
from tests import sshd as harness
from tests.support.standin_specs import REL, SPEC_A

PY = "/root/ml-env/bin/python"
FULL = Options(level="full")
INSPECT: dict[str, Any] = {"op": "inspect", "packages": {}}


class Recorder:
    """A transport that remembers which agent pid answered each call."""

    def __init__(self, inner: Transport) -> None:
        self.inner, self.target = inner, inner.target
        self.calls: list[tuple[str, int]] = []

    def call(self, request: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
        res = self.inner.call(request, timeout)
        self.calls.append((request["op"], res["pid"]))
        return res

    def close(self) -> None:
        self.inner.close()

    @property
    def pids(self) -> set[int]:
        return {pid for _op, pid in self.calls}


@dataclass
class Host:
    """One place to run the agent: how to connect, where its files are, its agents in /proc."""

    name: str
    root: Path  # the env, as this test process sees it
    connect: Callable[[], Transport]
    agents: Callable[[], list[int]]  # live agent pids of this host

    @property
    def file(self) -> Path:
        return envs.site_packages(self.root) / REL

    def reset(self, pristine: bytes) -> None:
        shutil.rmtree(self.root / ".vpatch", ignore_errors=True)
        self.file.write_bytes(pristine)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie awaiting its parent's wait)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _is_agent(pid: int) -> bool:
    """The worker (BOOT), or privsep's stage 0 (BOOT0) that goes on as the worker as root."""
    cmd = _cmdline(pid)
    return b"import vpatch_agent" in cmd or b"vpatch_agent.privsep" in cmd


def _children_agents(root_pid: int, python: str) -> list[int]:
    """Live agents of interpreter `python` below `root_pid` (a LocalTransport's children)."""
    cmap: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(
                    Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (OSError, IndexError, ValueError):
                continue
            cmap.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], list(cmap.get(root_pid, []))
    while todo:
        pid = todo.pop()
        cmd = _cmdline(pid)
        mine = cmd.split(b"\0")[0] == python.encode() or b"vpatch_agent.privsep" in cmd
        if _is_agent(pid) and mine and _alive(pid):
            out.append(pid)
        todo.extend(cmap.get(pid, []))
    return out


def _ended(pid: int, timeout: float = 10) -> bool:
    """The process has exited (or is a zombie) within `timeout`: an agent that has left its
    session (reparented once sshd's child ended) may still be finishing its interpreter's exit."""
    return _wait_gone(lambda: [pid] if _alive(pid) else [], timeout) == []


def _wait_gone(agents: Callable[[], list[int]], timeout: float = 5) -> list[int]:
    deadline = time.monotonic() + timeout
    left = agents()
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = agents()
    return left


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> PatchSpec:
    p = tmp_path_factory.mktemp("spec") / "a.toml"
    p.write_text(SPEC_A)
    return load_spec(p)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.SshLab]:
    if not os.access(harness.SSHD, os.X_OK):
        pytest.fail(f"{harness.SSHD} is missing: apt-get install openssh-server")
    lab = harness.start_lab(2, tmp_path_factory.mktemp("session") / "lab", _env_with_chatty)
    yield lab
    lab.close(remove=False)


def _env_with_chatty(host: harness.SshHost) -> None:
    harness.standin_env_factory(host)
    _write_chatty(host.home / "chatty", PY)


def _write_chatty(path: Path, python: str) -> None:
    """An interpreter wrapper that writes 4 MB to stderr first: more than an SSH channel's
    window, so a transport that stops reading stderr while it sends would hang."""
    path.write_text(
        f"#!/bin/sh\nhead -c 4000000 /dev/zero | tr '\\0' x >&2\nexec {python} \"$@\"\n"
    )
    path.chmod(0o755)


def _ssh_host(lab: harness.SshLab, i: int, python: str = PY, client: str = "paramiko") -> Host:
    h = lab.hosts[i]
    opts = SshOptions(python=python, ssh_config=str(lab.ssh_config), connect_timeout=10)
    kind = OpenSshTransport if client == "openssh" else SshTransport

    def agents() -> list[int]:
        return [p for p in h.session_pids() if _is_agent(p) and _alive(p)]

    return Host(
        h.name,
        h.home / "ml-env",
        lambda: kind(h.name, h.name, None, None, opts),
        agents,
    )


@pytest.fixture(scope="module")
def local_host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    python = standin.make_env(tmp_path_factory.mktemp("session-local") / "host")
    me = os.getpid()
    return Host(
        "local",
        python.parent.parent,
        lambda: LocalTransport(str(python), "local"),
        lambda: _children_agents(me, str(python)),
    )


PRISTINE: dict[str, bytes] = {}  # per host name, read before any test of this module wrote


def _fresh(h: Host) -> Host:
    """The host as pip left it, and no agent of an earlier test still running there (an agent
    cut off by a timeout over SSH lives on until its probe ends)."""
    h.reset(PRISTINE.setdefault(h.name, h.file.read_bytes()))
    # No guess from an earlier test's answers: each engine call below is a run of its own
    # (a fresh exchange.RunContext), and they count one exchange per step, as a run meeting a
    # host cold.
    assert _wait_gone(h.agents, 15) == []
    return h


@pytest.fixture(params=["local", "ssh", "openssh"])
def host(request: pytest.FixtureRequest) -> Host:
    if request.param == "local":
        return _fresh(request.getfixturevalue("local_host"))
    client = "openssh" if request.param == "openssh" else "paramiko"
    return _fresh(_ssh_host(request.getfixturevalue("lab"), 0, client=client))


def test_apply_and_verify_one_agent_per_host(host: Host, spec: PatchSpec) -> None:
    t = Recorder(host.connect())
    try:
        applied = engine.apply([spec], t, FULL)
        assert applied.ok, applied
        assert [p.outcome for p in applied.patches] == ["applied"]
        assert [p.ok for p in applied.patches[0].probes] == [True]
        verified = engine.verify([spec], t, FULL)
        assert verified.ok, verified
        ops = [op for op, _pid in t.calls]
        # apply: inspect, then commit with its checks and a closing inspect in the same
        # exchange; verify: inspect, then the checks
        assert ops == ["inspect", "commit", "inspect", "verify"], ops
        assert len(t.pids) == 1, t.calls  # one process answered every call
        [pid] = t.pids
        assert pid != os.getpid() and host.agents() == [pid]
    finally:
        t.close()
    assert _wait_gone(host.agents) == [], "close() left the agent running"


def test_fleet_of_two_ssh_hosts_one_agent_each(lab: harness.SshLab, spec: PatchSpec) -> None:
    """Parallel hosts sharing this machine's /proc: one agent each, and no host reports
    another host's (or its own) agent session as a process needing a restart."""
    hosts = [_fresh(_ssh_host(lab, i)) for i in range(2)]
    recorders = [Recorder(h.connect()) for h in hosts]
    results: list[Any] = [None, None]
    barrier = threading.Barrier(2)

    def run(i: int) -> None:
        recorders[i].call(dict(INSPECT))  # both sessions alive before either commits
        barrier.wait(30)
        results[i] = engine.apply([spec], recorders[i], FULL)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        for r, res in zip(recorders, results, strict=True):
            assert res is not None and res.ok, res
            assert len(r.pids) == 1, r.calls
            assert res.restart_required == [], res.restart_required
        assert recorders[0].pids != recorders[1].pids
    finally:
        for r in recorders:
            r.close()
    for h in hosts:
        assert _wait_gone(h.agents) == []


def test_fault_armed_on_one_request_only(host: Host, spec: PatchSpec) -> None:
    """The first request carries a fault for a commit step it never reaches; the commit that
    follows on the same session must not die there (it would if the arming leaked)."""
    t = Recorder(host.connect())
    try:
        assert t.call({**INSPECT, "fault": "commit.locked"})["ok"]
        res = engine.apply([spec], t, Options(level="static"))
        assert res.ok and res.error is None, res
        assert [op for op, _ in t.calls][:3] == ["inspect", "inspect", "commit"], (res, t.calls)
        assert len(t.pids) == 1
    finally:
        t.close()


def test_probe_reading_stdin_does_not_eat_the_next_request(host: Host) -> None:
    greedy = (
        "import os, sys\n"
        "assert sys.stdin.read() == ''\n"  # its own stdin: the code, already read, then EOF
        "assert os.read(0, 65536) == b''\n"
    )
    t = Recorder(host.connect())
    try:
        res = t.call(
            {"op": "verify", "checks": [{"name": "greedy", "module": "os", "code": greedy}]}
        )
        assert [c["ok"] for c in res["checks"]] == [True], res
        again = t.call(dict(INSPECT))
        assert again["ok"] and len(t.pids) == 1
    finally:
        t.close()


def test_timeout_ends_the_session_and_the_next_call_works(host: Host) -> None:
    hang = {
        "op": "verify",
        "checks": [{"name": "hang", "module": "os", "code": "import time; time.sleep(5)"}],
    }
    t = Recorder(host.connect())
    try:
        first = t.call(dict(INSPECT))["pid"]
        started = time.monotonic()
        with pytest.raises(HostError, match=r"timed out after 1\.5s"):
            t.call(hang, timeout=1.5)
        assert time.monotonic() - started < 10
        second = t.call(dict(INSPECT))
        assert second["ok"] and second["pid"] != first
    finally:
        t.close()
    # The timed-out agent was killed (local) or cut off (ssh: it exits when its probe ends and
    # its answer meets a closed pipe); the current one is gone at once.
    assert _ended(second["pid"])


def test_close_leaves_no_agent(host: Host) -> None:
    t = host.connect()
    pid = t.call(dict(INSPECT))["pid"]
    assert host.agents() == [pid]
    t.close()
    assert _wait_gone(host.agents, 3) == []
    assert _ended(pid)
    t.close()  # twice is harmless


def test_agent_dying_between_calls_is_replaced(host: Host) -> None:
    """Killed while idle (OOM killer...): nothing was asked of it, so the next call simply
    starts a new agent instead of reporting a lost call."""
    t = host.connect()
    try:
        pid = t.call(dict(INSPECT))["pid"]
        os.kill(pid, 9)
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        chan = getattr(t, "_chan", None)  # SSH: until sshd has reported the end on the channel
        while chan is not None and not chan.eof_received and time.monotonic() < deadline:
            time.sleep(0.01)
        session = getattr(t, "_session", None)  # a child process: until it has exited
        while session is not None and session.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        res = t.call(dict(INSPECT))
        assert res["ok"] and res["pid"] != pid
    finally:
        t.close()


def test_agent_killed_mid_call_same_error_as_before(host: Host) -> None:
    """A SIGKILL during a call: the one-process-per-call wording, then a fresh session."""
    slow = {
        "op": "verify",
        "checks": [{"name": "slow", "module": "os", "code": "import time; time.sleep(5)"}],
    }
    t = host.connect()
    try:
        pid = t.call(dict(INSPECT))["pid"]
        killer = threading.Timer(0.5, os.kill, (pid, 9))
        killer.start()
        with pytest.raises(HostError) as err:
            t.call(slow, timeout=20)
        killer.join()
        want = "killed by signal 9" if host.name == "local" else "connection lost mid-call"
        assert want in err.value.message and "outcome unknown" in err.value.message
        assert t.call(dict(INSPECT))["ok"]
    finally:
        t.close()


def test_chatty_stderr_does_not_block(tmp_path: Path, lab: harness.SshLab) -> None:
    _fresh(_ssh_host(lab, 1))
    """4 MB of stderr before the agent even starts: drained while the request goes out (a
    blocking send would wait for the far side to read, which waits for us to read stderr)."""
    local = tmp_path / "chatty"
    _write_chatty(local, str(envs.HOST_PYTHON))
    for t in (
        LocalTransport(str(local), "local"),
        _ssh_host(lab, 1, python="/root/chatty").connect(),
        _ssh_host(lab, 1, python="/root/chatty", client="openssh").connect(),
    ):
        try:
            started = time.monotonic()
            # 3 MB of request: more than the far side's window, while it is stuck on stderr.
            assert t.call({**INSPECT, "pad": "x" * 3_000_000}, timeout=30)["ok"]
            assert t.call(dict(INSPECT), timeout=30)["ok"]
            assert time.monotonic() - started < 20
        finally:
            t.close()


def test_other_agent_session_is_not_restart_required(
    local_host: Host, spec: PatchSpec, tmp_path: Path
) -> None:
    """An idle agent session of the same env (another vpatch run) is not a server to restart;
    a real process of the env that imported the package before the write still is."""
    _fresh(local_host)
    python = local_host.root / "bin" / "python"
    server = subprocess.Popen(
        [str(python), "-c", "import servekit.config, sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    other = local_host.connect()
    t = local_host.connect()
    try:
        idle = other.call(dict(INSPECT))["pid"]
        time.sleep(0.05)  # /proc start times have 10 ms resolution
        res = engine.apply([spec], t, Options(level="static"))
        assert res.ok, res
        pids = {p["pid"] for p in res.restart_required}
        assert server.pid in pids and idle not in pids, res.restart_required
    finally:
        t.close()
        other.close()
        assert server.stdin is not None
        server.stdin.close()
        server.wait(10)


def test_interrupted_call_never_leaves_an_answer_behind(
    local_host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception while waiting (e.g. KeyboardInterrupt) ends the session: its late answer
    can never be read as the answer to the next request."""
    from patcher.transports import paramiko_ssh, pipe

    t = local_host.connect()
    try:
        first = t.call(dict(INSPECT))["pid"]
        real = pipe.wait  # the one poll() both session kinds wait in (patcher.transports.base)

        def interrupted(*args: Any) -> Any:
            for mod in (pipe, paramiko_ssh):
                monkeypatch.setattr(mod, "wait", real)
            raise KeyboardInterrupt

        for mod in (pipe, paramiko_ssh):
            monkeypatch.setattr(mod, "wait", interrupted)
        with pytest.raises(KeyboardInterrupt):
            t.call(dict(INSPECT))
        assert not _alive(first)
        again = t.call({"op": "procs", "paths": []})
        assert again["ok"] and again["pid"] != first and "restart_required" in again
    finally:
        t.close()


def test_last_request_ends_the_session_with_its_answer(host: Host) -> None:
    """protocol.LAST: the caller sends nothing more, so the agent ends the session right after
    its answer (the SSH channel closes behind the answer, not a round trip after our EOF): the
    agent and the transport's child exit while our end of stdin is still open; a later call
    starts a new agent."""
    t = host.connect()
    try:
        res = t.call(dict(INSPECT, last=True))
        assert res["ok"] and res["ended"] is True
        assert _wait_gone(host.agents, 10) == []
        assert _ended(res["pid"])
        session = getattr(t, "_session", None)  # ssh or the local agent: exited by itself
        if session is not None:
            assert not session.proc.stdin.closed
            assert session.proc.wait(timeout=10) == 0
        again = t.call(dict(INSPECT))
        assert again["ok"] and again["pid"] != res["pid"] and "ended" not in again
        assert host.agents() == [again["pid"]]
    finally:
        t.close()


def test_last_request_that_went_wrong_keeps_the_session(host: Host) -> None:
    """An answer that did not go well (an error, a check that failed) keeps the session for
    the caller's next request, `last` or not."""
    failing = {"op": "verify", "checks": [{"name": "no", "module": "os", "code": "1/0"}]}
    t = host.connect()
    try:
        bad = t.call({"op": "no-such-op", "last": True})
        assert not bad["ok"] and "ended" not in bad
        checked = t.call(dict(failing, last=True))
        assert checked["ok"] and not checked["checks"][0]["ok"] and "ended" not in checked
        assert checked["pid"] == bad["pid"] == t.call(dict(INSPECT))["pid"]
    finally:
        t.close()
