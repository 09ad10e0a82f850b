"""`--inventory` given an Ansible inventory (INI or YAML) instead of a hosts.toml.

A fleet that already has an Ansible inventory should not need a second list of the same hosts.
With `ansible-inventory` on PATH vpatch asks it (`ansible-inventory -i FILE --list`: every
format and plugin Ansible knows, group_vars/host_vars next to the file, variables resolved as
Ansible resolves them). Without it, a subset is read here:

    INI    `[group]` host lines `NAME key=value...`, `[group:vars]`, `[group:children]`, hosts
           before any section (ungrouped); no host ranges (`web[01:20]`)
    YAML   `all:` (or any group) with `hosts:` (name -> vars), `vars:` and `children:`

Variables, the rest ignored (vpatch needs no more to reach a host):

    ansible_host                    address (default: the inventory name)
    ansible_port                    port
    ansible_user                    user
    ansible_python_interpreter      python (the environment to patch)
    ansible_become                  sudo (become_method sudo, as `--sudo`)
    ansible_ssh_private_key_file    identity
    vpatch_restart                  restart (`vpatch rollout`'s restart command)
    vpatch_health_url               health (its --health URL for this host)
    vpatch_metrics_url              metrics (its --metrics URL for this host)

Groups are every group a host is in, directly or through `children`, except `all` and
`ungrouped`; hosts keep the order in which the file names them first.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from patcher.errors import SpecError

HINT = (
    "an Ansible inventory (INI or YAML; docs/inventory.md lists what vpatch reads without "
    "ansible-inventory), or a hosts.toml"
)
_VARS = {
    "ansible_host": "address",
    "ansible_port": "port",
    "ansible_user": "user",
    "ansible_python_interpreter": "python",
    "ansible_become": "sudo",
    "ansible_ssh_private_key_file": "identity",
    "vpatch_restart": "restart",
    "vpatch_health_url": "health",
    "vpatch_metrics_url": "metrics",
}
_SKIP_GROUPS = {"all", "ungrouped"}


class _Tree:
    """Groups (direct hosts, children, vars) and host vars, in file order."""

    def __init__(self) -> None:
        self.hosts: dict[str, dict[str, Any]] = {}  # name -> its own vars
        self.groups: dict[str, tuple[list[str], list[str], dict[str, Any]]] = {}

    def group(self, name: str) -> tuple[list[str], list[str], dict[str, Any]]:
        return self.groups.setdefault(name, ([], [], {}))

    def add_host(self, group: str, name: str, values: dict[str, Any]) -> None:
        self.hosts.setdefault(name, {}).update(values)
        members = self.group(group)[0]
        if name not in members:
            members.append(name)

    def members(self, group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        """Hosts of `group` and of its children, recursively (a cycle is not followed)."""
        hosts, children, _ = self.groups.get(group, ([], [], {}))
        out = list(hosts)
        for child in children:
            if child not in seen:
                out += [h for h in self.members(child, seen | {group}) if h not in out]
        return out

    def depth(self, group: str) -> int:
        """How deep a group sits under `all`: a child's vars win over its parent's."""
        parents = [g for g, (_, children, _) in self.groups.items() if group in children]
        return 1 + max((self.depth(p) for p in parents if p != group), default=0)


def _ini(text: str, path: str) -> _Tree:
    tree = _Tree()
    section, kind = "ungrouped", "hosts"
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section, _, kind = line[1:-1].strip().partition(":")
            kind = kind or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise SpecError(f"{path}:{n}: unknown section kind {kind!r}", HINT)
            tree.group(section)
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise SpecError(f"{path}:{n}: {exc}", HINT) from None
        if kind == "children":
            tree.group(section)[1].append(words[0])
            tree.group(words[0])
            continue
        pairs = words if kind == "vars" else words[1:]
        values = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep:
                raise SpecError(f"{path}:{n}: {pair!r} is not key=value", HINT)
            values[key.strip()] = value.strip()
        if kind == "vars":
            tree.group(section)[2].update(values)
        elif "[" in words[0] and ":" in words[0]:
            raise SpecError(
                f"{path}:{n}: host range {words[0]!r} needs ansible-inventory on PATH", HINT
            )
        else:
            tree.add_host(section, words[0], values)
    return tree


def _yaml(data: Any, path: str) -> _Tree:
    tree = _Tree()

    def group(name: str, body: Any) -> None:
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise SpecError(f"{path}: group {name!r} is not a mapping", HINT)
        tree.group(name)
        for host, values in (body.get("hosts") or {}).items():
            tree.add_host(name, str(host), dict(values or {}))
        tree.group(name)[2].update(body.get("vars") or {})
        for child, child_body in (body.get("children") or {}).items():
            if child not in tree.group(name)[1]:
                tree.group(name)[1].append(str(child))
            group(str(child), child_body)

    if not isinstance(data, dict):
        raise SpecError(f"{path}: a YAML inventory is a mapping of groups (e.g. all:)", HINT)
    for name, body in data.items():
        group(str(name), body)
    return tree


def _ansible_inventory(exe: str, path: str) -> _Tree:
    """What `ansible-inventory --list` resolves (variables already merged per host)."""
    done = subprocess.run(
        [exe, "-i", path, "--list"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]
        raise SpecError(f"{path}: ansible-inventory cannot read it: {why}", HINT)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        raise SpecError(f"{path}: ansible-inventory printed no JSON", HINT) from None
    tree = _Tree()
    hostvars = doc.get("_meta", {}).get("hostvars", {})
    for name, body in doc.items():
        if name == "_meta" or not isinstance(body, dict):
            continue
        tree.group(name)[1].extend(body.get("children", []))
        for host in body.get("hosts", []):
            tree.add_host(name, host, {})
    order = tree.members("all") + [h for h in tree.hosts if h not in tree.members("all")]
    tree.hosts = {h: dict(hostvars.get(h, {})) for h in order}
    return tree


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def hosts(path: str, text: str) -> list[dict[str, Any]]:
    """The inventory's hosts as hosts.toml `[[host]]` tables (validated by the caller)."""
    exe = shutil.which("ansible-inventory")
    if exe is not None:
        tree = _ansible_inventory(exe, path)
        merged = tree.hosts  # ansible-inventory merged group vars already
    else:
        tree = _parse(path, text)
        merged = {}
        for host, own in tree.hosts.items():
            values: dict[str, Any] = dict(tree.group("all")[2])
            mine = [g for g in tree.groups if g != "all" and host in tree.members(g)]
            for g in sorted(mine, key=tree.depth):
                values.update(tree.groups[g][2])
            merged[host] = values | own
    out = []
    for name, values in merged.items():
        entry: dict[str, Any] = {"name": name, "address": name}
        for var, fieldname in _VARS.items():
            if var in values:
                value = values[var]
                if fieldname == "sudo":
                    value = _truthy(value)
                elif fieldname == "port":
                    value = int(value) if str(value).isdigit() else value
                entry[fieldname] = value
        entry["groups"] = [
            g for g in tree.groups if g not in _SKIP_GROUPS and name in tree.members(g)
        ]
        out.append(entry)
    return out


def _parse(path: str, text: str) -> _Tree:
    """INI or YAML (the subset in the module docstring)."""
    stripped = [ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip()[0] not in "#;"]
    if (stripped and stripped[0].startswith("[")) or Path(path).suffix == ".ini":
        return _ini(text, path)
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return _ini_or_raise(text, path, exc)
    if isinstance(data, dict):
        return _yaml(data, path)
    return _ini(text, path)


def _ini_or_raise(text: str, path: str, exc: Exception) -> _Tree:
    try:
        return _ini(text, path)
    except SpecError:
        raise SpecError(f"{path}: neither an INI nor a YAML inventory ({exc})", HINT) from None
