"""`vpatch status --format nagios|prometheus`: the fleet's patch state for a monitoring system.

Why: `status` exits 0/1/2 and prints JSON; a Nagios/Icinga check reads exit 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN and one line of text, and node_exporter's textfile collector reads
Prometheus' text exposition format from a `.prom` file. Without these, every team wrote its
own jq wrapper, and an unreachable host, a drifted patch (both exit 1) and a typo in the
inventory (exit 2, which Nagios reads as CRITICAL) looked alike.

PURE: both renderers read the hosts' results as `vpatch status` made them (each host's
`state`, `attention`, `patches` and `rollout_step`) and return text; the command writes it
(stdout, or `-o FILE` atomically through patcher.safewrite). What each state means to Nagios
is monitor.NAGIOS; tests/cases/feeds/ holds golden outputs, and the tests parse the
textfile back with prometheus_client's own parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from patcher.plan import monitor
from patcher.result import HostResult

# ---------------------------------------------------------------------------------------------
# Nagios / Icinga: one plugin line, its perfdata, and the long output

WORDS = {
    monitor.NAGIOS_OK: "OK",
    monitor.NAGIOS_WARNING: "WARNING",
    monitor.NAGIOS_CRITICAL: "CRITICAL",
    monitor.NAGIOS_UNKNOWN: "UNKNOWN",
}
_NAMED = 5  # hosts named per state in the first line; the long output names more
# The long output's bytes at most: Nagios Core keeps 8 KiB of a plugin's output, and a
# thousand drifted hosts must not push the first hosts' reasons out of it half-written.
_LONG = 6000


def state(host: HostResult) -> str:
    """The host's one word (its `state` as `vpatch status` set it, else decided now)."""
    return host.state if host.state in monitor.NAGIOS else monitor.host_state(host)


def _plain(text: str) -> str:
    """Plugin text: one line, no `|` (it starts the perfdata)."""
    return " ".join(text.replace("|", "/").split())


def nagios(hosts: Sequence[HostResult]) -> tuple[int, str]:
    """(the plugin's exit code, its output): `VPATCH WORD - summary | perfdata`, then a line
    per host that is not ok (what it is, why, what to run), as Nagios' long output."""
    by_state: dict[str, list[str]] = {}
    for h in hosts:
        by_state.setdefault(state(h), []).append(h.target)
    code = monitor.worst(list(by_state))
    parts = []
    for name in monitor.HOST_STATES:
        names = by_state.get(name, [])
        if not names:
            continue
        shown = ", ".join(names[:_NAMED]) + (
            f", +{len(names) - _NAMED}" if len(names) > _NAMED else ""
        )
        parts.append(f"{len(names)} {name}" + (f" ({shown})" if name != monitor.OK else ""))
    total = len(hosts)
    summary = (
        f"{total} host{'s' if total != 1 else ''}: " + ", ".join(parts) if parts else "no hosts"
    )
    perf = [f"hosts={total};;;0"] + [
        f"{name}={len(by_state.get(name, []))};;;0;{total}" for name in monitor.HOST_STATES
    ]
    lines = [f"VPATCH {WORDS[code]} - {_plain(summary)} | {' '.join(perf)}"]
    more = [_plain(line) for h in hosts for line in _long(h)]
    size = 0
    for i, line in enumerate(more):
        size += len(line.encode()) + 1
        if size > _LONG:
            told = f"... {len(more) - i} more: `vpatch status` on those hosts names them"
            more = [*more[:i], told]
            break
    return code, "\n".join(lines + more)


def _long(host: HostResult) -> list[str]:
    """The long output's lines of one host: nothing for a host that is ok."""
    name = state(host)
    if name == monitor.OK:
        return []
    if host.error is not None:
        hint = f" ({host.hint})" if host.hint else ""
        why = (host.error.splitlines() or [""])[0].removeprefix(f"{host.target}: ")
        return [f"{host.target}: {name}: {why}{hint}"]
    out = [
        f"{host.target}: {a.state}: {a.subject}: {a.message} -> {a.todo}" for a in host.attention
    ]
    told = {a.subject for a in host.attention}
    for p, why in monitor.failing(host):
        if p.id not in told:
            out.append(f"{host.target}: {why}: {p.id}: {p.message}")
    return out or [f"{host.target}: {name}"]


def usage_line(message: str, hint: str) -> str:
    """What a check prints when vpatch stops on bad input (exit 3, UNKNOWN): the same words as
    the `error:` and `hint:` lines."""
    told = f"error: {message}" + (f"; hint: {hint}" if hint else "")
    return f"VPATCH UNKNOWN - {_plain(told)}"


# ---------------------------------------------------------------------------------------------
# Prometheus: node_exporter's textfile format


def _label(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and newline
    escaped. A spec id comes from the host's journal: a character that is not printable (a
    control, a bidi override) is written as the visible text `\\xNN` (an escaped backslash,
    then its code), so the file holds nothing that acts on a terminal or reorders a line."""
    text = value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\\\x{ord(c):02x}" for c in text)


def _help(text: str) -> str:
    """A HELP text as the format writes it: backslash and newline escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


# The rows of STATES that are the host's last rollout's, and those that are a spec's.
ROLLOUT_STATES = monitor.ROLLOUT_STATES
SPEC_STATES = tuple(s.name for s in monitor.STATES if s.name not in ROLLOUT_STATES)
UNFINISHED = "unfinished"  # the verdict label of a rollout that recorded none (stopped mid-way)

# name -> (HELP, label names): every metric of the file, in the order written.
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "vpatch_host_state": (
        "1 for the state the host is in, 0 for the others (ok, the worst state that needs a "
        "person, unreachable, error)",
        ("host", "state"),
    ),
    "vpatch_spec_state": (
        "1 for each state a spec vpatch journaled or baked on the host is in, 0 for the others",
        ("host", "spec", "state"),
    ),
    "vpatch_rollout_state": (
        "1 for the state the host's last vpatch rollout left it in, 0 for the others",
        ("host", "state"),
    ),
    "vpatch_rollout_verdict": (
        "1 for the verdict of the host's last vpatch rollout (unfinished: it stopped mid-way)",
        ("host", "run", "verdict"),
    ),
    "vpatch_rollout_timestamp_seconds": (
        "when the host recorded its last vpatch rollout step (its clock, Unix time)",
        ("host",),
    ),
    "vpatch_status_exit_code": (
        "the exit code of the vpatch status run that wrote this (0 every host fine, 1 a host "
        "needs a person or gave no state, 2 a target holds what vpatch cannot patch)",
        (),
    ),
}


def timestamp(at: str) -> float | None:
    """A rollout step's `at` (UTC, ISO 8601, `Z` or an offset) as Unix time; None for what
    does not read as one (the journal is the host's: data to check)."""
    try:
        when = datetime.fromisoformat(at[:-1] + "+00:00" if at.endswith("Z") else at)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return round(when.timestamp(), 3)


def spec_states(host: HostResult) -> dict[str, set[str]]:
    """Spec id -> the SPEC_STATES it is in on the host (an empty set: not applied), read as
    the host's `state` reads them (monitor.failing)."""
    out: dict[str, set[str]] = {}
    bad = {id(p): name for p, name in monitor.failing(host)}
    for p in host.patches:
        found = out.setdefault(p.id, set())
        if id(p) in bad:
            found.add(bad[id(p)])
        elif p.outcome != "not_applied":
            found.add(monitor.state_of(p))
    for a in host.attention:
        if a.state in SPEC_STATES:
            out.setdefault(a.subject, set()).add(a.state)
    return out


def _samples(
    hosts: Sequence[HostResult], exit_code: int
) -> dict[str, dict[tuple[str, ...], float]]:
    """Metric -> label values -> value, one series per key (a host named twice: its first
    result)."""
    out: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in METRICS}
    seen: set[str] = set()
    for h in hosts:
        if h.target in seen:
            continue
        seen.add(h.target)
        now = state(h)
        for name in monitor.HOST_STATES:
            out["vpatch_host_state"][(h.target, name)] = float(name == now)
        for spec, states in spec_states(h).items():
            for name in SPEC_STATES:
                out["vpatch_spec_state"][(h.target, spec, name)] = float(name in states)
        st = h.rollout_step
        rollout = monitor.rollout_state(h)
        for name in ROLLOUT_STATES if rollout else ():
            out["vpatch_rollout_state"][(h.target, name)] = float(name == rollout)
        if st is not None:
            verdict = st.verdict or UNFINISHED
            out["vpatch_rollout_verdict"][(h.target, st.run, verdict)] = 1.0
            when = timestamp(st.at)
            if when is not None:
                out["vpatch_rollout_timestamp_seconds"][(h.target,)] = when
    out["vpatch_status_exit_code"][()] = float(exit_code)
    return out


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def prometheus(hosts: Sequence[HostResult], exit_code: int) -> str:
    """The textfile: HELP and TYPE (gauge) before each metric's series, every series once."""
    lines: list[str] = []
    for name, series in _samples(hosts, exit_code).items():
        text, labels = METRICS[name]
        if not series:
            continue
        lines += [f"# HELP {name} {_help(text)}", f"# TYPE {name} gauge"]
        for values, value in series.items():
            pairs = ",".join(f'{k}="{_label(v)}"' for k, v in zip(labels, values, strict=True))
            lines.append(
                f"{name}{{{pairs}}} {_number(value)}" if pairs else f"{name} {_number(value)}"
            )
    return "\n".join(lines) + "\n"
