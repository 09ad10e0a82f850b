"""One patch, three files, one transaction: apply, verify and rollback together, a failing
probe restores every file, and a crash at ANY step of the commit (SIGKILL locally, the SSH
connection cut over real sshd) leaves every file pristine or every file patched once the next
`vpatch status` has looked (it repairs a half-written transaction)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from patcher.agent import faults
from patcher.plan.base import Options
from patcher.result import HostResult
from patcher.run import engine
from patcher.run.exchange import TEST_FAULT_ENV
from patcher.transports import Transport
from patcher.transports.openssh import OpenSshTransport
from patcher.transports.paramiko_ssh import SshTransport
from patcher.transports.pipe import LocalTransport
from patcher.transports.ssh import SshOptions
from tests import sshd as harness
from tests import standin
from tests.conftest import vpatch
from tests.support import multifile
from tests.support.multifile import FILES, MultiTarget
from tests.support.sshargs import CLIENTS, lab_options

OPTS = Options(level="static")
# Steps a commit passes once per file: the second file's step is a fault point of its own.
PER_FILE = ("write.temp_written", "write.temp_synced", "write.before_rename", "write.renamed")
POINTS = [*faults.POINTS, *(f"{p}#2" for p in PER_FILE), "write.renamed#3"]


def run(t: Transport, target: MultiTarget, command: str) -> HostResult:
    if command == "apply":
        return engine.apply([target.spec], t, OPTS)
    if command == "rollback":
        return engine.rollback(None, t, OPTS)
    return engine.status([], t, OPTS)


def all_or_none(target: MultiTarget, t: Transport) -> bool:
    """After `status` (which repairs): every file pristine, or every file patched."""
    st = run(t, target, "status")
    assert st.ok and st.error is None, st
    now = target.now()
    assert now in (target.pristine, target.patched), {k: v and v[:40] for k, v in now.items()}
    patched = now == target.patched
    assert [(p.id, p.outcome) for p in st.patches] == (
        [(target.spec.id, "applied")] if patched else []
    )  # one spec, however many files (issue 25 case 11), each file once
    assert [len(p.files) for p in st.patches] == ([len(FILES)] if patched else [])
    return patched


def recover(target: MultiTarget, t: Transport) -> None:
    """From whatever state the crash left, apply and rollback reach the exact bytes."""
    again = run(t, target, "apply")
    assert again.ok and target.now() == target.patched, again
    back = run(t, target, "rollback")
    assert back.ok and target.now() == target.pristine, back
    assert target.temps() == []


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> tuple[MultiTarget, str]:
    base = tmp_path_factory.mktemp("multi-local")
    python = standin.make_env(base / "host")
    return multifile.target(python.parent.parent, multifile.write_spec(base, False)), str(python)


def test_apply_verify_rollback_cli(tmp_path: Path) -> None:
    """Through the real command: one apply writes three files (one of them new), verify runs
    the probe once after all writes, rollback gives RECORD's bytes and removes the module."""
    python = standin.make_env(tmp_path / "host")
    spec = multifile.write_spec(tmp_path)
    target = multifile.target(python.parent.parent, spec)
    py = ["--python", str(python)]
    res = vpatch("apply", tmp_path / "multi.toml", *py, "--json")
    assert res.code == 0, res.err
    p = res.patch()
    assert p["outcome"] == "applied" and len(p["files"]) == 3
    assert [(pr["name"], pr["ok"]) for pr in p["probes"]] == [
        # the changed module no probe's import brings (servekit comes with servekit.aux)
        ("import servekit.config", True),
        ("all three changes load", True),
    ]
    assert target.now() == target.patched
    aux = target.site / "servekit/aux.py"
    assert aux.stat().st_mode & 0o777 == 0o644
    ver = vpatch("verify", tmp_path / "multi.toml", *py, "--json")
    assert ver.code == 0 and ver.patch()["outcome"] == "applied", ver.out
    by_id = vpatch("verify", spec.id, *py, "--json")  # no spec file: the journal's record
    assert by_id.code == 0 and by_id.patch()["outcome"] == "applied", by_id.out
    assert [p["name"] for p in by_id.patch()["probes"]] == [p["name"] for p in p["probes"]]
    (target.site / "servekit/__init__.py").write_text("# hand edit\n")
    drift = vpatch("verify", spec.id, *py, "--json")
    assert drift.code == 1 and drift.patch()["outcome"] == "drifted"
    (target.site / "servekit/__init__.py").write_bytes(
        target.patched["servekit/__init__.py"] or b""
    )
    back = vpatch("rollback", *py, "--json")
    assert back.code == 0, back.err
    assert target.now() == target.pristine
    assert not list((target.site / "servekit" / "__pycache__").glob("aux.*"))


def test_failing_probe_restores_every_file(tmp_path: Path) -> None:
    python = standin.make_env(tmp_path / "host")
    spec_path = tmp_path / "bad.toml"
    spec_path.write_text(multifile.spec_text(aux_layers="(2, 16, 30)"))
    target = multifile.target(python.parent.parent, multifile.write_spec(tmp_path))
    res = vpatch("apply", spec_path, "--python", str(python), "--json")
    assert res.code == 1
    assert res.patch()["outcome"] == "failed"
    assert "previous bytes restored" in res.patch()["message"]
    assert target.now() == target.pristine


@pytest.mark.faults
@pytest.mark.parametrize("command", ["apply", "rollback"])
@pytest.mark.parametrize("point", POINTS)
def test_sigkill_local(local: tuple[MultiTarget, str], point: str, command: str) -> None:
    target, python = local
    target.reset()
    if command == "rollback":
        with closing(LocalTransport(python)) as t:
            assert run(t, target, "apply").ok
    with closing(LocalTransport(python)) as t:
        os.environ[TEST_FAULT_ENV] = point
        try:
            res = run(t, target, command)
        finally:
            del os.environ[TEST_FAULT_ENV]
    assert res.error and "killed by signal 9" in res.error, res
    with closing(LocalTransport(python)) as t:
        all_or_none(target, t)
        recover(target, t)


@pytest.fixture(scope="module")
def ssh(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MultiTarget, harness.SshHost, SshOptions]]:
    base = tmp_path_factory.mktemp("multi-ssh")
    lab = harness.start_lab(1, base / "lab", harness.standin_env_factory)
    host = lab.hosts[0]
    opts = lab_options(lab)
    target = multifile.target(host.home / "ml-env", multifile.write_spec(base, False))
    yield target, host, opts
    lab.close(remove=False)


def _parked(host: harness.SshHost, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in host.session_pids():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if stat == "T" and b"vpatch_agent" in cmd:
                return
        time.sleep(0.01)
    raise AssertionError("the agent never reached the armed point")


@pytest.mark.faults
@pytest.mark.parametrize("command", ["apply", "rollback"])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("client", CLIENTS)
def test_ssh_cut(
    ssh: tuple[MultiTarget, harness.SshHost, SshOptions], point: str, command: str, client: str
) -> None:
    target, host, opts = ssh
    kind = OpenSshTransport if client == "openssh" else SshTransport

    def connect() -> Transport:
        return kind(host.name, host.name, None, None, opts)

    target.reset()
    if command == "rollback":
        with closing(connect()) as t:
            assert run(t, target, "apply").ok
    got: list[HostResult] = []

    def work() -> None:
        with closing(connect()) as t:
            got.append(run(t, target, command))

    worker = threading.Thread(target=work)
    os.environ[TEST_FAULT_ENV] = point + ":pause"
    try:
        worker.start()
        try:
            _parked(host)
        finally:
            host.kill_sessions(keep_commands=False)
            worker.join(60)
    finally:
        del os.environ[TEST_FAULT_ENV]
    [res] = got
    assert res.error and "outcome unknown" in res.error, res
    with closing(connect()) as t:
        all_or_none(target, t)
        recover(target, t)
