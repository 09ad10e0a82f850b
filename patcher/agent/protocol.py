"""The wire and the journal, defined once: imported by the agent (stdlib, Python 3.9+) and by
the controller, so a request, an answer's error kind or a journal entry has a single shape.

Why one module: the controller used to decide a retry by matching the agent's message text, and
built journal entries the agent then folded by its own idea of their keys. Here the error kinds
are constants both sides compare, and every journal entry is made by a constructor below.

Requests (one JSON object per line; `op` picks the handler in `patcher.agent.OPS`):
    inspect  {"packages": {dist: [rel, ...]}, "state_dir", "known": [sha256...], "procs_for"?,
             "seen_for"?: [spec...]}: with seen_for, "seen" answers the host now as a rollout
             step entry's `seen` (agent/seen.py)
    commit   {"writes": [Write...], "journal": [Entry...], "state_dir", "gc"?: [sha256...],
             "fault"?, "backups"?: [{"sha256", "text"}]}: gc names backups no entry needs any
             more (superseded releases); backups are stored, hash-checked, first (--adopt;
             --force's new base of a drifted file)
    repair   {"state_dir"}: finish or undo a half-written transaction (under the lock)
    verify   {"checks": [{"name", "module", "code", "timeout"?}]}
    procs    procs_request(paths): the processes that hold one of `paths` as it was before
             its last write (agent/holders.py), in "restart_required"
    fetch    {"url", "timeout", "max_bytes"}
    scan     {"package", "files", "state_dir", "known"}: files not as RECORD says (agent/scan.py)
    wheel_members  {"path", "files"}: base64 bytes of files from a wheel on the host
             (agent/hostwheel.py; `--host-wheel`, checked by the controller against RECORD)
    restart  {"command", "timeout"}: `sh -c command` on the host (agent/restart.py)
    health   {"url", "wait", "interval", "request_timeout"}: GET until 200 or `wait` s passed
    rollout_step  {"entry": step_entry(...), "state_dir", "release"?: {"run", "who"}}: append
             one rollout step to the journal, under the lock (agent/restart.py); inspect
             answers the last run's steps in "rollout" (absent when the journal has none);
             with "release", the step that ended the host's walk gives up the run's rollout
             lease in the same locked step
    rollout_lease  lease_request(...): take, beat, park or read the environment's rollout
             lease, under the lock (agent/lease.py; decisions: agent/leasing.py)
An inspect may carry "then_if": {fingerprint: [request...]}: when `fingerprint(answer)` is a key,
those requests (commit, verify, inspect; no nested then_if) run right after it in the same
exchange, each only if the one before it succeeded, and their answers come back in "then"; the
answer always carries its "fingerprint". Any request may carry "then": [request...], run the
same way after it unconditionally (agent/chain.py).
Any request may carry "last": true: the caller sends nothing after it, so once its answer (and
its chain's: then the chain's own last request must say "last") is written and everything it
ran went well, the agent ends the session itself, marking the answer "ended": true. The SSH
channel then closes right behind the answer instead of a round trip after the caller's EOF
(chain.ends decides; anything that did not go well keeps the session open for the caller).
A Write is {"path", "expect_sha256": sha or None (None: the file must not exist), and one of
"text" (new content), "restore_sha256" (a backup's bytes) or "delete": true}.

Answers: {"ok": true, ...} or {"ok": false, "kind": KIND, "error": message}, plus "pid".
"""

from __future__ import annotations

# Annotations only: the agent imports this module, and importing typing costs it ~4 ms per start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

PROTOCOL = 2
LAST = "last"  # a request after which the caller sends nothing (chain.ends)
ENDED = "ended"  # an answer after which the agent has ended the session

# Error kinds: the one thing the controller decides on (never the message text).
CONFLICT = "conflict"  # a file changed between inspect and commit: inspect again
LOCKED = "locked"  # another vpatch holds the environment's lock
OS_ERROR = "os"  # permission, space, I/O
SYNTAX = "syntax"  # the new content does not compile on the target interpreter
BACKUP = "backup"  # a backup is missing or does not have its recorded hash
INPUT = "input"  # a request field the agent refuses (bad URL, bad path)
PROTOCOL_ERROR = "protocol"  # not a request this agent understands
STATE = "state"  # the state dir, journal, lock or backups/ is a link or not ours (statedir.py)
CONFINED = "confined"  # a path to write is not a regular file in site-packages (confine.py)
LEASED = "leased"  # a live rollout of another run holds the environment's lease (leasing.py)
KINDS = (
    CONFLICT,
    LOCKED,
    OS_ERROR,
    SYNTAX,
    BACKUP,
    INPUT,
    PROTOCOL_ERROR,
    STATE,
    CONFINED,
    LEASED,
)


class Refused(Exception):
    """A request the agent refuses, answered as `error(kind, message)`: the one way an op
    says no (statedir.StateError is one, kind `state`). Raised anywhere below an op; `handle`
    (agent/__init__.py) turns it into the answer, so no op builds an error answer itself."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


# What the controller tells the user to try next, per kind (the agent never words hints).
HINTS: Dict[str, str] = {
    CONFLICT: "the file changed while vpatch was working; run the command again",
    LOCKED: "another vpatch is working on this environment; wait and retry",
    OS_ERROR: "check permissions of site-packages and the state dir (try --sudo for "
    "root-owned envs)",
    SYNTAX: "the target interpreter is older than the patched code needs",
    BACKUP: "the backup in the state dir was changed or removed; `vpatch status` "
    "shows the file; reinstall the package to get pip's bytes back",
    STATE: "vpatch uses only state it made itself; --state-dir DIR keeps it elsewhere",
    CONFINED: "a journaled path left site-packages or went through a link: check the env",
    LEASED: "a rollout of these specs is running on this host (`vpatch rollout`'s lease): "
    "wait for it to end, or change it through that rollout",
}

# `vpatch rollout`'s ops (agent/restart.py), built only by these two constructors.
RESTART = "restart"
HEALTH = "health"


def restart_request(command: str, timeout: float) -> Dict[str, Any]:
    """Answer: {"exit": int or None (killed), "timed_out", "stdout", "stderr", "seconds"}."""
    return {"op": RESTART, "command": command, "timeout": timeout}


def procs_request(paths: List[str]) -> Dict[str, Any]:
    """Answer: {"restart_required": [{"pid", "started", "cmdline", "why"}, ...]}: the
    processes that hold one of `paths` as it was before its last write (agent/holders.py)."""
    return {"op": "procs", "paths": paths}


def health_request(
    url: str, wait: float, interval: float = 1.0, request_timeout: float = 5.0
) -> Dict[str, Any]:
    """Answer: {"healthy", "status", "error", "tries", "seconds"}."""
    return {
        "op": HEALTH,
        "url": url,
        "wait": wait,
        "interval": interval,
        "request_timeout": request_timeout,
    }


# `vpatch rollout`'s journal: one entry per step a host finished (no file, no txn), so a
# stopped rollout can be resumed and `vpatch status` can say where a host got to. The step
# and verdict names are defined here, once, for the agent's shape check and patcher.rollout.decide.
STEP = "rollout_step"
ROLLOUT = "rollout"  # the journal action of a step entry
ROLLOUT_STEPS = (
    "baseline",
    "apply",
    "restart",
    "health",
    "window",
    "gates",
    "rollback",
    "rollback_restart",
    "rollback_health",
)
ROLLOUT_VERDICTS = (
    "kept",
    "rolled_back",
    "not_applied",
    "untouched",
    "attention",
    "interrupted",
    "not_enough_evidence",  # rolled back: the window ended before its evidence decided
    "changed_since",  # --resume found the host changed since its last step: nothing judged
    "promoted",  # kept because its owner said so (`vpatch rollout promote`): window cut short
    "aborted",  # its owner stopped the run (`vpatch rollout abort`): rolled back, or untouched
)
STEP_DETAIL_MAX = 400  # characters of a step's detail the journal keeps


def step_entry(
    *,
    run: str,
    step: str,
    ok: bool,
    specs: List[str],
    detail: str = "",
    started: str = "",
    seconds: float = 0.0,
    verdict: Optional[str] = None,
    measures: Optional[Dict[str, Any]] = None,
) -> Entry:
    """One finished rollout step on this host. `verdict`: set on the step that ended the
    host's rollout; `measures`: a baseline's or window's numbers (a resumed rollout gates on
    the baseline the host recorded). The controller adds `undecided` (true) to a gates step
    that failed only because the window ended before its evidence decided (the verdict is
    then not_enough_evidence). The agent adds `ts` (its clock) and `seen` (the host as the
    step left it: agent/seen.py) when it appends."""
    out: Dict[str, Any] = {
        "action": ROLLOUT,
        "run": run,
        "step": step,
        "ok": ok,
        "specs": list(specs),
        "detail": detail[:STEP_DETAIL_MAX],
        "started": started,
        "seconds": seconds,
    }
    if verdict is not None:
        out["verdict"] = verdict
    if measures is not None:
        out["measures"] = measures
    return out


# `vpatch rollout pause|resume|promote|abort`: a steer that touched a host is journaled there
# as a note on its walk (no step ran: `steer` set, like a release's `released`), made only here
# and checked by journal._step_extras_error on both sides.
STEER_VERBS = ("pause", "resume", "promote", "abort")
STEER_USER_MAX = 64  # characters of the steering user's name a note keeps


def steer_entry(
    *, run: str, step: str, specs: List[str], steer: Dict[str, Any], detail: str
) -> Entry:
    """A steer's note on one host's walk: `step` the step it touched (the one the host was in,
    or was about to begin), `steer` {"verb", "seq", "uid", "user", "at"} as the run's channel
    holds it (patcher/rollout/steer.py), `detail` what it did there. Never a step of the walk:
    --resume and the verdict skip it (rollout.resume.Step.walked)."""
    at = steer["at"]
    out = step_entry(run=run, step=step, ok=True, specs=specs, detail=detail, started=at)
    out["steer"] = {
        "verb": steer["verb"],
        "seq": steer["seq"],
        "uid": steer["uid"],
        "user": str(steer["user"])[:STEER_USER_MAX],
        "at": at,
    }
    return out


# A write whose checks follow it (the commit's chain) journals its apply entries with
# `"verify": "pending"` under a txn the controller names; each spec's verify request carries
# `record` ({"txn", "spec", "state_dir"}) and, when every check passed, the agent appends a
# VERIFIED entry. An applied spec whose pending entry has no such entry was written and never
# verified (the run was stopped while its checks ran): bare `vpatch status` says so, and a
# later verify/ensure whose checks pass records it (agent/verified.py).
VERIFIED = "verified"
PENDING = "pending"


def verified_entry(txn: str, spec: str) -> Entry:
    return {"action": VERIFIED, "txn": txn, "spec": spec}


def step_request(
    entry: Entry, state_dir: Optional[str], release: Optional[Dict[str, str]] = None
) -> Dict[str, Any]:
    """Answer: {"ok": true} once the entry is in the journal (fsync'ed). `release`: the
    lease's {"run", "who"}: the step ends the host's walk, and the lease is given up with it
    (one locked step: no moment where the walk is over and the lease still held)."""
    out = {"op": STEP, "entry": entry, "state_dir": state_dir}
    if release is not None:
        out["release"] = release
    return out


# `vpatch rollout`'s lease: one rollout per environment at a time (agent/lease.py). A file in
# the state dir names its holder; the decisions are agent/leasing.py's, made on the host
# under the environment's lock, so two controllers never both hold it.
LEASE = "rollout_lease"
LEASE_FILE = "rollout.lease"
LEASE_TAKE = "take"  # a rollout begins on the host (or --resume takes its own run's over)
LEASE_BEAT = "beat"  # the holder is alive: its next beat comes within `ttl` seconds
LEASE_PARK = "park"  # the holder stops before the walk's end (Ctrl-C): stale at once
LEASE_RELEASE = "release"  # `vpatch rollout release`: a gone controller's lease given up, journaled
LEASE_ACTIONS = (LEASE_TAKE, LEASE_BEAT, LEASE_PARK, LEASE_RELEASE)


def lease_request(
    action: str,
    run: str,
    who: str,
    specs: List[str],
    ttl: float,
    state_dir: Optional[str],
    resume: bool = False,
    session: bool = False,
) -> Dict[str, Any]:
    """Answer: {"granted": bool, "result": what was done or why not (leasing.py), "holder":
    the lease as it is now on the host (None: none), "age": seconds since its last beat,
    "stale": bool}. `who`: the controller (user@machine pid N); `ttl`: seconds within which
    the holder promises its next beat; `resume`: --resume of `run` (a stale lease of that run
    is taken over); `session`: the agent answering lives as long as the rollout's session, so
    its death marks the lease stale at once (one-shot callers rely on `ttl` alone)."""
    return {
        "op": LEASE,
        "action": action,
        "run": run,
        "who": who,
        "specs": list(specs),
        "ttl": ttl,
        "state_dir": state_dir,
        "resume": resume,
        "session": session,
    }


# Journal actions.
APPLY = "apply"  # a spec's edits took a file from `before` to `after`
ROLLBACK = "rollback"  # a spec's edits were taken out of a file
RESET = "reset"  # the file is pip's bytes again (reinstalled): earlier entries no longer hold
SUPERSEDE = "supersede"  # as reset, after an upgrade: the entries were for another version
COMMIT = "commit"  # marker: every entry of `txn` took effect
ABORT = "abort"  # marker: `txn` was undone by a repair; its entries never took effect
ACTIONS = (APPLY, ROLLBACK, RESET, SUPERSEDE, COMMIT, ABORT)

if TYPE_CHECKING:
    from typing import TypedDict

    Entry = Dict[str, Any]

    # Wire shapes, for the type checker only: at run time the agent handles plain dicts
    # (no `typing` import on a host), and these classes are never created.

    class _WriteBase(TypedDict):
        path: str
        expect_sha256: Optional[str]  # None: the file must not exist yet (created)

    class Write(_WriteBase, total=False):
        """One file of a commit: exactly one of `text`, `restore_sha256` or `delete`."""

        text: str
        restore_sha256: str
        delete: bool

    class BackupSeed(TypedDict):
        """Bytes the controller has (pip's), stored as a backup before the entries."""

        sha256: str
        text: str

    class _CheckBase(TypedDict):
        name: str
        module: str

    class Check(_CheckBase, total=False):
        """One import check or probe: `module` imported, then `code` run, in `python -I`."""

        code: str
        timeout: float

    class CommitAnswer(TypedDict):
        """What a commit did (before "ok", "protocol", "pid" are added)."""

        txn: str
        written: List[str]
        notes: List[str]
        restart_required: List[Dict[str, Any]]


def error(kind: str, message: str) -> Dict[str, Any]:
    return {"ok": False, "kind": kind, "error": message}


def apply_entry(
    *,
    spec: str,
    spec_hash: str,
    package: str,
    version: Optional[str],
    file: str,
    path: str,
    before: Optional[str],
    after: str,
    edits: List[Any],
    record_sha256: Optional[str] = None,
    checks: Optional[List[Dict[str, Any]]] = None,
    reason: str = "",
    relies_on: Optional[List[str]] = None,
    level: Optional[str] = None,
    base: Optional[str] = None,
    versions: Optional[str] = None,
) -> Entry:
    """One spec's change to one file. `before` None: vpatch created the file (add_file).
    `edits` and `checks` are what `rollback ID`/`verify ID` use when no spec file is at hand;
    `version` and `record_sha256` say which release's bytes the entry was made against.

    Optional keys (absent in older journals, which fold as before):
    `relies_on`: the specs whose edits already held this spec's code when it was applied
    (before == after): rolling one of them back keeps this spec's edits, applied for real.
    `level`: the check level the spec was verified at (static, import, full); a later partial
    rollback re-runs its checks no deeper than that.
    `base`: the file's base from this entry on (a backup): the bytes with vpatch's edits taken
    out but the hand edits kept (`apply --force` on a drifted file, `--adopt` of a file with
    other hand edits), so every rollback keeps those hand edits.
    `versions`: the range of the variant applied: after an upgrade, whether the release now
    installed is one the spec's edits were meant for (a bare `status` has no spec file)."""
    out = {
        "action": APPLY,
        "spec": spec,
        "spec_hash": spec_hash,
        "package": package,
        "version": version,
        "record_sha256": record_sha256,
        "file": file,
        "path": path,
        "before": before,
        "after": after,
        "edits": edits,
        "checks": checks or [],
        "reason": reason,
    }
    if relies_on:
        out["relies_on"] = list(relies_on)
    if level is not None:
        out["level"] = level
    if base is not None:
        out["base"] = base
    if versions is not None:
        out["versions"] = versions
    return out


def rollback_entry(
    applied: Entry, before: Optional[str], after: Optional[str], reason: str
) -> Entry:
    """Takes the spec of `applied` out of its file (`after` None: the file was removed)."""
    keep = ("spec", "spec_hash", "package", "version", "file", "path")
    out = {k: applied.get(k) for k in keep}
    out.update(action=ROLLBACK, before=before, after=after, reason=reason)
    return out


def retire_entry(path: str, superseded: bool, version: Optional[str], reason: str) -> Entry:
    """Every earlier entry of `path` stops counting (the file is pip's bytes again)."""
    return {
        "action": SUPERSEDE if superseded else RESET,
        "path": path,
        "version": version,
        "reason": reason,
    }


def marker(txn: str, abort: bool = False) -> Entry:
    return {"action": ABORT if abort else COMMIT, "txn": txn}


# What fingerprint() leaves out of an inspect answer: texts (their sha256 is in), amounts that
# move on their own (free bytes), the report-only warnings and restart scan, and the envelope.
_ANSWER_VOLATILE = (
    "ok",
    "protocol",
    ENDED,
    "pid",
    "uid",
    "dropped_from",
    "host",
    "then",
    "fingerprint",
    "warnings",
    "restart_required",
    "rollout",
    "seen",
    "baked",
    "unverified",
)
_FILE_VOLATILE = ("text", "cached", "free", "record_text")
_JOURNAL_VOLATILE = ("current_text", "base_text")
_STATE_VOLATILE = ("free",)


def fingerprint(answer: Dict[str, Any]) -> str:
    """sha256 of everything in an inspect answer a plan is made from, texts by their hashes.

    Both sides compute it with this one function: the controller on the answer it predicts a
    host will give (the last one it saw), the agent on the answer it just made. Equal means a
    plan made from the prediction is the plan the real answer would give, so the agent may run
    the commit that came with it in the same exchange (then_if). Left out: texts (covered by
    their sha256, and base_text by the backup's name), free bytes (the commit stages every
    byte before it journals anything, so a full disk still fails cleanly), warnings and the
    restart scan (the report takes them from the real answer), and the host's name (no plan
    reads it, and a fleet's alike hosts then share one fingerprint)."""
    from . import fsops, wire  # the agent's own JSON and sha256: no json/hashlib import there

    return fsops.sha256_bytes(wire.dumps(stable(answer), sort_keys=True).encode("ascii"))


def stable(answer: Dict[str, Any]) -> Dict[str, Any]:
    """The part of an inspect answer that `fingerprint` hashes: the answer without what moves
    on its own (the volatility lists above). Two answers of one unchanged host are equal here,
    whatever their free bytes, pids or warnings."""
    view = {k: v for k, v in answer.items() if k not in _ANSWER_VOLATILE}
    view["packages"] = {
        name: dict(
            pkg,
            files={
                rel: _without(info, _FILE_VOLATILE)
                for rel, info in (pkg.get("files") or {}).items()
            },
        )
        for name, pkg in (answer.get("packages") or {}).items()
    }
    view["journal"] = {
        p: _without(st, _JOURNAL_VOLATILE) for p, st in (answer.get("journal") or {}).items()
    }
    view["state"] = _without(answer.get("state") or {}, _STATE_VOLATILE)
    return view


def _without(d: Dict[str, Any], keys: Any) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}
