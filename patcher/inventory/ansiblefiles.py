"""Ansible's INI and YAML inventory files read as ansible-core's own `ini` and `yaml` plugins read
them, for patcher.inventory.ansible when `ansible-inventory` is not on PATH.

The rules are the plugins' (checked against `ansible-inventory --list` on ansible-core's own
inventory test targets and the plugins' EXAMPLES: tests/integration/test_ansible_conformance.py):

INI
    `[NAME]`, `[NAME:vars]`, `[NAME:children]`, optionally followed by a `# comment`; anything else
    that starts with `[` and ends with `]` is an error, and `[web] ; comment` is no header at all
    (Ansible reads it as a host line and fails). Hosts before any section are `ungrouped`.
    A host line is split as a shell would (`shlex`, `#` starts a comment): the host pattern, then
    `key=value` tokens, so a value with spaces is quoted (`vpatch_restart="systemctl restart
    vllm"`). A `:vars` line is `key = value` with everything after the first `=` the value, spaces
    and a trailing `# ...` included. Every value, on host lines and in `:vars` alike, goes through
    `ast.literal_eval` as Ansible's `_parse_value` does: `0x8AE` is 2222, `22.0` a float, `True` a
    boolean, `'x'` the string x, `8080 # port` the number 8080 (Python drops the comment), and
    whatever is no Python literal (`true`, `systemctl restart vllm # x`) the text as written.
    A `[G:vars]` or a `[G:children]` entry naming a group the file never declares is an error.
YAML
    Groups (`all:` and below) with `hosts:`, `vars:` and `children:`; a single name where a mapping
    goes (`hosts: web1`) is that name with no value, as the plugin converts it. Host names are
    strings. vpatch refuses what the plugin only warns about and skips (a group that is not a
    mapping, a key other than hosts/vars/children), since skipping it drops hosts in silence.

Groups nest as Ansible nests them: a group no other group holds is a child of `all`, in the order
the file creates groups (`ungrouped` first); a host in `ungrouped` and in another group is only in
the other; a host in no group is in `ungrouped`.
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from typing import Any

from patcher.errors import SpecError
from patcher.inventory import hostrange

HINT = (
    "an Ansible inventory (INI or YAML; docs/inventory.md lists what vpatch reads without "
    "ansible-inventory), or a hosts.toml"
)
QUOTE_HINT = (
    "on an INI host line each variable is one key=value word: quote a value with spaces "
    '(vpatch_restart="systemctl restart vllm"), or set it in a [GROUP:vars] section, where '
    "the rest of the line is the value"
)
# ansible-core's ini plugin's own patterns (plugins/inventory/ini.py, _compile_patterns).
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
_YAML_KEYS = ("vars", "children", "hosts")


class Unsafe(str):
    """Text Ansible never templates (YAML `!unsafe`, an INI bytes literal; ansible-inventory
    prints it as {"__ansible_unsafe": TEXT}): `{{` in it is literal, not a template."""

    __slots__ = ()


class Tree:
    """Groups (direct hosts, child groups, vars) and each host's own vars, in creation order,
    with `all` and `ungrouped` first as in Ansible's InventoryData."""

    def __init__(self) -> None:
        self.hosts: dict[str, dict[str, Any]] = {}  # name -> its own vars
        self.groups: dict[str, tuple[list[str], list[str], dict[str, Any]]] = {}
        self.add_child("all", "ungrouped")

    def group(self, name: str) -> tuple[list[str], list[str], dict[str, Any]]:
        return self.groups.setdefault(name, ([], [], {}))

    def add_host(self, group: str, name: str, values: dict[str, Any]) -> None:
        self.hosts.setdefault(name, {}).update(values)
        members = self.group(group)[0]
        if name not in members:
            members.append(name)

    def add_child(self, parent: str, child: str, where: str = "") -> None:
        """`child` under `parent`; a group under itself or under its own descendant is an
        error, as in Ansible (a loop)."""
        children = self.group(parent)[1]
        self.group(child)
        if child == parent or parent in self.descendants(child):
            raise SpecError(
                f"{where or 'inventory'}: group {child!r} as a child of {parent!r} makes a loop",
                "a group cannot hold itself, directly or through its children",
            )
        if child not in children:
            children.append(child)

    def descendants(self, group: str) -> set[str]:
        out: set[str] = set()
        todo = list(self.groups.get(group, ([], [], {}))[1])
        while todo:
            name = todo.pop()
            if name not in out:
                out.add(name)
                todo += self.groups.get(name, ([], [], {}))[1]
        return out

    def members(self, group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        """Hosts of `group` and of its children, recursively (a cycle is not followed)."""
        hosts, children, _ = self.groups.get(group, ([], [], {}))
        out = list(hosts)
        for child in children:
            if child not in seen:
                out += [h for h in self.members(child, seen | {group}) if h not in out]
        return out

    def order(self) -> list[str]:
        """The hosts in the order `ansible-inventory --list` gives them: `all`'s children in
        turn, each group's own hosts before its children's (patcher.inventory.ansible walks the
        JSON the same way)."""
        out: list[str] = []
        for child in self.groups["all"][1]:  # the JSON lists no host under `all` itself
            out += [h for h in self.members(child, frozenset({"all"})) if h not in out]
        return out

    def depth(self, group: str, seen: frozenset[str] = frozenset()) -> int:
        """Ansible's group depth: `all` is 0, a group 1 more than its deepest parent (a group
        with no parent is a child of `all`); a child's vars win over its parent's."""
        if group == "all":
            return 0
        parents = [
            g
            for g, (_, children, _) in self.groups.items()
            if group in children and g not in seen and g != group
        ]
        return 1 + max((self.depth(p, seen | {group}) for p in parents), default=0)

    def priority(self, group: str) -> int:
        value = self.groups[group][2].get("ansible_group_priority", 1)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise SpecError(
                f"group {group!r}: ansible_group_priority {value!r} is not a number", HINT
            ) from None

    def reconcile(self) -> Tree:
        """Ansible's reconcile_inventory: parentless groups become children of `all`; a host
        listed in `ungrouped` and elsewhere leaves `ungrouped`; a host in no group joins it."""
        held = {c for g, (_, children, _) in self.groups.items() for c in children}
        for name in self.groups:
            if name != "all" and name not in held:
                self.add_child("all", name)
        ungrouped = self.groups["ungrouped"][0]
        for host in self.hosts:
            direct = {g for g, (hosts, _, _) in self.groups.items() if host in hosts}
            if "ungrouped" in direct and direct - {"all", "ungrouped"}:
                ungrouped.remove(host)
            elif not direct - {"all"}:
                ungrouped.append(host)
        return self


def parse_value(text: str) -> Any:
    """An INI value as ansible-core's ini plugin makes it (`_parse_value`): a Python literal
    when `ast.literal_eval` reads one, else the text; tuples and sets become lists, `...` and
    complex numbers their text, bytes decoded."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    except (TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"value {text[:80]!r} cannot be read ({exc})") from None
    return _coerce(value)


def _coerce(value: Any) -> Any:
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_coerce(v) for v in value]
    if isinstance(value, dict):
        return {k: _coerce(v) for k, v in value.items()}
    if value is ...:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return Unsafe(value.decode("utf-8", "surrogateescape"))
    return value


def ini(text: str, path: str) -> Tree:
    """An INI inventory, line by line as the ini plugin's `_parse`."""
    reader = _Ini(path)
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and line[0] not in "#;":
            reader.line(n, line)
    return reader.finish()


class _Ini:
    """The ini plugin's state between lines: the section it is in, the groups declared so
    far, and what waits on a group the file has not declared yet."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tree = Tree()
        self.declared = {"all", "ungrouped"}
        self.vars_at: dict[str, int] = {}  # [G:vars] of a group not (yet) declared -> its line
        self.waiting: dict[str, tuple[int, list[str]]] = {}  # child not yet declared -> parents
        self.section, self.kind = "ungrouped", "hosts"

    def line(self, n: int, line: str) -> None:
        where = f"{self.path}:{n}"
        header = _SECTION.match(line)
        if header:
            self._header(n, header[1], header[2] or "hosts", where)
        elif line.startswith("[") and (line.endswith("]") or re.match(r"^\[[^\]]*\]\s*;", line)):
            raise SpecError(
                f"{where}: {line!r} is no section header as Ansible reads them",
                "a header is [NAME], [NAME:vars] or [NAME:children], no spaces inside, "
                "optionally followed by a `# comment` (not `;`)",
            )
        elif self.kind == "children":
            self._child(n, line, where)
        elif self.kind == "vars":
            key, sep, value = line.partition("=")
            if not sep:
                raise SpecError(f"{where}: expected key=value, got {line!r}", HINT)
            self.tree.group(self.section)[2][key.strip()] = _value(value.strip(), where)
        else:
            _host_line(self.tree, self.section, line, where)

    def _header(self, n: int, section: str, kind: str, where: str) -> None:
        self.section, self.kind = section, kind
        if kind not in ("hosts", "vars", "children"):
            raise SpecError(f"{where}: section [{section}:{kind}] has unknown type", HINT)
        self.tree.group(section)
        if kind == "vars":
            self.vars_at.setdefault(section, n)
            return
        self.declared.add(section)
        for parent in self.waiting.pop(section, (0, []))[1]:  # as Ansible: now, not before
            self.tree.add_child(parent, section, where)

    def _child(self, n: int, line: str, where: str) -> None:
        found = _GROUP_NAME.match(line)
        if not found:
            raise SpecError(f"{where}: expected a group name, got {line!r}", HINT)
        if found[1] in self.declared:
            self.tree.add_child(self.section, found[1], where)
        else:
            self.waiting.setdefault(found[1], (n, []))[1].append(self.section)

    def finish(self) -> Tree:
        for group, (n, parents) in self.waiting.items():
            raise SpecError(
                f"{self.path}:{n}: [{parents[-1]}:children] names group {group!r}, which the "
                "file never declares",
                f"declare it with a [{group}] or [{group}:children] section",
            )
        for group, n in self.vars_at.items():
            if group not in self.declared:
                raise SpecError(
                    f"{self.path}:{n}: section [{group}:vars] is for group {group!r}, which "
                    "the file never declares",
                    f"declare it with a [{group}] or [{group}:children] section",
                )
        return self.tree.reconcile()


def _value(text: str, where: str) -> Any:
    try:
        return parse_value(text)
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}", HINT) from None


def _host_line(tree: Tree, group: str, line: str, where: str) -> None:
    try:
        words = shlex.split(line, comments=True)
    except ValueError as exc:
        raise SpecError(f"{where}: {exc} (in {line!r})", QUOTE_HINT) from None
    values = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise SpecError(f"{where}: {word!r} is not key=value (in {line!r})", QUOTE_HINT)
        values[key] = _value(value, where)
    pattern = words[0]
    if pattern.endswith(":") or pattern == "---":
        raise SpecError(f"{where}: host pattern {pattern!r} is no host name", HINT)
    add_hosts(tree, group, pattern, values, where)


def add_hosts(tree: Tree, group: str, pattern: str, values: dict[str, Any], where: str) -> None:
    """The hosts one inventory entry names: a range (`gpu[01:64]`) expanded and a `:PORT`
    taken off as Ansible does (patcher.inventory.hostrange). The port is set when the entry
    creates the host (a later `NAME:PORT` of a known host is ignored, as Ansible's add_host
    ignores it), before the entry's own vars."""
    host, port = hostrange.split_port(pattern)
    try:
        names = hostrange.expand(host)
    except hostrange.RangeError as exc:
        raise SpecError(f"{where}: {exc}", HINT) from None
    for name in names:
        first = {"ansible_port": port} if port and name not in tree.hosts else {}
        tree.add_host(group, name, {**first, **values})


def yaml_tree(data: Any, path: str) -> Tree:
    """A YAML inventory (already loaded), group by group as the yaml plugin's `_parse_group`:
    each group's keys in the order written."""
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a YAML inventory is a mapping of groups (e.g. all:)", HINT)
    if data.get("plugin"):
        raise SpecError(
            f"{path}: an inventory plugin's configuration (plugin: {data['plugin']}), "
            "not an inventory",
            "vpatch reads it through ansible-inventory: install ansible-core, or give an "
            "INI or YAML inventory",
        )
    tree = Tree()
    for name, body in data.items():
        _yaml_group(tree, name, body, path)
    return tree.reconcile()


def _yaml_group(tree: Tree, name: Any, body: Any, path: str) -> None:
    if not isinstance(name, str):
        raise SpecError(f"{path}: group name {name!r} is not a string", "quote it")
    where = f"{path}: group {name!r}"
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise SpecError(
            f"{where} is a {_kind(body)}, not a mapping of hosts, vars and children",
            "write `GROUP:` with `hosts:`, `vars:` and `children:` below it "
            "(Ansible would skip the group and its hosts)",
        )
    tree.group(name)
    for key, given in body.items():
        section = _yaml_section(key, given, where)
        if section is None:
            continue
        if key == "vars":
            tree.group(name)[2].update({str(k): v for k, v in section.items()})
        elif key == "children":
            for child, child_body in section.items():
                _yaml_group(tree, child, child_body, path)
                tree.add_child(name, str(child), where)
        else:
            for host, values in section.items():
                _yaml_host(tree, name, host, values, where)


def _yaml_section(key: Any, section: Any, where: str) -> dict[Any, Any] | None:
    """A group's `hosts:`, `vars:` or `children:` as a mapping (None: empty); a single name
    is that one entry (`hosts: web1`, as the yaml plugin converts it)."""
    if key not in _YAML_KEYS:
        raise SpecError(
            f"{where}: unexpected key {key!r}",
            "a group holds only hosts:, vars: and children: (Ansible would skip the key "
            "and what is under it)",
        )
    if isinstance(section, str):
        return {section: None}
    if section is not None and not isinstance(section, dict):
        raise SpecError(
            f"{where}: {key}: is a {_kind(section)}, not a mapping",
            f"write {key}: as NAME: entries, one per line",
        )
    return section


def _yaml_host(tree: Tree, group: str, host: Any, values: Any, where: str) -> None:
    if not isinstance(host, str):
        raise SpecError(
            f"{where}: host name {host!r} is not a string",
            "quote a host name YAML reads as a number ('1234':)",
        )
    if values is not None and not isinstance(values, dict):
        raise SpecError(
            f"{where}: host {host!r}: its vars are a {_kind(values)}, not a mapping",
            "write the host's variables as key: value lines below it",
        )
    add_hosts(tree, group, host, {str(k): v for k, v in (values or {}).items()}, where)


def _kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )
