"""transports.openssh without a network: the argv handed to `ssh`, and ssh's failure lines (exit
255) read as the host errors paramiko's client reports. The lab tests (test_openssh.py and the
host-key tests over both clients) see the same paths against a real sshd."""

from __future__ import annotations

import shutil

import pytest

from patcher.errors import HostError, Unreachable
from patcher.transports.bundle import BOOT
from patcher.transports.openssh import OpenSshTransport
from patcher.transports.ssh import SshOptions, remote_command

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an OpenSSH client")


def transport(**kw: object) -> OpenSshTransport:
    opts = SshOptions(python="/opt/env/bin/python", connect_timeout=7, **kw)  # type: ignore[arg-type]
    return OpenSshTransport("gpu-01", "gpu-01", "ops", 2222, opts)


def test_argv_host_after_double_dash_and_one_constant_command() -> None:
    argv = transport(known_hosts="/tmp/a dir/100%/kh", identity="/k/%h", sudo=True)._argv()
    assert argv[-3:] == ["--", "gpu-01", remote_command("/opt/env/bin/python", True, kept=True)]
    assert BOOT.splitlines()[0] in argv[-1]
    assert ["-l", "ops"] == argv[argv.index("-l") : argv.index("-l") + 2]
    assert ["-p", "2222"] == argv[argv.index("-p") : argv.index("-p") + 2]
    assert "BatchMode=yes" in argv and "StrictHostKeyChecking=yes" in argv
    assert "ConnectTimeout=7" in argv and "LogLevel=ERROR" in argv
    # ssh would split a blank and expand a `%`: quoted and escaped, one file.
    assert 'UserKnownHostsFile="/tmp/a dir/100%%/kh"' in argv, argv
    assert "GlobalKnownHostsFile=/dev/null" in argv and "IdentityFile=/k/%%h" in argv
    assert "StrictHostKeyChecking=accept-new" in transport(accept_new_host_key=True)._argv()


@pytest.mark.parametrize("host", ["-oProxyCommand=x", "a;b", "$(x)", ""])
def test_hostile_host_never_becomes_an_argv(host: str) -> None:
    with pytest.raises(HostError, match="host or user name"):
        OpenSshTransport("t", host, None, None, SshOptions())


CASES = [
    ("ssh: connect to host 10.0.0.5 port 22: Connection refused", "cannot connect (connect to"),
    ("ssh: Could not resolve hostname gpu-99: Name or service not known", "cannot connect"),
    ("ssh: connect to host 10.0.0.5 port 22: Connection timed out", "timed out after 7s"),
    ("Connection timed out during banner exchange", "timed out after 7s"),
    ("kex_exchange_identification: read: Connection reset by peer", "cannot connect"),
    ("ops@10.0.0.5: Permission denied (publickey).", "authentication failed"),
    ("Connection to 10.0.0.5 closed by remote host.", "connection lost mid-call (Connection"),
    ("client_loop: send disconnect: Broken pipe", "connection lost mid-call (client_loop"),
    ("", "connection lost mid-call; outcome unknown"),  # the agent died of a signal
    # an ssh_config's ControlMaster/ControlPath: never "lost mid-call" (nothing ran)
    ("ControlPath too long ('/tmp/x/%C' >= 108 bytes)", "connection sharing failed (ControlP"),
    ("unix_listener: cannot bind to path /run/x/cm.sock: Permission denied", "sharing failed"),
]


@pytest.mark.parametrize(("stderr", "want"), CASES)
def test_ssh_failure_lines(stderr: str, want: str) -> None:
    t = transport()
    with pytest.raises(HostError) as err:
        t._no_answer(b"", f"Traceback: agent noise\n{stderr}\n".encode(), 255)
    assert want in err.value.message, err.value.message


def test_remote_exit_status_is_the_commands() -> None:
    """Not 255: the remote command's own status, worded as SshTransport words it."""
    t = transport()
    with pytest.raises(HostError) as err:
        t._no_answer(b"", b"sh: 1: /opt/env/bin/python: not found\n", 127)
    assert "python '/opt/env/bin/python' not found on the host" in err.value.message


UNREACHABLE = {  # no connection at all: a monitor's `unreachable`, not a host that answered
    CASES[0][0]: True,
    CASES[1][0]: True,
    CASES[2][0]: True,
    CASES[3][0]: True,
    CASES[4][0]: True,
    CASES[5][0]: False,  # reached: its sshd refused the key
    CASES[6][0]: False,  # lost mid-call
    "Bad configuration option: nosuchoption": False,  # this side's ssh_config
    "Unable to negotiate with 10.0.0.5 port 22: no matching host key type found": False,
}


@pytest.mark.parametrize(("stderr", "unreachable"), UNREACHABLE.items())
def test_unreachable_is_told_apart(stderr: str, unreachable: bool) -> None:
    with pytest.raises(HostError) as err:
        transport()._no_answer(b"", f"{stderr}\n".encode(), 255)
    assert isinstance(err.value, Unreachable) == unreachable, err.value.message
