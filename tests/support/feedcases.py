"""Hosts as bare `vpatch status` makes them, from the monitor's golden cases, for the monitor's
own tests and the feeds' (patcher/plan/feeds.py: tests/cases/feeds/).

A status case (tests/cases/status/NAME.json) is one host: the journal's specs (`from_plan`: a
planner case run through `status_journal`), the baked specs, the last rollout step and the
unverified writes. A feed case (tests/cases/feeds/NAME.json) is a fleet of such hosts and
hosts that gave no state, with what the Nagios check says; NAME.prom beside it is the
textfile, byte for byte:

    {"about": "...", "exit": 1,
     "hosts": [{"target": "h1", "status": "applied"},
               {"target": "h2", "unreachable": "h2: cannot connect (...)", "hint": "..."},
               {"target": "h3", "error": "h3: authentication failed (...)"}],
     "nagios": {"exit": 2, "output": "VPATCH CRITICAL - ..."}}

`exit` is the exit code bare `status` gives for the fleet (the textfile's
vpatch_status_exit_code); a status host may rename its spec ids (`"ids": {"x": "y"}`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patcher.plan import monitor
from patcher.plan.verify import status_journal
from patcher.result import HostResult, RolloutStep
from tests.support import plancases

CASES = Path(__file__).resolve().parent.parent / "cases"
STATUS = CASES / "status"
FEEDS = CASES / "feeds"


def status_raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((STATUS / f"{name}.json").read_text())
    return data


def status_host(raw: dict[str, Any], target: str = "h1") -> HostResult:
    """The host of a status case as the engine's bare status leaves it, before `attention`."""
    host = HostResult(target)
    if "from_plan" in raw:
        case = plancases.load(plancases.CASES / f"{raw['from_plan']}.json")
        host.patches = status_journal(case.facts)
    host.patches += monitor.baked_results(raw.get("baked", []))
    step = raw.get("rollout_step")
    host.rollout_step = RolloutStep(**step) if step else None
    return host


def unverified(raw: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(a), str(b)) for a, b in raw.get("unverified", [])]


def answered(name: str, target: str = "h1", ids: dict[str, str] | None = None) -> HostResult:
    """A host that answered bare status as status case NAME says, with its `attention`, `ok`
    and `state` set as the command sets them."""
    raw = status_raw(name)
    host = status_host(raw, target)
    for p in host.patches:
        p.id = (ids or {}).get(p.id, p.id)
    host.attention = monitor.attention(host, unverified(raw))
    host.ok = not host.attention
    host.state = monitor.host_state(host)
    return host


def silent(target: str, error: str, hint: str | None, reached: bool) -> HostResult:
    """A host that gave no state: unreachable (`reached` False) or an error once reached."""
    host = HostResult(target, False, error, hint)
    host.state = None if reached else monitor.UNREACHABLE
    host.state = monitor.host_state(host)
    return host


@dataclass(frozen=True)
class FeedCase:
    name: str
    hosts: list[HostResult]
    exit: int
    nagios_exit: int
    nagios: str
    prom: Path


def feed_case(path: Path) -> FeedCase:
    raw = json.loads(path.read_text())
    hosts = []
    for h in raw["hosts"]:
        if "status" in h:
            hosts.append(answered(h["status"], h["target"], h.get("ids")))
        else:
            why = h.get("unreachable") or h["error"]
            hosts.append(silent(h["target"], why, h.get("hint"), "error" in h))
    nagios = raw["nagios"]
    return FeedCase(
        path.stem, hosts, raw["exit"], nagios["exit"], nagios["output"], path.with_suffix(".prom")
    )
