"""How vpatch reaches a target's agent: the one place that chooses a transport.

`open_transport(target, settings)` picks the kind (`kind_for`) and calls that kind's module's
`make(target, settings)`, imported only then: a local run never imports the SSH modules,
paramiko comes with the first paramiko target, ray with `--ray`. Executors (engine, fleet,
rollout, handedit, metrics) receive the Transport it returns and never choose one.

The room (docs/design.md, "Adding a transport"):
- base: the Transport protocol, the one answer-reading loop and its per-transport primitives;
- bundle: the agent bundle and its loaders (what every transport sends), the line format;
- pipe: a local agent, and the child-process session the `ssh` client shares (kind `local`);
- ssh: what both SSH clients share (the remote command, options, `--host` parsing);
- openssh, paramiko_ssh, ray, podman, docker, kubectl: one module per remote kind (the
  engines' and kubectl's shared exec session in container);
- sshnames, sshconfig, session, answers: names as ssh takes them, `ssh -G` and known_hosts,
  the words for an unknown outcome, the fleet's answer budget.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, NamedTuple, Protocol

from patcher.errors import UsageError
from patcher.transports.answers import Budget
from patcher.transports.base import Transport

if TYPE_CHECKING:
    from collections.abc import Callable

    from patcher.transports.ray import Cluster

__all__ = ["KINDS", "Settings", "Target", "Transport", "kind_for", "open_transport", "start"]

# Kind name -> the module whose `make(target, settings) -> Transport` opens one. A new
# transport is one module in this package plus one line here.
KINDS: dict[str, str] = {
    "local": "patcher.transports.pipe",
    "openssh": "patcher.transports.openssh",
    "paramiko": "patcher.transports.paramiko_ssh",
    "ray": "patcher.transports.ray",
    "podman": "patcher.transports.podman",
    "docker": "patcher.transports.docker",
    "kubectl": "patcher.transports.kubectl",
}
# The kinds that reach a container (`Target.container`: a pod for kubectl) on this machine or
# an SSH host.
CONTAINER_KINDS = ("podman", "docker", "kubectl")


class Target(Protocol):
    """What a transport needs to know of one host (patcher.inventory.targets.Target is one)."""

    @property
    def name(self) -> str: ...  # labels the host in reports and JSON
    @property
    def address(self) -> str: ...  # what the transport connects to
    @property
    def user(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def python(self) -> str: ...  # the environment's interpreter there
    @property
    def identity(self) -> str | None: ...
    @property
    def sudo(self) -> bool: ...
    @property
    def sudo_user(self) -> str | None: ...
    @property
    def local(self) -> bool: ...  # this machine: only when written so, never by a name
    @property
    def share(self) -> bool | None: ...  # False: no shared SSH connection (--no-share)
    @property
    def transport(self) -> str | None: ...  # its own kind (an inventory's); None: the run's
    @property
    def container(self) -> str | None: ...  # a container there (kind podman/docker); None: none
    @property
    def container_user(self) -> str | None: ...  # `exec --user` in it; None: the image's user
    @property
    def container_name(self) -> str | None: ...  # kubectl: the pod's container (`-c`)
    @property
    def kube_context(self) -> str | None: ...  # kubectl: `--context`; None: the current one
    @property
    def kubeconfig(self) -> str | None: ...  # kubectl: `--kubeconfig`; None: kubectl's own


class Settings(NamedTuple):
    """The run's transport options, alike for every host of one command (a NamedTuple: frozen,
    and read before the first host connects, where `dataclasses` would cost its import).

    `kind` is the transport of every target that is not local and names none of its own:
    `auto` (the OpenSSH client when `ssh` is on PATH, else paramiko) or a name in KINDS
    (`--ssh-client`, `--ray`)."""

    kind: str = "auto"
    ssh_config: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    connect_timeout: float = 10.0
    call_timeout: float = 600.0  # --timeout: per agent call
    trusted_python: str = ""  # privsep's stage 0 as root (bundle.TRUSTED_PYTHON when empty)
    # --run-as: as root, the user the environment's code runs as (privsep: the operator's
    # choice where the trust closure has more than one writer); "" lets the closure decide
    run_as: str = ""
    keepalive: int = 15
    # The agent's code kept on each SSH host between runs (bundle.kept_boot, in the login
    # user's ~/.cache/vpatch/agent); False (`--no-keep-agent`): sent whole every time, nothing
    # written on the host outside the environment's state dir.
    keep_agent: bool = True
    # -v: the OpenSSH transport asks ssh whether a shared master is reused (one `ssh -O check`
    # per host before its session starts), to say so; never asked otherwise.
    say_master: bool = False
    # The run's answer budget (answers.Budget), shared by every transport the run opens; None:
    # each transport has its own (one host, one budget).
    budget: Budget | None = None
    # `--ray`: the run's view of the cluster (its nodes, the registered task), from ray.nodes()
    ray: Cluster | None = None


def kind_for(target: Target, settings: Settings) -> str:
    """The kind that reaches `target`: `local` for this machine, else the target's own kind
    (an inventory host's `transport = ...`, checked against KINDS where it was read), else the
    settings' kind. The host's own wins, as its other fields win over the command line's: one
    fleet may mix hosts reached by OpenSSH with hosts only paramiko reaches. A container is
    reached by its engine's kind, on this machine or through SSH on its host."""
    if target.container is not None and target.transport is not None:
        return target.transport
    if target.local:
        return "local"
    if target.transport is not None:
        return target.transport
    if settings.kind != "auto":
        if settings.kind not in KINDS or settings.kind in ("local", *CONTAINER_KINDS):
            known = ", ".join(k for k in KINDS if k not in ("local", *CONTAINER_KINDS))
            raise UsageError(f"unknown transport {settings.kind!r}", f"one of: auto, {known}")
        return settings.kind
    from patcher.transports import sshnames

    return "openssh" if sshnames.openssh() else "paramiko"


DEFAULTS = Settings()


def open_transport(target: Target, settings: Settings = DEFAULTS) -> Transport:
    """The transport of `target`; HostError when it cannot be opened (no interpreter there,
    no SSH client, a refused connection)."""
    make: Callable[[Target, Settings], Transport]
    make = importlib.import_module(KINDS[kind_for(target, settings)]).make
    transport = make(target, settings)
    if settings.budget is not None and hasattr(transport, "budget"):
        transport.budget = settings.budget
    return transport


def start(transport: Transport) -> None:
    """Begin the transport's session now, ahead of its first call, where its kind can (the
    pipe sessions: a child connects and takes the bundle while the controller loads specs);
    others start with their first call."""
    begin = getattr(transport, "start", None)
    if begin is not None:
        begin()
