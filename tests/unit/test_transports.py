"""patcher.transports: the one place that chooses a transport, and its registry.

Every kind in KINDS is a module with `make(target, settings)`; the choice is `kind_for`'s
alone; importing the package (what every run does) loads none of the remote kinds' modules,
so a local run never pays for SSH or Ray code.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from contextlib import closing

import pytest

from patcher import transports
from patcher.errors import HostError, UsageError
from patcher.inventory.targets import Target
from patcher.transports import KINDS, Settings, kind_for, open_transport, sshnames
from patcher.transports.openssh import OpenSshTransport
from patcher.transports.pipe import LocalTransport
from tests.conftest import REPO

REMOTE = Target("gpu-01", "gpu-01", "ops", 2222, "/srv/env/bin/python", sudo=True)
LOCAL = Target("local", "local", python=sys.executable, local=True)


def test_every_kind_is_a_module_with_make() -> None:
    assert {"local", "openssh", "paramiko", "ray"} <= set(KINDS)  # a new kind is one more row
    for name, module in KINDS.items():
        assert callable(importlib.import_module(module).make), name


def test_kind_for_decides_from_the_target_and_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the local target is local whatever the run's kind (never by its name: local=True)
    assert {kind_for(LOCAL, Settings(kind=k)) for k in ("auto", "paramiko", "ray")} == {"local"}
    assert kind_for(REMOTE._replace(name="local"), Settings(kind="openssh")) == "openssh"
    assert kind_for(REMOTE, Settings(kind="ray")) == "ray"
    monkeypatch.setattr(sshnames, "openssh", lambda: "/usr/bin/ssh")
    assert kind_for(REMOTE, Settings()) == "openssh"
    monkeypatch.setattr(sshnames, "openssh", lambda: None)
    assert kind_for(REMOTE, Settings()) == "paramiko"
    for bad in ("no-such-kind", "local"):
        with pytest.raises(UsageError):
            kind_for(REMOTE, Settings(kind=bad))
    # a host's own kind (an inventory's `transport = ...`) wins over the run's
    own = REMOTE._replace(transport="paramiko")
    assert {kind_for(own, Settings(kind=k)) for k in ("auto", "openssh", "ray")} == {"paramiko"}
    assert kind_for(LOCAL._replace(transport="paramiko"), Settings()) == "local"


def test_open_transport_passes_the_target_and_the_settings() -> None:
    settings = Settings(kind="openssh", connect_timeout=7, call_timeout=33, trusted_python="/t")
    t = open_transport(REMOTE, settings)
    assert isinstance(t, OpenSshTransport)
    assert (t.host, t.user, t.port, t.call_timeout) == ("gpu-01", "ops", 2222, 33)
    assert (t.opts.python, t.opts.sudo, t.opts.trusted_python) == (
        "/srv/env/bin/python",
        True,
        "/t",
    )
    with closing(open_transport(LOCAL, settings._replace(trusted_python=""))) as local:
        assert isinstance(local, LocalTransport)
        assert (local.call_timeout, local.trusted_python) == (33, "/usr/bin/python3")
        assert local.call({"op": "procs", "paths": []})["ok"]
        transports.start(local)  # a session that already runs: nothing more to start
    with pytest.raises(HostError, match="not found"):
        open_transport(LOCAL._replace(python="/nonexistent/python"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
def test_an_early_session_takes_the_whole_bundle_before_its_first_call() -> None:
    """start() hands the agent all of the bundle (its stdin pipe widened to hold it), not
    the default pipe's 64 KiB with the rest waiting for the first request; the call works."""
    import fcntl

    from patcher.transports.bundle import agent_bundle

    assert len(agent_bundle()) > 1 << 16  # else the default pipe would hold it anyway
    with closing(open_transport(LOCAL)) as local:
        assert isinstance(local, LocalTransport)
        transports.start(local)
        session = local._session
        assert session is not None and session.proc.stdin is not None
        size = fcntl.fcntl(session.proc.stdin.fileno(), fcntl.F_GETPIPE_SZ)
        assert session.unsent == b"" and size >= len(agent_bundle()), (len(session.unsent), size)
        assert local.call({"op": "procs", "paths": []})["ok"]


def test_importing_the_room_loads_no_remote_kind() -> None:
    code = (
        "import sys, patcher.transports; "
        "mods = [m for m in sys.modules if m.startswith('patcher.transports.')]; print(mods)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout
    for kind in ("openssh", "paramiko_ssh", "ray", "pipe", "bundle"):
        assert f"patcher.transports.{kind}'" not in out, out


def test_one_runs_transports_share_its_answer_budget() -> None:
    """The answer budget is the run's (Settings.budget, made once per command run by
    commands._targets.settings), not the process's: two runs never charge one budget."""
    from patcher.commands import _targets, build_parser
    from patcher.transports.answers import Budget

    args = build_parser().parse_args(["status", "--host", "local"])
    run = _targets.settings(args)
    assert _targets.settings(args) is run and isinstance(run.budget, Budget)
    other = _targets.settings(build_parser().parse_args(["status", "--host", "local"]))
    assert other.budget is not run.budget
    with closing(open_transport(LOCAL, run)) as a, closing(open_transport(LOCAL, run)) as b:
        assert isinstance(a, LocalTransport) and isinstance(b, LocalTransport)
        assert a.budget is b.budget is run.budget
    with closing(open_transport(LOCAL)) as alone:
        assert isinstance(alone, LocalTransport) and alone.budget is not run.budget
