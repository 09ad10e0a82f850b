"""What the commands that reach hosts share (not a command): the target, SSH, Ray and fleet
options, the targets and fleet policy built from them, and the transport each target gets.

apply, verify, rollback, status, ensure, rollout, diff and capture take the same target options
and build targets the same way: validated up front, so a typo in the 5th --host fails before
the 1st host is contacted. `_open` is where a target becomes a transport; `_start_early` starts
the first wave's sessions while the specs load.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from patcher.errors import HostError, UsageError

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.result import HostResult
    from patcher.run import fleet
    from patcher.transports import Settings, Transport


def json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def target_options(p: argparse.ArgumentParser, pods: bool = False) -> None:
    """The target options; `pods`: also `--kubectl NS -l SELECTOR` (the read-only commands)."""
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="TARGET",
        help="'local' (default), [ssh://][user@]host[:port], or a running container: "
        "podman://NAME, docker://NAME (this machine's engine), docker://[user@]host/NAME "
        "(on an SSH host), kubectl://NAMESPACE/POD[/CONTAINER] (a pod, through this "
        "machine's kubectl); repeatable",
    )
    p.add_argument("--python", metavar="PATH", help="target interpreter (default: python3)")
    p.add_argument(
        "--inventory",
        metavar="FILE",
        help="hosts.toml: [defaults] (user, port, python, identity, sudo) and [[host]] tables "
        "(name, address, groups, and the same fields); or an Ansible INI/YAML inventory "
        "(docs/inventory.md)",
    )
    p.add_argument("--group", action="append", default=[], help="inventory group; repeatable")
    p.add_argument(
        "--trust-inventory",
        action="store_true",
        help="read --inventory (its vars files, the identities it names) even where someone "
        "other than you or root can write it; by default that is refused (docs/inventory.md)",
    )
    ssh = p.add_argument_group("ssh")
    ssh.add_argument(
        "--ssh-config", metavar="FILE", help="OpenSSH client config (default ~/.ssh/config)"
    )
    ssh.add_argument("--identity", metavar="FILE", help="private key file")
    ssh.add_argument(
        "--known-hosts", metavar="FILE", help="known_hosts file to check host keys against"
    )
    ssh.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="record unknown host keys instead of refusing them (changed keys are always refused)",
    )
    ssh.add_argument(
        "--sudo",
        action="store_true",
        help="run the agent through `sudo -n` (as root, it works as the environment's owner "
        "when another user owns it: privilege separation, docs/design.md#threat-model)",
    )
    ssh.add_argument(
        "--trusted-python",
        metavar="PATH",
        default="",
        help="root-owned interpreter the agent starts under as root before it drops to the "
        "environment's owner (default /usr/bin/python3)",
    )
    ssh.add_argument(
        "--run-as",
        metavar="USER",
        default="",
        help="as root, run the environment's code as USER (a name or uid of the host): the "
        "operator's choice where more than one user can write what it runs, which is refused "
        "otherwise (docs/design.md#the-trust-closure-host-side)",
    )
    ssh.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds to wait for a host's SSH connection (10)",
    )
    ssh.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="seconds per agent call (600)"
    )
    ssh.add_argument(
        "--no-share",
        action="store_true",
        help="connect to each host on its own: no OpenSSH master kept for the next command "
        "(default: ControlMaster auto, ControlPersist 60s where the ssh_config sets neither "
        "ControlMaster nor ControlPath; inventory: share = false)",
    )
    ssh.add_argument(
        "--no-keep-agent",
        action="store_true",
        help="send the agent's code whole to every host every time, and write nothing of it "
        "there (default: kept in the login user's ~/.cache/vpatch/agent, checked by its hash "
        "before use, so a later run sends a hash instead of ~300 KB)",
    )
    ssh.add_argument(
        "--ssh-client",
        choices=("auto", "openssh", "paramiko"),
        default="auto",
        help="the `ssh` program, or paramiko (in-process: the vpatch[paramiko] extra); "
        "auto (default): ssh when on PATH",
    )
    ray = p.add_argument_group("ray (pip install 'vpatch[ray]')")
    ray.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="every alive node of this Ray cluster: auto, HEAD:6379 or ray://HEAD:10001",
    )
    ray.add_argument(
        "--ray-python-map",
        metavar="FILE",
        help="TOML: node id, node name or address = interpreter on that node "
        "(default: --python, else the node's own Python), or = {python, restart, health, "
        "metrics} (rollout: that node's own, over the flags)",
    )
    if pods:
        _pod_options(p)
    fleet = p.add_argument_group("fleet")
    fleet.add_argument("--parallel", type=int, default=16, metavar="N", help="hosts at once (16)")
    fleet.add_argument(
        "--canary", metavar="K", help="run the first K hosts first; stop if one fails"
    )
    # metavars are printed as written, help texts %-formatted: one % there, %% here.
    fleet.add_argument("--batch", metavar="N|P%", help="rolling batches of N hosts (or P%%)")
    fleet.add_argument(
        "--max-fail", metavar="N|P%", help="stop starting hosts after N failures (or P%% of them)"
    )
    p.add_argument("--report", metavar="FILE", help="also write the JSON document to FILE")
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="journal/backup dir on the target (default: <prefix>/.vpatch)",
    )
    json_option(p)


def _pod_options(p: argparse.ArgumentParser) -> None:
    """--kubectl NS -l SELECTOR: targets from a namespace's pod list (pod_targets); only the
    commands that write nothing take them, so a selector never patches a deployment at once."""
    kube = p.add_argument_group("kubernetes (read-only: status, verify, diff)")
    kube.add_argument(
        "--kubectl",
        metavar="NAMESPACE",
        help="every running pod of NAMESPACE that --selector picks, each through `kubectl "
        "exec -i` (this machine's kubectl and kubeconfig)",
    )
    kube.add_argument(
        "-l", "--selector", metavar="SELECTOR", help="label selector of --kubectl, e.g. app=vllm"
    )
    kube.add_argument(
        "--kube-container", metavar="NAME", help="the container in each pod (default: its first)"
    )
    kube.add_argument("--kube-context", metavar="NAME", help="kubeconfig context of --kubectl")


LEVEL_HELP = (
    "static: hashes+anchors; import: also import in a fresh python -I; full: also probes "
    "(default: full)"
)
ENSURE_LEVEL_HELP = (
    "default: static (journal + hashes) when nothing is written, full after a write; given: "
    "that level after a write AND for specs already in place"
)


def level_option(
    p: argparse.ArgumentParser, help: str = LEVEL_HELP, default: str | None = "full"
) -> None:
    p.add_argument("--level", choices=["static", "import", "full"], default=default, help=help)


def ensure_level(p: argparse.ArgumentParser) -> None:
    """ensure's, exec's and hook's --level: none given is not the same as any level."""
    level_option(p, ENSURE_LEVEL_HELP, None)


def wheelhouse_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wheelhouse",
        action="append",
        default=[],
        metavar="DIR|FILE",
        help="take release wheels from this directory or wheel file before asking pip (no "
        "network; repeatable; also $VPATCH_WHEELHOUSE)",
    )
    p.add_argument(
        "--refresh",
        action="store_true",
        help="read the package indexes' project pages again (vpatch keeps them: a warm run "
        "asks no index for 10 minutes, then one conditional request per index)",
    )


def platform_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        metavar="TAG",
        help="wheel platform tag for pip (repeatable; default: this machine's)",
    )


def flag_target(args: argparse.Namespace) -> Callable[[str], Target]:
    from patcher.inventory.targets import Target
    from patcher.transports.ssh import parse_target

    def make(spec: str) -> Target:
        if spec == "local":
            if args.sudo:  # never dropped silently: the local target runs as vpatch does
                raise UsageError(
                    "--sudo does not apply to the local target", "run vpatch itself with sudo"
                )
            return Target("local", "local", python=args.python or "python3", local=True)
        if spec.startswith(("podman://", "docker://")):
            return _container_target(spec, args)
        if spec.startswith("kubectl://"):
            return _pod_target(spec, args)
        user, host, port = parse_target(spec)
        share = False if args.no_share else None
        return Target(
            spec, host, user, port, args.python or "python3", args.identity, args.sudo, share=share
        )

    return make


def _container_target(spec: str, args: argparse.Namespace) -> Target:
    """`--host ENGINE://[[user@]host[:port]/]NAME`: a running container, of this machine's
    engine or of the engine on an SSH host (patcher.transports.container)."""
    from patcher.inventory.targets import Target
    from patcher.transports import container
    from patcher.transports.ssh import parse_target

    engine, rest = spec.split("://", 1)
    where, _, name = rest.rpartition("/")
    problem = container.name_problem(name)
    if problem:
        raise UsageError(f"--host {spec!r}: {problem}", "e.g. --host docker://vllm")
    if args.sudo and not where:  # as for `--host local`: never dropped silently
        raise UsageError(
            f"--sudo does not apply to {spec}: its engine runs here, as vpatch does",
            "run vpatch itself with sudo, or name the container's exec user in an inventory",
        )
    user, host, port = parse_target(where) if where else (None, "local", None)
    return Target(
        spec, host, user, port, args.python or "python3", args.identity, args.sudo,
        local=not where, transport=engine, container=name,
    )  # fmt: skip


def _pod_target(spec: str, args: argparse.Namespace) -> Target:
    """`--host kubectl://NAMESPACE/POD[/CONTAINER]`: a pod's container through this machine's
    kubectl (its kubeconfig and current context; an inventory names others)."""
    from patcher.inventory.targets import Target
    from patcher.transports import kubectl

    parts = spec.removeprefix("kubectl://").split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise UsageError(
            f"--host {spec!r}: not kubectl://NAMESPACE/POD[/CONTAINER]",
            "e.g. --host kubectl://serve/vllm-0/server",
        )
    pod, name = "/".join(parts[:2]), parts[2] if len(parts) == 3 else None
    problem = kubectl.pod_problem(pod)
    problem = problem or (kubectl.word_problem("container_name", name) if name else None)
    if problem or args.sudo:
        raise UsageError(
            f"--host {spec!r}: {problem or '--sudo does not apply: kubectl runs here'}",
            kubectl.POD_HINT,
        )
    return Target(
        spec, "local", python=args.python or "python3", local=True, transport="kubectl",
        container=pod, container_name=name,
    )  # fmt: skip


def targets(args: argparse.Namespace) -> list[Target]:
    """Validated up front, so a typo in the 5th --host fails before the 1st is contacted."""
    return chosen(args)[0]


def chosen(args: argparse.Namespace) -> tuple[list[Target], int | None]:
    """(the targets, the inventory's `[defaults] control`: None without one), the inventory
    read once."""
    if args.parallel < 1:
        raise UsageError("--parallel must be at least 1", "e.g. --parallel 16")
    for flag in ("timeout", "connect_timeout"):
        value = getattr(args, flag)
        if not 0 < value < 1e6:  # also refuses nan and inf (a call that can never time out)
            name = "--" + flag.replace("_", "-")
            raise UsageError(
                f"{name} {value:g}: must be a positive number of seconds", f"e.g. {name} 30"
            )
    for name in ("ssh_config", "identity", "inventory"):
        value = getattr(args, name)
        if value and not os.path.isfile(value):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} {value}: no such file", f"pass an existing file to {flag}")
    listed = _listed(args)
    if listed is not None:
        return listed, None
    from patcher.inventory.targets import load_inventory, select

    inv = None
    if args.inventory:
        flags = {"python": args.python, "identity": args.identity, "sudo": args.sudo or None}
        flags["share"] = False if args.no_share else None
        inv = load_inventory(args.inventory, flags, getattr(args, "trust_inventory", False))
    found = select(inv, args.host, args.group, flag_target(args))
    from patcher.transports import sshnames

    # Each SSH client the run will use, asked once: a host's own `transport`, else the flag's
    # (ray's nodes come from --ray and are checked there).
    asked: set[str] = set()
    for t in found:
        client = t.transport or args.ssh_client
        if t.local or t.container is not None or client in asked or client == "ray":
            continue
        asked.add(client)
        problem = sshnames.client_problem(client, _add_fabric)
        if problem and t.transport is not None:  # the inventory's choice: name the host
            what = f"host {t.name}: transport = {client!r}: fabric/paramiko is not installed"
            problem = (what, problem[1])
        if problem:
            raise UsageError(*problem)
    return found, inv.control if inv is not None else None


def _add_fabric() -> str:
    """The command that adds the paramiko extra to vpatch's environment (asked only when
    --ssh-client paramiko finds it missing)."""
    from patcher.commands import _installhint

    return _installhint.add_to_vpatch("fabric")


def _listed(args: argparse.Namespace) -> list[Target] | None:
    """The targets a cluster lists (--ray's nodes, --kubectl's pods); None: neither given."""
    if args.ray or args.ray_python_map:
        return ray_targets(args)
    if getattr(args, "kubectl", None) or getattr(args, "selector", None):
        return pod_targets(args)
    return None


def pod_targets(args: argparse.Namespace) -> list[Target]:
    """--kubectl NS -l SELECTOR: every running pod it picks (patcher.inventory.kubepods);
    the pods left out are named on stderr, and none running is a usage error."""
    from patcher.inventory import kubepods
    from patcher.output import progress

    clash = [f for f, v in (("--host", args.host), ("--inventory", args.inventory),
                            ("--group", args.group), ("--sudo", args.sudo)) if v]  # fmt: skip
    if not args.kubectl or not args.selector or clash:
        raise UsageError(
            f"--kubectl cannot be combined with {', '.join(clash)}"
            if clash
            else "--kubectl and --selector go together",
            "e.g. --kubectl serve -l app=vllm (every running pod of that label)",
        )
    name = args.kube_container
    problem = kubectl_problem(name) if name else None
    if problem:
        raise UsageError(f"--kube-container {name!r}: {problem}", "e.g. --kube-container server")
    doc = kubepods.listing(args.kubectl, args.selector, args.kube_context, args.connect_timeout)
    found = kubepods.pods(doc, args.python or "python3", name, args.kube_context)
    for pod, why in found.skipped:
        progress.say(f"--kubectl: pod {pod} left out ({why})")
    if not found.targets:
        raise UsageError(
            f"--kubectl {args.kubectl} -l {args.selector}: no running pod",
            f"`kubectl get pods -n {args.kubectl} -l {args.selector}` lists them",
        )
    return found.targets


def kubectl_problem(name: str) -> str | None:
    from patcher.transports import kubectl

    return kubectl.word_problem("container_name", name)


def ray_targets(args: argparse.Namespace) -> list[Target]:
    """--ray: every alive node of the cluster (patcher.ray_transport, the only module that
    imports ray). Conflicting target flags are refused before the cluster is contacted."""
    if not args.ray:
        raise UsageError("--ray-python-map needs --ray ADDRESS", "e.g. --ray auto")
    given = {
        "--host": args.host,
        "--inventory": args.inventory,
        "--group": args.group,
        "--sudo": args.sudo,
        "--ssh-config": args.ssh_config,
        "--identity": args.identity,
    }
    clash = [flag for flag, value in given.items() if value]
    if clash:
        raise UsageError(
            f"--ray cannot be combined with {', '.join(clash)}",
            "--ray runs on every alive node of the cluster; --python or --ray-python-map "
            "picks each node's interpreter",
        )
    from patcher.inventory.targets import Target
    from patcher.transports.ray import load_python_map, nodes

    pymap = load_python_map(args.ray_python_map) if args.ray_python_map else {}
    cluster = nodes(args.ray, args.python, pymap, args.connect_timeout)
    # the run's transports reach the nodes through this listing (Settings.ray)
    args.transport_settings = settings(args)._replace(ray=cluster)
    return [
        Target(
            n.target,
            f"ray:{n.node_id}",
            python=n.python or "",
            restart=n.restart,
            health=n.health,
            metrics=n.metrics,
        )
        for n in cluster.nodes
    ]


def open_target(target: Target, args: argparse.Namespace) -> Transport:
    """The target's transport, chosen by `transports.open_transport` from these options; -v
    names its kind (the host's own, an inventory's `transport`, or the run's)."""
    from patcher.output import progress
    from patcher.transports import open_transport

    progress.detail(f"{target.name}: transport: {kind_of(target, args)}")
    return open_transport(target, settings(args))


def kind_of(target: Target, args: argparse.Namespace) -> str:
    """The transport kind that reaches `target` under this run's options (the host's own,
    else the run's): what -v says and each host's result names (`transport`)."""
    from patcher.transports import kind_for

    return kind_for(target, settings(args))


def name_transports(
    hosts: Sequence[HostResult], targets: Sequence[Target], args: argparse.Namespace
) -> None:
    """Say in every host's result which transport reached it (or was tried): the JSON's
    `transport`, so a mixed fleet's results show which hosts went by which client; and
    whether its patches are `ephemeral` (a container's)."""
    from patcher.transports import CONTAINER_KINDS

    kinds = {t.name: kind_of(t, args) for t in targets}
    for host in hosts:
        host.transport = kinds.get(host.target, host.transport)
        host.ephemeral = host.transport in CONTAINER_KINDS and host.env_mounted is not True


def settings(args: argparse.Namespace) -> Settings:
    """The run's transport settings, made once per command run (kept on its `args`): every
    host's transport shares them, the answer budget included."""
    made: Settings | None = getattr(args, "transport_settings", None)
    if made is None:
        from patcher.transports import Settings
        from patcher.transports.answers import Budget

        made = args.transport_settings = Settings(
            kind="ray" if args.ray else args.ssh_client,
            ssh_config=args.ssh_config,
            known_hosts=args.known_hosts,
            accept_new_host_key=args.accept_new_host_key,
            connect_timeout=args.connect_timeout,
            call_timeout=args.timeout,
            trusted_python=args.trusted_python,
            run_as=_run_as(args.run_as, args.ray),
            budget=Budget(),
            keep_agent=not args.no_keep_agent,
            say_master=getattr(args, "verbose", 0) > 0,
        )
    return made


def _run_as(name: str, ray: bool) -> str:
    """--run-as USER as the host will read it: a user name (as useradd accepts) or a uid;
    anything else is refused here, before any host is contacted (exit 2), and so is --ray
    with it (the Ray task starts the agent by an argv of its own that does not carry it)."""
    import re

    if name and ray:
        raise UsageError("--run-as is not passed to agents started through --ray", "drop --ray")
    if name and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?|[0-9]{1,10}", name):
        raise UsageError(
            f"--run-as {name!r} is not a user name or uid",
            "e.g. --run-as svc-vllm, or --run-as 1001",
        )
    return name


def policy(args: argparse.Namespace, total: int) -> fleet.Policy:
    from patcher.run import fleet

    return fleet.Policy(
        parallel=args.parallel,
        canary=fleet.parse_count("--canary", args.canary, total),
        batch=fleet.parse_count("--batch", args.batch, total),
        max_fail=fleet.parse_count("--max-fail", args.max_fail, total),
    )


def _start_early(
    targets: list[Target], args: argparse.Namespace, policy: fleet.Policy
) -> dict[int, Transport | HostError]:
    """Open the first wave's transports and start their sessions (transports.start): the
    SSH handshakes and remote interpreters run while this process loads the specs. A host
    that cannot even be opened keeps its error for its turn."""
    from patcher import transports
    from patcher.run import fleet

    out: dict[int, Transport | HostError] = {}
    for i in fleet.first_wave(policy, len(targets)):
        try:
            transport = out[i] = open_target(targets[i], args)
            transports.start(transport)
        except HostError as exc:
            out[i] = exc
    return out


def _close_early(early: dict[int, Transport | HostError]) -> None:
    for t in early.values():
        if not isinstance(t, HostError):
            t.close()


def metrics_profile_option(p: argparse._ActionsContainer) -> None:
    """`--metrics-profile ENGINE` (verify --metrics, rollout): its choices are the counter
    model's profiles (serving.model.PROFILES), so a new engine's profile is one row there."""
    from patcher.serving.model import PROFILES

    names = sorted(PROFILES)
    p.add_argument(
        "--metrics-profile",
        metavar="ENGINE",
        choices=names,
        help=f"whose counter names the endpoints serve: {', '.join(names)} (default: vllm)",
    )
