"""What both SSH clients share: the one remote command line, the per-connection options,
what an agent that ended without answering means, and `--host`'s `[user@]host[:port]`.

The remote command is a constant bootstrap plus quoted interpreter paths: no value from a spec
or a host name ever reaches a shell on either side (the host name is an argv item or the SSH
library's parameter, checked by sshnames first).
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, NamedTuple

from patcher.errors import HostError, UsageError
from patcher.transports import session, sshnames
from patcher.transports.bundle import TRUSTED_PYTHON, agent_argv

if TYPE_CHECKING:
    from patcher.transports import Settings, Target


def remote_command(
    python: str,
    sudo: bool = False,
    trusted: str = "",
    sudo_user: str | None = None,
    run_as: str = "",
    kept: bool = False,
) -> str:
    """The one shell line sent over SSH: constant bootstrap, quoted interpreter paths
    (`kept`: the loaders look for the bundle kept on the host first, bundle.kept_boot).

    Through sudo as root the agent is root: stage 0 under the trusted interpreter. Through
    `sudo -n -u USER` (an Ansible become_user, hosts.toml's sudo_user) it is that user, who
    runs the env's interpreter with that user's own power. Without sudo, the login may still
    be root: the shell takes the stage-0 path then. It tests `[ -O / ]` first (does this
    user own `/`: root, on any host where root owns it), a test builtin of every POSIX shell,
    so a root login forks nothing for the question; only where that is false does it ask
    `id -u` (a subshell and an exec: ~1.5 ms of the host's CPU per session). Either way root
    never takes the plain path; a user who owns `/` and is not root takes stage 0, which
    has no root power to guard then and goes on as that user's agent."""
    q = shlex.quote
    stage0 = " ".join(map(q, agent_argv(python, True, trusted or TRUSTED_PYTHON, run_as, kept)))
    plain = " ".join(map(q, agent_argv(python, False, "", run_as, kept)))
    if sudo and sudo_user and sudo_user != "root":
        return f"sudo -n -u {q(sudo_user)} {plain}"
    if sudo:
        return f"sudo -n {stage0}"
    return f'if [ -O / ] || [ "$(id -u)" = 0 ]; then exec {stage0}; fi; exec {plain}'


class SshOptions(NamedTuple):
    """One host's connection settings: the run's Settings with the target's own values."""

    python: str = "python3"
    ssh_config: str | None = None
    identity: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    sudo: bool = False
    sudo_user: str | None = None  # with sudo: `sudo -n -u USER` (None: root)
    connect_timeout: float = 10.0
    trusted_python: str = ""  # privsep's stage 0 as root (TRUSTED_PYTHON when empty)
    run_as: str = ""  # --run-as: as root, the user the environment's code runs as
    call_timeout: float = 600.0
    keepalive: int = 15
    # Shared connections (transports.share): False for `--no-share` / `share = false`.
    share: bool = True
    keep_agent: bool = True  # Settings.keep_agent
    say_master: bool = False  # Settings.say_master


def exec_error(target: str, opts: SshOptions, err: bytes, status: int) -> HostError:
    """Why the remote command ended without an answer (status -1: no exit status came),
    from its exit status and the last line of its stderr; the same words for both SSH
    clients."""
    tail = (err.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:300]
    if status == -1:
        return session.lost(target)
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


def options(target: Target, settings: Settings) -> SshOptions:
    """One host's connection options: the run's settings and the target's own values."""
    return SshOptions(
        python=target.python,
        ssh_config=settings.ssh_config,
        identity=target.identity,
        known_hosts=settings.known_hosts,
        accept_new_host_key=settings.accept_new_host_key,
        sudo=target.sudo,
        sudo_user=target.sudo_user,
        connect_timeout=settings.connect_timeout,
        call_timeout=settings.call_timeout,
        trusted_python=settings.trusted_python,
        run_as=settings.run_as,
        keepalive=settings.keepalive,
        share=target.share is not False,
        keep_agent=settings.keep_agent,
        say_master=settings.say_master,
    )
