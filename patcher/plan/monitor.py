"""Bare `vpatch status` as a monitor: which states of a host need a person, and what to run.

Why: `status` is what an alert runs. It exited 0 after an upgrade wiped a patch (`superseded
... status: ok`), after a rollout ended `attention` (the service may be down), with a host
left mid-rollout by SIGKILL or Ctrl-C, and with a patch written whose checks never ran. So
every state is one row of STATES: its name, the exit code bare `status` gives when a host is
in it, and what the operator runs next. docs/reference/json.md renders the table from STATES
(patcher.commands._docgen) and tests/unit/test_monitor.py holds one golden case per row
(tests/cases/status/), so the table, the code and the docs cannot drift apart.

PURE: `attention` reads a host's result as the planner and the inspect answer made it (the
journal's specs, the baked ones, the last rollout step, the unverified transactions) and says
what needs a person; `patcher.run.engine.status` puts it on the host and sets `ok` from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from patcher.agent import protocol
from patcher.result import Attention, FileChange, HostResult, PatchResult


@dataclass(frozen=True)
class State:
    """One row of the monitor's table."""

    name: str
    exit: int  # bare `vpatch status`'s exit code when a host is in this state
    means: str
    todo: str  # what to run ("" for a state that needs nothing)


# Fine states first, then those that need a person; the exit code of bare `status` is the
# largest of its hosts' states (1 for any that needs a person, as for an unreachable host).
STATES: tuple[State, ...] = (
    State("applied", 0, "every journaled file has the bytes vpatch wrote", ""),
    State(
        "satisfied_upstream",
        0,
        "the installed release already has the code (nothing of vpatch's to hold)",
        "",
    ),
    State(
        "superseded",
        0,
        "upgraded, and pip's bytes of the new release already hold the spec's code",
        "",
    ),
    State("baked", 0, "baked into the installed wheel (vpatch.json), every file as built", ""),
    State(
        "rollout_done",
        0,
        "the last rollout ended kept, rolled_back, not_applied, untouched, "
        "not_enough_evidence or changed_since",
        "",
    ),
    State(
        "drifted",
        1,
        "a journaled file is not the bytes vpatch wrote (edited, or reinstalled)",
        "`vpatch diff PACKAGE` shows what changed; `vpatch apply SPEC` patches it again "
        "(--force over a hand edit), `vpatch rollback ID` clears the entry",
    ),
    State(
        "upgraded",
        1,
        "the package was upgraded and the patch is gone from the new release's files",
        "`vpatch apply SPEC` patches the new release where a variant of the spec covers it; "
        "`vpatch rollback ID` clears the entry where none does",
    ),
    State(
        "baked_differs",
        1,
        "a file of a spec baked into the installed wheel is not the bytes the wheel installed",
        "`vpatch diff PACKAGE` shows what changed; reinstall the patched wheel with "
        "`pip install --force-reinstall --no-deps` to put its bytes back",
    ),
    State(
        "unverified",
        1,
        "a write whose checks never finished (the run was stopped while they ran)",
        "`vpatch verify ID` runs the recorded checks; `vpatch ensure SPEC` runs them and "
        "records the result",
    ),
    State(
        "rollout_attention",
        1,
        "the last rollout ended `attention`: a restart or the way back failed, the service "
        "may be down",
        "check the service (`systemctl status ...`) and the spec (`vpatch status SPEC`), put "
        "right what the rollout's report names; the next `vpatch rollout` on the host "
        "replaces this verdict",
    ),
    State(
        "rollout_stopped",
        1,
        "a rollout stopped mid-way on this host (Ctrl-C, or its controller was killed)",
        "`vpatch rollout ... --resume REPORT` continues it from the host's journal",
    ),
)
BY_NAME = {s.name: s for s in STATES}

# A host's `state` in one word (`vpatch status`'s JSON, its Nagios line and its Prometheus
# textfile: patcher/plan/feeds.py): `ok` when none of its states needs a person, else the
# worst of those that do, else one of two words for a host that gave no state at all.
OK = "ok"
UNREACHABLE = "unreachable"  # no connection (errors.Unreachable): nothing there was asked
ERROR = "error"  # reached, no state read (authentication, host key, interpreter, agent)

# What a Nagios/Icinga check makes of each state: a plugin's 0 OK, 1 WARNING, 2 CRITICAL,
# 3 UNKNOWN. CRITICAL where the code that runs is neither pip's nor vpatch's bytes, or the
# service may be down; WARNING where it is pip's own bytes of a release (the patch is gone,
# nothing unknown runs) or a step was left to finish; UNKNOWN where vpatch learnt nothing of
# the host (its reachability is the host check's to page on, not every service's).
NAGIOS_OK, NAGIOS_WARNING, NAGIOS_CRITICAL, NAGIOS_UNKNOWN = 0, 1, 2, 3
NAGIOS: dict[str, int] = {
    "applied": NAGIOS_OK,
    "satisfied_upstream": NAGIOS_OK,
    "superseded": NAGIOS_OK,
    "baked": NAGIOS_OK,
    "rollout_done": NAGIOS_OK,
    "drifted": NAGIOS_CRITICAL,
    "upgraded": NAGIOS_WARNING,
    "baked_differs": NAGIOS_CRITICAL,
    "unverified": NAGIOS_WARNING,
    "rollout_attention": NAGIOS_CRITICAL,
    "rollout_stopped": NAGIOS_WARNING,
    OK: NAGIOS_OK,
    UNREACHABLE: NAGIOS_UNKNOWN,
    ERROR: NAGIOS_UNKNOWN,
}
assert set(NAGIOS) == {*BY_NAME, OK, UNREACHABLE, ERROR}, set(NAGIOS) ^ {*BY_NAME}
assert all((NAGIOS[s.name] == NAGIOS_OK) == (s.exit == 0) for s in STATES)
# Worst first, as the monitoring plugins' max_state_alt ranks them: CRITICAL, WARNING,
# UNKNOWN, OK. One drifted host among unreachable ones is CRITICAL; one unreachable host among
# fine ones is UNKNOWN.
RANK = (NAGIOS_CRITICAL, NAGIOS_WARNING, NAGIOS_UNKNOWN, NAGIOS_OK)
# Every word a host's `state` can be, worst first (STATES' order within one Nagios code).
HOST_STATES: tuple[str, ...] = tuple(
    name
    for code in RANK
    for name in (OK, *(s.name for s in STATES if s.exit), UNREACHABLE, ERROR)
    if NAGIOS[name] == code
)

_DONE = frozenset(
    {
        "kept",
        "rolled_back",
        "not_applied",
        "untouched",
        "not_enough_evidence",
        "changed_since",
        "promoted",
        "aborted",
    }
)
assert _DONE | {"attention", "interrupted"} == set(protocol.ROLLOUT_VERDICTS)


def state_of(p: PatchResult) -> str:
    """The monitor state of one spec of a bare `status` (the journal's or a baked one)."""
    if p.outcome == "drifted" and p.message.startswith(UPGRADED):
        return "upgraded"
    if p.outcome == "drifted" and BAKED_DIFFERS in p.message:
        return "baked_differs"
    if p.outcome == "applied" and BAKED in p.message:
        return "baked"
    if p.outcome in BY_NAME:
        return p.outcome
    return "drifted"  # any other outcome on a bare status: not what vpatch left


# The words status_journal / baked_results start their messages with, read back here (one
# definition each: the planner imports them).
UPGRADED = "upgraded: "
BAKED = "baked into the installed wheel"
BAKED_DIFFERS = "differs from the baked wheel's bytes"


def states(host: HostResult, unverified: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Every row of STATES the host is in, fine ones included (what the golden cases pin)."""
    out = [state_of(p) for p in host.patches]
    out += ["unverified" for _ in unverified]
    rollout = rollout_state(host)
    return out + ([rollout] if rollout else [])


def exit_code(names: Sequence[str]) -> int:
    """Bare `status`'s exit code for a host in these states: the largest of theirs."""
    return max((BY_NAME[n].exit for n in names), default=0)


def attention(host: HostResult, unverified: Sequence[tuple[str, str]] = ()) -> list[Attention]:
    """What on this host needs a person, each with what to run (empty: bare `status` exits
    0 for it). `unverified`: (spec id, txn) of writes whose checks never finished."""
    out: list[Attention] = []
    for p in host.patches:
        state = BY_NAME[state_of(p)]
        if state.exit:
            out.append(Attention(state.name, p.id, p.message, state.todo))
    out += unverified_attention(unverified)
    st = host.rollout_step
    if st is not None and st.verdict not in _DONE:
        name = "rollout_attention" if st.verdict == "attention" else "rollout_stopped"
        state = BY_NAME[name]
        how = f"ended `{st.verdict}`" if st.verdict == "attention" else "stopped"
        why = f"rollout {st.run} {how} at {st.step} ({'ok' if st.ok else 'failed'}): {st.detail}"
        out.append(Attention(state.name, st.run, why.rstrip(": "), state.todo))
    return out


def host_state(host: HostResult) -> str:
    """The host's state in one word (HOST_STATES): `unreachable` or `error` for a host that
    answered nothing (the engine marks an errors.Unreachable one `unreachable`), else the
    worst of what needs a person on it (`attention`, and with SPEC named the specs whose
    outcome is not good for `status`, read as bare status reads them), else `ok`."""
    if host.error is not None:
        return UNREACHABLE if host.state == UNREACHABLE else ERROR
    found = {a.state for a in host.attention} | {name for _, name in failing(host)}
    return next((name for name in HOST_STATES if name in found), OK)


def failing(host: HostResult) -> list[tuple[PatchResult, str]]:
    """The specs whose outcome is not good for `status` (or whose probe failed), each with its
    state as bare status reads it (`status SPEC` has no `attention`: these are its problems)."""
    from patcher.result import GOOD

    out = []
    for p in host.patches:
        if p.outcome not in GOOD["status"] or not all(pr.ok for pr in p.probes):
            name = state_of(p)
            out.append((p, name if BY_NAME[name].exit else "drifted"))  # a probe that failed
    return out


def worst(names: Sequence[str]) -> int:
    """The Nagios code of a run whose hosts are in these states (RANK: worst first); OK for
    none."""
    codes = {NAGIOS[n] for n in names}
    return next((code for code in RANK if code in codes), NAGIOS_OK)


def unverified_attention(
    unverified: Sequence[tuple[str, str]], ids: set[str] | None = None
) -> list[Attention]:
    """An `unverified` entry per (spec id, txn) (of the specs in `ids`, when given)."""
    state = BY_NAME["unverified"]
    why = "transaction %s: written, its checks never finished"
    return [
        Attention(state.name, sid, why % txn, state.todo)
        for sid, txn in unverified
        if ids is None or sid in ids
    ]


# The rows of STATES that are the host's last rollout's (the others are a spec's).
ROLLOUT_STATES = ("rollout_done", "rollout_attention", "rollout_stopped")
assert set(ROLLOUT_STATES) <= set(BY_NAME)


def rollout_state(host: HostResult) -> str | None:
    """The table's row for the host's last rollout (None: no rollout recorded)."""
    st = host.rollout_step
    if st is None:
        return None
    if st.verdict in _DONE:
        return "rollout_done"
    return "rollout_attention" if st.verdict == "attention" else "rollout_stopped"


def baked_results(baked: Sequence[dict[str, Any]]) -> list[PatchResult]:
    """One result per spec a `vpatch wheel` baked into an installed wheel, from the inspect
    answer's `baked` (agent/baked.py: each baked dist-info's vpatch.json and the sha256 of
    each of its specs' files now): `applied` when every file is the baked bytes, `drifted`
    (state `baked_differs`) when one is not, and how to take it out said once per spec."""
    from patcher.plan.base import baked_release

    out: list[PatchResult] = []
    for dist in baked:
        manifest = dist.get("manifest") or {}
        package = str(dist.get("package") or manifest.get("package") or "?")
        version = str(dist.get("version") or manifest.get("baked_version") or "")
        current: dict[str, Any] = dist.get("current") or {}
        note = baked_release(version, package) or f"{BAKED} ({version})"
        for spec in manifest.get("specs") or []:
            if not isinstance(spec, dict):
                continue
            res = PatchResult(str(spec.get("id", "?")), package, version, "applied")
            differ = []
            for f in spec.get("files") or []:
                rel = str(f.get("file", ""))
                want, now = f.get("sha256"), current.get(rel)
                res.files.append(FileChange(rel, str(f.get("pristine_sha256") or ""), str(want)))
                if now != want:
                    differ.append(f"{rel} ({'missing' if now is None else str(now)[:12]})")
            if differ:
                res.outcome = "drifted"
                res.message = f"{', '.join(differ)} {BAKED_DIFFERS}; {note}"
            elif spec.get("outcome") == "satisfied_upstream":
                res.outcome = "satisfied_upstream"
                res.message = f"the release already had the code when it was baked; {note}"
            else:
                res.message = f"every file has the baked bytes; {note}"
            out.append(res)
    return out


def baked_in_rollout(patches: Sequence[PatchResult]) -> str | None:
    """Why a rollout's apply step refuses a host (None: it goes on). A spec baked into the
    installed wheel comes out only with the wheel: the restart would run the baked code and a
    failed gate could not take it out ("rolled_back", "0 of 1 host(s) patched", while the
    code stayed). Refused when the apply wrote nothing; with other specs written, the rollout
    goes on with theirs (a rollback takes those out) and the report names the baked one."""
    baked = [p for p in patches if p.outcome == "already_applied" and BAKED in p.message]
    if not baked or any(p.outcome in ("applied", "would_apply") for p in patches):
        return None
    note = baked[0].message.partition(f"{BAKED} ")[2]
    return (
        f"{', '.join(p.id for p in baked)}: {BAKED} {note}: a rollout could not roll it back; "
        "nothing was written or restarted"
    )
