"""Host and user names as OpenSSH would take them, and where its client is: what every target
is checked against before anything connects (the inventory, --host, each transport), kept
apart from transports.sshconfig (`ssh -G`, known_hosts) so that this check costs no more than
itself on the way to the first host.

`ssh -G` evaluates `Match exec` lines, which run shell commands with the host name (`%h`) and
user (`%r`) substituted in; so names are held to OpenSSH's own rules (no shell metacharacters,
no blank or control characters, no leading '-', a sane length) before any ssh sees them.
"""

from __future__ import annotations

from collections.abc import Callable

# What OpenSSH's valid_hostname() and valid_ruser() (ssh.c) refuse, plus `$` and `\` in user
# names, which no account name needs.
_HOST_BAD = frozenset("'`\"$\\;&<>|(){},")
_USER_BAD = frozenset("'`\"$\\;&<>|(){}")
MAX_HOST = 253  # a DNS name's limit; aliases and addresses are shorter still
MAX_USER = 255


def _problem(value: str, bad: frozenset[str], limit: int) -> str | None:
    if not value:
        return "is empty"
    if len(value) > limit:
        return f"is {len(value)} characters long (at most {limit})"
    if value.startswith("-"):
        return "starts with '-' (ssh would take it for an option)"
    found = sorted({c for c in value if c in bad or c.isspace() or not c.isprintable()})
    if found:
        shown = "".join(found).encode("unicode_escape").decode()
        return f"contains {shown!r} (shell metacharacters, blanks and control characters)"
    return None


def host_problem(host: str) -> str | None:
    """Why OpenSSH would refuse `host` as a host name, or None."""
    return _problem(host, _HOST_BAD, MAX_HOST)


def user_problem(user: str) -> str | None:
    """Why `user` is no login name vpatch passes on, or None."""
    return _problem(user, _USER_BAD, MAX_USER)


HOST_HINT = "a host is a DNS name, an IP address or an ssh_config alias, e.g. gpu-01 or 10.0.0.5"


def openssh() -> str | None:
    """The OpenSSH client on PATH, if any."""
    import shutil  # here: one lookup per run, not an import on every command's start

    return shutil.which("ssh")


def paramiko_hint(add_fabric: str) -> str:
    """How to add the `paramiko` extra (its distribution is fabric, which brings paramiko):
    `add_fabric` is the command that adds fabric to vpatch's own environment, in the words of
    the installer that made it (patcher.commands._installhint, which the command asks)."""
    return f"add fabric (the paramiko extra) to vpatch's environment: {add_fabric}"


def client_problem(choice: str, add_fabric: Callable[[], str]) -> tuple[str, str] | None:
    """Why the SSH client `--ssh-client CHOICE` picks cannot run here, as (error, hint), if it
    cannot: paramiko (fabric) is the optional `vpatch[paramiko]` extra, and `auto` falls back
    to it only where no OpenSSH client is on PATH. Asked before the first host connects, so a
    missing client is one input error, not one per host. `add_fabric()`: the command that
    adds the extra (asked only when it is missing)."""
    if choice == "openssh" or (choice == "auto" and openssh()):
        return None
    import importlib.util

    if importlib.util.find_spec("fabric") is not None:
        return None
    if choice == "paramiko":
        return (
            "--ssh-client paramiko: fabric/paramiko is not installed",
            paramiko_hint(add_fabric()),
        )
    return (
        "no SSH client: no `ssh` on PATH, and fabric/paramiko is not installed",
        "install the OpenSSH client, or " + paramiko_hint(add_fabric()),
    )
