"""Targets: where a command runs. From `--host` flags or a TOML inventory of a fleet.

An inventory has an optional `[defaults]` table and one `[[host]]` table per host; a host's own
fields win over `[defaults]`, which win over command-line flags, which win over built-in
defaults. Hosts keep inventory order, so reports read the same way every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patcher._compat import tomllib
from patcher.errors import SpecError, UsageError

if TYPE_CHECKING:
    from patcher._inventory_models import _Fields, _Host


@dataclass(frozen=True)
class Target:
    """One host to run on; `name` labels it in reports and JSON."""

    name: str
    address: str  # "local" for this machine
    user: str | None = None
    port: int | None = None
    python: str = "python3"
    identity: str | None = None
    sudo: bool = False

    @property
    def local(self) -> bool:
        return self.address == "local"


@dataclass(frozen=True)
class Inventory:
    hosts: list[tuple[Target, frozenset[str]]]

    def names(self) -> list[str]:
        return [t.name for t, _ in self.hosts]


def _loc(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def load_inventory(path: str, flags: dict[str, Any]) -> Inventory:
    """Parse and validate; `flags` are the command line's values (None = not given). A file
    that is not a hosts.toml is read as an Ansible inventory (patcher.ansible_inventory)."""
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise SpecError(
            f"{path}: cannot read inventory ({exc.strerror})", "pass a hosts.toml"
        ) from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}", "fix the TOML syntax") from None
    # The models (pydantic) only now: a run without --inventory never builds them.
    from pydantic import ValidationError

    from patcher import ansible_inventory
    from patcher._inventory_models import _Inventory

    data = _toml(path, text)
    if data is None:
        data = {"host": ansible_inventory.hosts(path, text)}
    try:
        inv = _Inventory.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SpecError(
            f"{path}: {_loc(tuple(err['loc'])) or '(top level)'}: "
            f"{err['msg'].removeprefix('Value error, ')}",
            "an inventory has [defaults] (user, port, python, identity, sudo) and [[host]] tables "
            "with name, address and optional groups",
        ) from None
    hosts = []
    for h in inv.host:
        target = Target(
            name=h.name,
            address=h.address,
            user=_pick("user", h, inv.defaults, flags),
            port=_pick("port", h, inv.defaults, flags),
            python=_pick("python", h, inv.defaults, flags) or "python3",
            identity=_pick("identity", h, inv.defaults, flags),
            sudo=bool(_pick("sudo", h, inv.defaults, flags)),
        )
        hosts.append((target, frozenset(h.groups)))
    return Inventory(hosts)


def _toml(path: str, text: str) -> dict[str, Any] | None:
    """The hosts.toml data; None when the file is not one (no .toml name, and not TOML with a
    [[host]] or [defaults] table): then it is an Ansible inventory."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        if not path.endswith(".toml"):
            return None
        raise SpecError(f"{path}: invalid TOML: {exc}", "fix the TOML syntax") from None
    if path.endswith(".toml") or "host" in data or "defaults" in data:
        return data
    return None


def _pick(field: str, host: _Host, defaults: _Fields, flags: dict[str, Any]) -> Any:
    for value in (getattr(host, field), getattr(defaults, field), flags.get(field)):
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
