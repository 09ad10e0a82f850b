"""The rollout lease on the host (`vpatch rollout`: one rollout per environment at a time).
What is decided is agent/leasing.py's; here the file, the clock, the lock.

The lease is `<state dir>/rollout.lease`, one JSON object (leasing.record). Every change is
made under the environment's lock (agent/lock.py, the one commits take), the lease read and
its replacement written in that one locked step: two controllers asking at once are answered
one after the other, and only one of them is granted. It is read by descriptor without
following a link and checked like every state file (statedir.open_entry: a regular file,
ours, one link), and written as a new file opened O_CREAT|O_EXCL|O_NOFOLLOW in the state dir,
fsync'ed and renamed over the old one (statedir.replace_entry): a reader never sees half a
lease.

The same file gates commits (commit.op_commit, `check_commit`): an apply or rollback of a
spec a live rollout of another run holds the lease for is refused (kind `leased`), naming the
holder. A walk's last step gives the lease up in its own locked step (restart.record).
"""

from __future__ import annotations

import os
import time

from . import fsops, leasing, lock, protocol, statedir, wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

MAX_LEASE_BYTES = 64 << 10


def _stamp(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def read(state: statedir.State) -> Optional[Dict[str, Any]]:
    """The lease (None: there is none). One vpatch did not write is refused, naming it:
    nothing of it is believed, and nothing replaces it unasked."""
    path = state.sub(protocol.LEASE_FILE)
    try:
        fd = state.open_file(protocol.LEASE_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = fsops.read_fd(fd, MAX_LEASE_BYTES, path)
    finally:
        os.close(fd)
    try:
        lease = wire.loads(data.decode("utf-8"))
    except ValueError:
        lease = None
        why = "not JSON"
    except RecursionError:  # 64 KiB of `[`: nested past the parser's stack, never a lease
        lease = None
        why = "JSON nested too deep"
    else:
        why = leasing.lease_error(lease)
    if why:
        raise statedir.StateError(
            "unsafe vpatch state: %s is not a rollout lease vpatch wrote (%s); check who "
            "made it, and move it away" % (path, why)
        )
    out: Dict[str, Any] = lease
    return out


def _write(state: statedir.State, lease: Dict[str, Any]) -> None:
    """The lease replaced whole (statedir.replace_entry); given the environment's owner with
    what this run made (`state.adopt`)."""
    data = (wire.dumps(lease) + "\n").encode("ascii")
    statedir.replace_entry(state.fd, protocol.LEASE_FILE, data)
    state.made.append((protocol.LEASE_FILE,))


def remove(state: statedir.State) -> None:
    """Give the lease up (the caller holds the lock and has read it: it is the holder's)."""
    try:
        os.unlink(protocol.LEASE_FILE, dir_fd=state.fd)
    except FileNotFoundError:
        return
    os.fsync(state.fd)


def _start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (/proc/PID/stat, field 22): with
    the pid, it names one process (a pid is reused, the pair is not). None: no /proc."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode("ascii") if len(fields) > 19 else None


def alive(agent: Any) -> Optional[bool]:
    """Whether the session agent that holds a lease still runs (None: not known: no agent
    recorded, or no /proc to ask)."""
    if not isinstance(agent, dict) or _start_time(os.getpid()) is None:
        return None
    return bool(_start_time(int(agent["pid"])) == agent["start"])


def me() -> Optional[Dict[str, Any]]:
    start = _start_time(os.getpid())
    return None if start is None else {"pid": os.getpid(), "start": start}


def _locked(state: statedir.State) -> lock.Locked:
    opener = lambda: state.open_file(statedir.LOCK, os.O_RDWR, create=True)  # noqa: E731
    return lock.Locked(state.sub(statedir.LOCK), 60.0, opener)


def op_lease(req: Dict[str, Any]) -> Dict[str, Any]:
    """take, beat or park (protocol.lease_request); the answer says what it came to."""
    from .facts import state_dir

    action = req.get("action")
    run = req.get("run")
    if action not in protocol.LEASE_ACTIONS:
        raise protocol.Refused("rollout_lease: no action %r" % (action,), protocol.INPUT)
    if not isinstance(run, str) or not run.isalnum() or len(run) > 64:
        raise protocol.Refused("rollout_lease: the run is not an id", protocol.INPUT)
    if not isinstance(req.get("who"), str) or not isinstance(req.get("ttl"), (int, float)):
        raise protocol.Refused("rollout_lease: no who or ttl", protocol.INPUT)
    if not 0 <= req["ttl"] <= leasing.MAX_TTL:  # (nan fails both) a promise vpatch never makes
        raise protocol.Refused(
            "rollout_lease: a ttl of %r s is not one vpatch promises (0..%g)"
            % (req["ttl"], leasing.MAX_TTL),
            protocol.INPUT,
        )
    # the state dir as commit opens it (statedir.open_state, created 0700), without importing
    # commit, which imports this module for its own lease check
    state = statedir.open_state(state_dir(req), create=True)
    assert state is not None
    try:
        with _locked(state):
            lease = read(state)
            now = time.time()
            living = alive(lease.get("agent")) if lease is not None else None
            result = leasing.decide(str(action), lease, req, now, living)
            if result == leasing.RELEASED:
                assert lease is not None
                _log_release(state, lease, str(req["who"]), _stamp(now))
                remove(state)
            elif result in leasing.GRANTED:
                agent = me() if req.get("session") else None
                new = leasing.record(result, lease, req, now, _stamp(now), agent)
                _write(state, new)
                lease, living = new, (True if agent else None)
    finally:
        state.adopt()  # owned like the env, as commit leaves it (commit._adopt_state)
        state.close()
    return {
        "granted": result in leasing.GRANTED,
        "result": result,
        "holder": lease,
        "age": round(max(0.0, now - lease["beat"]), 3) if lease is not None else None,
        "stale": leasing.is_stale(lease, now, living) if lease is not None else False,
    }


def _log_release(state: statedir.State, lease: Dict[str, Any], who: str, stamp: str) -> None:
    """The release in the host's journal (the caller holds the lock): a note on the run's
    newest step (`released`: the walk is not over, --resume of its report may go on), so
    `vpatch status` names who gave the lease up and whose it was. A run with no step on the
    host (its lease taken, its baseline never recorded) has none to note it on."""
    from . import journal

    steps: list[Any] = []
    try:
        journal.parse(state.read_journal(), None, steps)
    except (OSError, statedir.StateError):
        return
    mine = [e for e in steps if e.get("run") == lease["run"]]
    if not mine:
        return
    last = mine[-1]
    keep = ("action", "run", "step", "ok", "specs", "started", "seconds")
    note = {k: last[k] for k in keep if k in last}
    note["detail"] = (
        "rollout lease released by %s; it was %s's, whose controller was gone"
        % (who[: leasing.MAX_FIELD], lease["who"])
    )[: protocol.STEP_DETAIL_MAX]
    note["released"] = True
    note["ts"] = stamp
    fd = state.open_file(statedir.JOURNAL, os.O_RDWR | os.O_APPEND, create=True)
    try:
        journal.append(fd, [note])
    finally:
        os.close(fd)


def check_commit(state: statedir.State, req: Dict[str, Any]) -> None:
    """Refuse (kind `leased`) a commit of a spec a live rollout of another run holds the
    lease for. Called under the lock the commit holds."""
    specs = [str(e.get("spec")) for e in req.get("journal") or [] if isinstance(e, dict)]
    specs = [s for s in specs if s != "None"]
    if not specs:
        return
    lease = read(state)
    if lease is None:
        return
    now = time.time()
    run = req.get("lease")
    mine = run if isinstance(run, str) else None
    if leasing.blocks(lease, mine, specs, now, alive(lease.get("agent"))):
        held = sorted(set(lease["specs"]) & set(specs))
        raise protocol.Refused(
            "%s holds this environment for %s; nothing was changed"
            % (leasing.describe(lease, now - lease["beat"]), ", ".join(held)),
            protocol.LEASED,
        )
