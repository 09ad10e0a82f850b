"""Targets: where a command runs. From `--host` flags or a TOML inventory of a fleet.

An inventory has an optional `[defaults]` table and one `[[host]]` table per host; a host's own
fields win over `[defaults]`, which win over command-line flags, which win over built-in
defaults. Hosts keep inventory order, so reports read the same way every run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from patcher._compat import tomllib
from patcher.errors import SpecError, UsageError
from patcher.transports import CONTAINER_KINDS, KINDS, sshnames


class Target(NamedTuple):
    """One host to run on; `name` labels it in reports and JSON. (A NamedTuple, as the
    other values read before the first host connects: dataclasses costs its import.)"""

    name: str
    address: str  # what ssh connects to; "local" (with local=True) for this machine
    user: str | None = None
    port: int | None = None
    python: str = "python3"
    identity: str | None = None
    sudo: bool = False
    # `vpatch rollout`: this host's restart command and health/metrics URLs (over the flags').
    restart: str | None = None
    health: str | None = None
    metrics: str | None = None
    sudo_user: str | None = None  # `sudo -n -u USER` (None: root)
    # This machine, no SSH: only when written so (`--host local`, `address = "local"`,
    # ansible_connection=local), never because a host is NAMED local.
    local: bool = False
    # False: this host's SSH connection is not shared with later commands (`--no-share`,
    # `share = false`; patcher.transports.share); None: shared, the default.
    share: bool | None = None
    # The transport kind that reaches this host (a name in patcher.transports.KINDS: the
    # inventory's `transport = ...`); None: the run's (--ssh-client, --ray, or auto).
    transport: str | None = None
    # A running container on this host (address "local": this machine), reached by its
    # engine's kind (`transport = "podman"` or "docker"): patcher.transports.container; or a
    # pod, `NS/NAME` (`pod = ...`, kind kubectl): patcher.transports.kubectl.
    container: str | None = None
    container_user: str | None = None  # `exec --user` there; None: the image's own user
    container_name: str | None = None  # the pod's container (`kubectl exec -c`)
    kube_context: str | None = None  # `kubectl --context`; None: the kubeconfig's current
    kubeconfig: str | None = None  # `kubectl --kubeconfig`; None: kubectl's own


class Inventory(NamedTuple):
    hosts: list[tuple[Target, frozenset[str]]]
    control: int | None = None  # hosts.toml's `[defaults] control`: the rollout's control hosts

    def names(self) -> list[str]:
        return [t.name for t, _ in self.hosts]


_FIELDS: dict[str, type] = {
    "user": str,
    "port": int,
    "python": str,
    "identity": str,
    "sudo": bool,
    "sudo_user": str,
    "share": bool,
    "transport": str,
    "container": str,
    "container_user": str,
    "pod": str,
    "container_name": str,
    "kube_context": str,
    "kubeconfig": str,
}
_FIELDS |= {"restart": str, "health": str, "metrics": tuple}  # rollout (patcher/rollout/walk.py)
# [defaults] only: `vpatch rollout`'s control hosts (--control K wins; patcher/rollout/settings.py).
_DEFAULTS_ONLY: dict[str, type] = {"control": int}
_HOST_FIELDS = {"name": str, "address": str, "groups": list, **_FIELDS}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@\[\]-]{0,199}$")
_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}
_HINT = (
    "an inventory has [defaults] (user, port, python, identity, sudo, sudo_user, share, "
    "transport, container, container_user, pod, container_name, kube_context, kubeconfig; "
    "for rollout restart, health, metrics, control) and "
    "[[host]] tables with name, address and optional groups"
)


class _Invalid(Exception):
    """Where (a path of keys and indices) and what is wrong in an inventory."""

    def __init__(self, loc: tuple[int | str, ...], msg: str, hint: str = "") -> None:
        super().__init__(msg)
        self.loc, self.msg, self.hint = loc, msg, hint


def load_inventory(path: str, flags: dict[str, Any], trust: bool = False) -> Inventory:
    """Parse and validate; `flags` are the command line's values (None = not given). A file
    that is not a hosts.toml is read as an Ansible inventory (patcher.inventory.ansible). The
    file, an Ansible inventory's vars directories and the identities it names are refused when
    someone else could have written them (patcher.inventory.owners), unless `trust`
    (--trust-inventory)."""
    from patcher.inventory import owners

    try:
        text = owners.read(path, trust)
    except OSError as exc:
        raise SpecError(
            f"{path}: cannot read inventory ({exc.strerror})", "pass a hosts.toml"
        ) from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}", "fix the TOML syntax") from None
    data = _toml(path, text)
    local: list[bool] | None = None  # from the Ansible reader: ansible_connection=local only
    if data is None:
        from patcher.inventory import ansible

        owners.check_vars(path, trust)
        entries = ansible.hosts(path, text)
        local = [bool(e.pop("local")) for e in entries]
        data = {"host": entries}
    try:
        defaults, hosts = _validate(data)
        control = defaults.pop("control", None)
    except _Invalid as exc:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.loc).lstrip(".")
        # A hosts.toml's problem where it is written, `FILE:LINE:COL:` as `vpatch check` says a
        # spec's (editors jump there); an Ansible inventory's fields are not where TOML says.
        from patcher.specs import tomlpos  # positions are for errors: not on every run's path

        at = f":{':'.join(map(str, tomlpos.locate(text, where)))}" if local is None else ""
        hint = exc.hint or _HINT
        raise SpecError(f"{path}{at}: {where or '(top level)'}: {exc.msg}", hint) from None
    if local is None:  # a hosts.toml: the local target is written `address = "local"`
        local = [h["address"] == "local" for h in hosts]
    owners.check_identities(path, [defaults, *hosts], trust)
    out = []
    for h, here in zip(hosts, local, strict=True):
        kind, box = _box(path, h, defaults, flags)
        if kind == "local":  # `transport = "local"`: this machine, as `address = "local"` is
            here = True
        elif (
            here and h.get("transport") is not None and box is None
        ):  # [defaults]' is for the others
            raise SpecError(
                f"{path}: host {h['name']!r}: transport {kind!r} on the local target",
                'this machine is reached without SSH: drop `transport`, or `address = "local"`',
            )
        sudo = bool(_pick("sudo", h, defaults, flags))
        target = Target(
            name=h["name"],
            address=h["address"],
            user=_pick("user", h, defaults, flags),
            port=_pick("port", h, defaults, flags),
            python=_pick("python", h, defaults, flags) or "python3",
            identity=_pick("identity", h, defaults, flags),
            sudo=sudo,
            restart=_pick("restart", h, defaults, flags),
            health=_pick("health", h, defaults, flags),
            metrics=_pick("metrics", h, defaults, flags),
            sudo_user=_pick("sudo_user", h, defaults, flags) if sudo else None,
            local=here,
            share=_pick("share", h, defaults, flags),
            transport=kind if box is not None or not here else None,
            container=box,
            container_user=_pick("container_user", h, defaults, flags),
            container_name=_pick("container_name", h, defaults, flags),
            kube_context=_pick("kube_context", h, defaults, flags),
            kubeconfig=_pick("kubeconfig", h, defaults, flags),
        )
        if here and sudo:
            raise SpecError(
                f"{path}: host {h['name']!r}: sudo on the local target is not supported",
                "run vpatch itself as the environment's owner (e.g. `sudo -u OWNER vpatch ...`)",
            )
        out.append((target, frozenset(h["groups"])))
    return Inventory(out, control)


def _box(
    path: str, h: dict[str, Any], defaults: dict[str, Any], flags: dict[str, Any]
) -> tuple[str | None, str | None]:
    """(the host's transport kind, its container or pod): `pod = "NS/NAME"` is a container
    reached by kind kubectl, named so without `transport`."""
    kind = _pick("transport", h, defaults, flags)
    box = _pick("container", h, defaults, flags)
    pod = _pick("pod", h, defaults, flags)
    if pod is not None:
        if box is not None or kind not in (None, "kubectl"):
            what = f"container {box!r}" if box is not None else f"transport {kind!r}"
            raise SpecError(
                f"{path}: host {h['name']!r}: pod {pod!r} with {what}",
                "a pod is reached by kubectl: drop `container`/`transport` (or write "
                '`transport = "kubectl"`)',
            )
        kind, box = "kubectl", pod
    _check_container(path, h["name"], kind, box)
    return kind, box


def _check_container(path: str, name: str, kind: str | None, box: str | None) -> None:
    """A container is reached by its engine's kind, and an engine's kind reaches only a
    container: either without the other is refused (the inventory's own mistake, exit 2)."""
    if box is not None and kind not in CONTAINER_KINDS:
        raise SpecError(
            f"{path}: host {name!r}: container {box!r} without its engine",
            'add `transport = "podman"` or `transport = "docker"` (the engine that runs it)',
        )
    if box is None and kind in CONTAINER_KINDS:
        raise SpecError(
            f"{path}: host {name!r}: transport {kind!r} names no container",
            'add `pod = "NAMESPACE/NAME"` (the running pod to patch)'
            if kind == "kubectl"
            else 'add `container = "NAME"` (the running container to patch)',
        )


def _validate(data: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """([defaults], [[host]] tables) checked and normalised: known keys only, each of its
    type, names unique; ssh-facing strings as transports.sshnames accepts them. Plain code, not a
    model: an inventory is read before the first host is contacted, on every run."""
    _only(data, {"defaults", "host"}, ())
    defaults = _table(data.get("defaults", {}), _FIELDS | _DEFAULTS_ONLY, ("defaults",))
    if defaults.get("transport") == "local":  # every host this machine: never by default
        raise _Invalid(
            ("defaults", "transport"),
            "transport 'local' is one host's (this machine), not every host's",
            'write it in that host\'s [[host]] table, or `address = "local"`',
        )
    hosts = data.get("host")
    if hosts is None:
        raise _Invalid(("host",), "Field required")
    if not isinstance(hosts, list):
        raise _Invalid(("host",), "Input should be a valid list")
    if not hosts:
        raise _Invalid(("host",), "List should have at least 1 item after validation, not 0")
    out, seen = [], set()
    for i, raw in enumerate(hosts):
        loc: tuple[int | str, ...] = ("host", i)
        host = _table(raw, _HOST_FIELDS, loc)
        for key in ("name", "address"):
            if key not in host:
                raise _Invalid((*loc, key), "Field required")
        if not _NAME.fullmatch(host["name"]):
            raise _Invalid((*loc, "name"), "name must be letters, digits and . _ - : @ (no spaces)")
        problem = sshnames.host_problem(host["address"])
        if problem:  # checked like a --host: `ssh -G` may hand it to `Match exec` commands
            raise _Invalid((*loc, "address"), f"host name {problem}")
        groups = host.setdefault("groups", [])
        for j, g in enumerate(groups):
            if not isinstance(g, str):
                raise _Invalid((*loc, "groups", j), "Input should be a valid string")
        if host["name"] in seen:
            raise _Invalid((*loc, "name"), f"host name {host['name']!r} appears twice")
        seen.add(host["name"])
        out.append(host)
    return defaults, out


def _only(table: dict[str, Any], keys: Iterable[str], loc: tuple[int | str, ...]) -> None:
    for key in table:
        if key not in keys:
            raise _Invalid((*loc, key), "Extra inputs are not permitted")


def _table(raw: Any, fields: dict[str, type], loc: tuple[int | str, ...]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _Invalid(loc, "Input should be a valid dictionary")
    _only(raw, fields, loc)
    return {key: _value(value, fields[key], (*loc, key)) for key, value in raw.items()}


def _text(value: Any, name: str | int, loc: tuple[int | str, ...]) -> str:
    """A string field, checked as what it names (a user, a container, a transport kind)."""
    if not isinstance(value, str):
        raise _Invalid(loc, "Input should be a valid string")
    problem = sshnames.user_problem(value) if name in ("user", "sudo_user") else None
    if problem:
        raise _Invalid(loc, f"user name {problem}")
    if name in ("pod", "container_name", "kube_context"):
        from patcher.transports import kubectl

        problem = kubectl.pod_problem(value) if name == "pod" else kubectl.word_problem(name, value)
        if problem:
            raise _Invalid(loc, problem, kubectl.POD_HINT)
    if name == "kubeconfig" and value.startswith("-"):
        raise _Invalid(loc, f"{value!r} is not a file name", "a kubeconfig is a file's path")
    if name in ("container", "container_user"):
        from patcher.transports import container

        check = container.name_problem if name == "container" else container.user_problem
        problem = check(value)
        if problem:
            raise _Invalid(loc, problem, container.NAME_HINT)
    if name == "transport" and value not in KINDS:
        from patcher import suggest  # difflib: only for the error

        close = suggest.did_you_mean(value, KINDS, '"{}"')
        known = f"a transport is one of: {', '.join(KINDS)}"
        raise _Invalid(loc, f"unknown transport {value!r}", f"{close} {known}".lstrip())
    return value


def _value(value: Any, kind: type, loc: tuple[int | str, ...]) -> Any:
    """One field's value as its type (TOML's own types; numbers and booleans also as the
    strings an Ansible inventory gives them)."""
    name = loc[-1]
    if kind is str:
        return _text(value, name, loc)
    if kind is tuple:  # one URL, or several (`metrics = [URL, ...]`: one host's endpoints)
        urls = value if isinstance(value, list) else [value]
        if not urls or not all(isinstance(u, str) and len(u.split()) == 1 for u in urls):
            raise _Invalid(loc, "Input should be a URL (no spaces) or a list of them")
        return " ".join(urls)
    if kind is list:
        if not isinstance(value, list):
            raise _Invalid(loc, "Input should be a valid list")
        return list(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower() if isinstance(value, (str, int)) else None
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise _Invalid(loc, "Input should be a valid boolean")
    number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    if number is None:
        raise _Invalid(loc, "Input should be a valid integer")
    if not 1 <= number <= 65535:  # a port, or [defaults] control (hosts)
        raise _Invalid(loc, "Input should be between 1 and 65535")
    return number


def _toml(path: str, text: str) -> dict[str, Any] | None:
    """The hosts.toml data; None when the file is not one (no .toml name, and not TOML with a
    [[host]] or [defaults] table): then it is an Ansible inventory."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        if not path.endswith(".toml"):
            return None
        from patcher.specs import tomlpos

        line_col = tomlpos.error_position(str(exc))
        at = f":{line_col[0]}:{line_col[1]}" if line_col else ""
        raise SpecError(f"{path}{at}: invalid TOML: {exc}", "fix the TOML syntax") from None
    if path.endswith(".toml") or "host" in data or "defaults" in data:
        return data
    return None


def _pick(field: str, host: dict[str, Any], defaults: dict[str, Any], flags: dict[str, Any]) -> Any:
    for value in (host.get(field), defaults.get(field), flags.get(field)):
        if value is not None:
            return value
    return None


def select(
    inventory: Inventory | None,
    hosts: list[str],
    groups: list[str],
    flag_target: Any,
) -> list[Target]:
    """Targets in inventory order: --group selects, --host selects by name or adds a new one."""
    if inventory is None:
        if groups:
            raise UsageError("--group needs --inventory", "pass --inventory hosts.toml")
        return [flag_target(h) for h in hosts or ["local"]]
    known = {t.name: (t, g) for t, g in inventory.hosts}
    all_groups = set().union(*(g for _, g in inventory.hosts))
    for g in groups:
        if g not in all_groups:
            raise UsageError(
                f"--group {g}: no host is in that group", f"groups: {sorted(all_groups)}"
            )
    if not hosts and not groups:
        return [t for t, _ in inventory.hosts]
    chosen = [t for t, g in inventory.hosts if t.name in hosts or g & set(groups)]
    extra = [flag_target(h) for h in hosts if h not in known]
    return chosen + extra
