"""The agent in a running container: `ENGINE exec -i [--user U] CONTAINER sh -c LINE`, on this
machine or through SSH on the container's host (`ssh HOST -- ENGINE exec -i ...`).

What the engine kinds share (patcher.transports.podman and .docker are one `make` each, over
this module): the same agent session as every other transport (pipe.PipeTransport), whose
child is the engine's CLI; `LINE` is the SSH transports' own bootstrap (ssh.remote_command),
so inside the container the same rule picks the agent's start: as the container's root,
privsep's stage 0 under the trusted interpreter (the image's /usr/bin/python3 unless
--trusted-python), which decides who works and never runs code the environment's owner could
plant; as another user (`--user`, the inventory's `container_user`), the environment's
interpreter with that user's power. Nothing is kept in the container (`kept` is off): a
re-created container starts clean, and the agent's code is sent with each session.

The container name is an argv item, never a shell word on this side; over SSH it is quoted
into the remote command after a check that it is a name the engines accept, so it can be
taken neither for an option nor for shell text.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any, NamedTuple

from patcher.errors import HostError
from patcher.transports.bundle import TRUSTED_PYTHON
from patcher.transports.pipe import PipeTransport
from patcher.transports.ssh import SshOptions, exec_error, options, remote_command

if TYPE_CHECKING:
    from patcher.transports import Settings, Target
    from patcher.transports.openssh import OpenSshTransport

ENGINES = ("podman", "docker")
# A container's name or ID as both engines accept it (docker's `[a-zA-Z0-9][a-zA-Z0-9_.-]+`);
# a user as `--user` takes it: NAME, UID, NAME:GROUP or UID:GID.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?")
NAME_HINT = "a container is named by letters, digits and _ . - (its name or ID, as `ps` shows)"
# The engines' own words for a container that is not there, or not running (podman 4 and
# docker 20+: exit 125 or 1 with one of these on stderr).
_MISSING = ("no such container", "no container with name or id")
_STOPPED = ("is not running", "state improper", "is paused", "is restarting")


def name_problem(container: str) -> str | None:
    """Why `container` cannot be a container name here, or None."""
    if not _NAME.fullmatch(container):
        return f"{container!r} is not a container name or ID"
    return None


def user_problem(user: str) -> str | None:
    if not _USER.fullmatch(user):
        return f"{user!r} is not a user as `exec --user` takes it (NAME, UID, NAME:GROUP)"
    return None


class Box(NamedTuple):
    """One container: its engine (the CLI's name), its name, the user its exec runs as
    (None: the image's); `words`: an exec command of another shape than `ENGINE exec -i [--user
    U] NAME`, whose last word is followed by the shell (a `kubectl exec -i -n NS POD -c C --`
    kind is one more module that makes such a Box)."""

    engine: str
    name: str
    user: str | None = None
    words: tuple[str, ...] = ()


def exec_argv(box: Box, line: str) -> list[str]:
    """The engine's command: one exec whose stdin and stdout are the agent's."""
    user = ["--user", box.user] if box.user else []
    words = box.words or (box.engine, "exec", "-i", *user, box.name)
    return [*words, "sh", "-c", line]


def agent_line(opts: SshOptions) -> str:
    """The shell line that starts the agent inside the container (ssh.remote_command: stage 0
    as root, else the environment's interpreter); nothing kept in the container."""
    return remote_command(
        opts.python, False, opts.trusted_python or TRUSTED_PYTHON, None, opts.run_as, False
    )


def engine_error(target: str, box: Box, opts: SshOptions, err: bytes, code: int) -> HostError:
    """Why the exec ended without an answer, in the engine's words where it said one."""
    engine, container = box.engine, box.name
    text = err.decode("utf-8", "replace").lower()
    if any(w in text for w in _MISSING):
        return HostError(
            f"{target}: no container {container!r} ({engine})",
            f"`{engine} ps` lists the running containers; the inventory's `container` names one",
        )
    if any(w in text for w in _STOPPED):
        return HostError(
            f"{target}: container {container!r} is not running ({engine})",
            f"start it (`{engine} start {container}`), then run vpatch again",
        )
    if code in (125, 126) and "sh" in text:
        return HostError(
            f"{target}: {engine} could not start the agent in {container!r} (exit {code}): "
            f"{text.strip().splitlines()[-1][:300] if text.strip() else ''}",
            "the agent starts through the container's `sh`: an image without a shell cannot "
            "be patched in place; bake a patched wheel into the image (`vpatch wheel`)",
        )
    if code == 127:
        return HostError(
            f"{target}: python {opts.python!r} not found in container {container!r}",
            "set the host's `python` to the serving environment's interpreter in the container "
            f"(`{engine} exec {container} sh -c 'command -v python3'` finds one)",
        )
    return exec_error(target, opts, err, code)


class ContainerTransport(PipeTransport):
    """The agent in a container of this machine's engine: one `ENGINE exec -i` child per
    session."""

    def __init__(self, target: str, box: Box, opts: SshOptions) -> None:
        super().__init__()
        import shutil

        exe = shutil.which(box.engine)
        if exe is None:
            raise HostError(
                f"{target}: no `{box.engine}` on PATH",
                f"install {box.engine}, or name the container's engine with `transport`",
            )
        self.target, self.box, self.exe, self.opts = target, box, exe, opts
        self.call_timeout = opts.call_timeout

    def _argv(self) -> list[str]:
        return [self.exe, *exec_argv(self.box, agent_line(self.opts))[1:]]

    def _no_answer(self, out: bytes, err: bytes, code: int) -> dict[str, Any]:
        if out.strip() or code <= 0:
            return super()._no_answer(out, err, code)
        raise engine_error(self.target, self.box, self.opts, err, code)


def over_ssh(target: Target, settings: Settings, box: Box) -> OpenSshTransport:
    """The container on an SSH host: the OpenSSH transport whose remote command is the
    engine's exec (through `sudo -n` where the target says sudo: the engine's socket is
    usually root's)."""
    from patcher.transports.openssh import OpenSshTransport

    opts = options(target, settings)._replace(keep_agent=False)
    sudo = ["sudo", "-n"] if target.sudo else []

    class _Remote(OpenSshTransport):
        def _remote(self) -> str:
            return shlex.join([*sudo, *exec_argv(box, agent_line(opts))])

        def _no_answer(self, out: bytes, err: bytes, code: int) -> dict[str, Any]:
            if out.strip() or code in (0, 255) or code < 0:
                return super()._no_answer(out, err, code)
            raise engine_error(self.target, box, opts, err, code)

    return _Remote(target.name, target.address, target.user, target.port, opts)


def make(engine: str, target: Target, settings: Settings) -> PipeTransport:
    """A container target of `engine`: this machine's engine for a local target, else the
    engine on the SSH host `target.address` (always the OpenSSH client)."""
    box = Box(engine, target.container or "", target.container_user)
    problem = name_problem(box.name)
    if problem is None and box.user is not None:
        problem = user_problem(box.user)
    if problem is not None:
        raise HostError(f"{target.name}: {problem}", NAME_HINT)
    if not target.local:
        return over_ssh(target, settings, box)
    return ContainerTransport(
        target.name, box, options(target, settings)._replace(keep_agent=False)
    )
