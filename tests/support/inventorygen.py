"""Generated Ansible inventories (seeded: the same files every run) for the differential check
against ansible-inventory in tests/integration/test_ansible_conformance.py.

Hand-written cases hold the rules one at a time; these mix them the way real files do: groups
declared in any order, `:children` naming groups before or after their sections (or never, or
in a loop), `:vars` with spaces and comments, `NAME:PORT` on a host seen before, YAML groups
nested three deep with `hosts:` as a mapping or a single name, hosts in `all` and in groups.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

_HOST_VARS = ["", "ansible_port=22.0", "ansible_host=10.0.0.1", "vpatch_restart='a b'"]
_GROUP_VARS = [
    "ansible_user = grp",
    "ansible_port=0x10",
    "ansible_group_priority=2",
    "vpatch_restart = x y # z",
]


def _some(rnd: random.Random, items: list[str], most: int) -> list[str]:
    return rnd.sample(items, min(len(items), rnd.randint(0, most)))


def ini(rnd: random.Random) -> str:
    groups = [f"g{k}" for k in range(rnd.randint(1, 6))]
    hosts = [f"h{k}" for k in range(rnd.randint(1, 8))]
    lines = [f"{h} ansible_user=u{rnd.randint(0, 3)}" for h in _some(rnd, hosts, 2)]
    declared: list[str] = []
    for _ in range(rnd.randint(1, 8)):
        group = rnd.choice(groups)
        kind = rnd.choice(["", "", ":children", ":vars"])
        if kind == ":vars" and group not in declared:
            kind = ""
        lines.append(f"[{group}{kind}]" + rnd.choice(["", " # comment"]))
        if kind == ":vars":
            lines.append(rnd.choice(_GROUP_VARS))
            continue
        declared.append(group)
        if kind == ":children":
            lines += [g for g in _some(rnd, groups, 2) if g != group]
            continue
        for host in _some(rnd, hosts, 3):
            port = rnd.choice(["", f":{rnd.randint(1000, 1010)}"])
            lines.append(f"{host}{port} {rnd.choice(_HOST_VARS)}".rstrip())
    return "\n".join(lines) + "\n"


def _group(rnd: random.Random, depth: int, groups: list[str], hosts: list[str]) -> Any:
    body: dict[str, Any] = {}
    for key in rnd.sample(["hosts", "vars", "children"], rnd.randint(0, 3)):
        if key == "hosts" and rnd.random() < 0.2:
            body[key] = rnd.choice(hosts)  # `hosts: NAME`
        elif key == "hosts":
            body[key] = {
                rnd.choice(hosts) + rnd.choice(["", "", ":2200"]): rnd.choice(
                    [None, {"ansible_user": "u"}, {"ansible_port": 2222}, {"ansible_port": "22.0"}]
                )
                for _ in range(rnd.randint(0, 3))
            }
        elif key == "vars":
            body[key] = rnd.choice(
                [{"ansible_user": "g"}, {"ansible_port": 16}, {"ansible_group_priority": 3}, None]
            )
        elif depth < 3:
            body[key] = {
                rnd.choice(groups): _group(rnd, depth + 1, groups, hosts)
                for _ in range(rnd.randint(0, 2))
            }
    return body if body or rnd.random() < 0.5 else None


def yaml(rnd: random.Random) -> str:
    """A YAML inventory (written as JSON, which is YAML)."""
    groups = [f"g{k}" for k in range(rnd.randint(1, 5))]
    hosts = [f"h{k}" for k in range(rnd.randint(1, 6))]
    if rnd.random() < 0.6:
        top = {"all": _group(rnd, 0, groups, hosts)}
    else:
        top = {rnd.choice(groups): _group(rnd, 0, groups, hosts) for _ in range(rnd.randint(1, 3))}
    return json.dumps(top, indent=1) + "\n"


def write(dest: Path, count: int, seed: int = 50) -> list[Path]:
    """`count` INI and `count` YAML inventories under dest."""
    rnd = random.Random(seed)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        for suffix, make in ((".ini", ini), (".yml", yaml)):
            path = dest / f"gen-{i:02d}{suffix}"
            path.write_text(make(rnd))
            out.append(path)
    return out
