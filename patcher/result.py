"""The one result model that both renderings (human and --json) read.

Plain dataclasses: the JSON document is `asdict()` of `RunResult`, so the contract
(docs/reference/json.md, `vpatch schema --result`) is exactly these field names.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

# The version of every JSON document vpatch prints (results, matrix, check, catalog, errors):
# bumped when a key changes meaning or goes away, not when one is added.
SCHEMA_VERSION = 1

Outcome = Literal[
    "applied",
    "would_apply",
    "already_applied",
    "satisfied_upstream",
    "not_applicable",
    "anchor_missing",
    "ambiguous",
    "drifted",
    "modified",
    "superseded",
    "not_applied",
    "rolled_back",
    "would_roll_back",
    "skipped",
    "failed",
]

# Outcomes that leave a host in the state the command asked for.
GOOD: dict[str, frozenset[str]] = {
    "apply": frozenset({"applied", "would_apply", "already_applied", "satisfied_upstream"}),
    "verify": frozenset({"applied", "satisfied_upstream"}),
    # superseded: the package was reinstalled or upgraded; the journal entry is retired.
    "rollback": frozenset({"rolled_back", "not_applied", "would_roll_back", "superseded"}),
    "status": frozenset({"applied", "satisfied_upstream", "not_applied", "superseded"}),
    # A pre-start hook: in place now, whether it wrote (applied) or not. No dry run.
    "ensure": frozenset({"applied", "already_applied", "satisfied_upstream"}),
}


@dataclass
class FileChange:
    path: str
    before_sha256: str
    after_sha256: str
    diff: str = ""


@dataclass
class ProbeResult:
    name: str
    ok: bool
    detail: str
    seconds: float = 0.0


@dataclass
class PatchResult:
    id: str
    package: str
    version: str | None
    outcome: Outcome
    message: str = ""
    variant: int | None = None  # index of the [[variant]] chosen for the installed version
    files: list[FileChange] = field(default_factory=list)
    probes: list[ProbeResult] = field(default_factory=list)


@dataclass
class RolloutStep:
    """The newest step of a `vpatch rollout` that the host's journal records (`vpatch status`):
    the host's own record, shape-checked (patcher.rollout.decide.last_step). `verdict` is set on the
    step that ended the host's rollout; without one the rollout stopped after this step."""

    run: str
    step: str
    ok: bool
    verdict: str | None
    detail: str
    at: str  # UTC, the host's clock when it recorded the step
    specs: list[str] = field(default_factory=list)


@dataclass
class Attention:
    """A state of the host that needs a person (bare `vpatch status`; docs/reference/json.md
    has the table of states): which, about what (a spec id, a rollout run id), why, and
    what to run next."""

    state: str
    subject: str
    message: str
    todo: str


@dataclass
class HostResult:
    target: str
    ok: bool = False
    error: str | None = None
    hint: str | None = None  # the one thing to try next, kept apart from `error`
    python: str = ""  # "PATH (VERSION)": for people; programs read python_path/_version
    restart_required: list[dict[str, Any]] = field(default_factory=list)
    patches: list[PatchResult] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # e.g. a half-written transaction repaired
    # What the agent skipped in the host's state dir (an ill-formed journal line, a journaled
    # path outside site-packages): the host's owner can write there, so it is data to check.
    warnings: list[str] = field(default_factory=list)
    # `vpatch rollout`: verdict, step reached, every phase with its times, the measures before
    # and after the restart and each gate (patcher/rollout/walk.py); None for other commands.
    rollout: dict[str, Any] | None = None
    # `vpatch status`: where the host's last rollout got to, from its journal (None: none).
    rollout_step: RolloutStep | None = None
    # Who did the work on the host: the agent's effective uid, and root's uid when the agent
    # started as root and dropped to the environment's owner (agent/privsep.py).
    uid: int | None = None
    dropped_from: int | None = None
    # The interpreter the agent ran as (sys.executable) and its version, e.g. "3.11.2" (None:
    # the host did not answer); `python` above is the two in one string, for people.
    python_path: str | None = None
    python_version: str | None = None
    # Bare `vpatch status`: what on the host needs a person (patcher/plan/monitor.py; empty when
    # nothing does, and for other commands). Any entry makes the host not ok (exit 1).
    attention: list[Attention] = field(default_factory=list)
    # `vpatch status`: the host's state in one word (patcher/plan/monitor.py HOST_STATES: `ok`,
    # the worst state that needs a person, `unreachable`, `error`). Other commands: only
    # `unreachable`, for a host vpatch could not connect to (errors.Unreachable), else None.
    state: str | None = None
    # How the controller reached the host: a name of patcher.transports.KINDS (the host's own
    # `transport = ...` of an inventory, else the run's), tried even where it failed to connect.
    transport: str | None = None
    # The target throws its files away where a host keeps them: a container (transports
    # podman, docker), whose writable layer is kept over a restart and lost when the
    # container is re-created from its image; a pod's container (kubectl), lost at any
    # restart. Its patches are `ephemeral` (status says so), unless the environment is on a
    # mount of its own (`env_mounted`: a volume, which the re-created container may mount
    # again; None: the host did not say).
    ephemeral: bool = False
    env_mounted: bool | None = None


@dataclass
class RunResult:
    command: str
    ok: bool
    hosts: list[HostResult]
    # Controller-side counters: libcst parses vs rewrite cache hits (N identical hosts cost
    # one parse), agent exchanges (round trips, all hosts), and planned_ahead: hosts whose
    # commit rode in the inspect's exchange. Readers ignore keys they do not know.
    stats: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **as_plain(self)}


_FIELDS: dict[type, tuple[str, ...]] = {}
_LEAVES = (str, int, float, bool, type(None))


def as_plain(obj: Any) -> Any:
    """`dataclasses.asdict`, without its deep copy of every str and int (immutable: nothing
    to copy) and its per-object field lookups: a 10,000-host report is ~600,000 values."""
    tp = type(obj)
    if tp in _LEAVES:
        return obj
    names = _FIELDS.get(tp)
    if names is None and is_dataclass(tp):
        names = _FIELDS[tp] = tuple(f.name for f in fields(tp))
    if names is not None:
        return {n: as_plain(getattr(obj, n)) for n in names}
    if tp is list:
        return [as_plain(v) for v in obj]
    if tp is dict:
        return {as_plain(k): as_plain(v) for k, v in obj.items()}
    if tp is tuple:
        return tuple(as_plain(v) for v in obj)
    return copy.deepcopy(obj)  # what asdict does with anything else


def take_run(host: HostResult, res: HostResult, restarts: bool = False) -> None:
    """Fold one engine run's result `res` into `host`, a result that spans several runs on
    the host (a rollout's plan, apply and rollback): the newest run's patches; the
    interpreter and who did the work, when the host answered; its warnings once each; all
    its notes; with `restarts`, its restart_required too (apply's: what the rollout's restart
    is for). `host`'s verdict (ok, error, hint), rollout and seconds are its own to decide."""
    host.patches = res.patches
    if res.python:
        host.python, host.python_path = res.python, res.python_path
        host.python_version = res.python_version
        host.uid, host.dropped_from = res.uid, res.dropped_from
        host.env_mounted = res.env_mounted
    host.warnings += [w for w in res.warnings if w not in host.warnings]
    host.notes += res.notes
    if restarts:
        host.restart_required = res.restart_required


def host_ok(command: str, host: HostResult) -> bool:
    """A host is ok when it answered, every patch ended in a good outcome for `command` and
    nothing on it needs a person (bare `status`'s `attention`)."""
    good = GOOD[command]
    return (
        host.error is None
        and not host.attention
        and all(p.outcome in good and all(pr.ok for pr in p.probes) for p in host.patches)
    )
