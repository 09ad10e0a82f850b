"""`vpatch rollout --resume`, on one host: its journal read back, the host looked at again,
and what the resume does with it (patcher.rollout.resume decides; here is only the I/O).

A stored window (or a baseline, or a finished `kept`) describes the host as it was then. A
person may have changed it since: rolled the patch back while the parked lease allowed it,
applied it again, upgraded the package, restarted the server. So before anything of the
journal is judged or continued from, the host is inspected again (`seen_for`: the same
snapshot the agent stamped on each step entry, patcher/agent/seen.py) and compared with the
newest step's (rolloutresume.changes). A host that changed is `changed_since`: nothing is
judged or run there; the verdict, with what changed, goes into its journal in one locked step
with the run's lease given up (taken over first when its controller is gone), so `vpatch
status` says the same and the next rollout finds the host free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from patcher.agent import protocol
from patcher.errors import VpatchError
from patcher.rollout import decide, resume, walk
from patcher.rollout.lease import Refused, ttl_for
from patcher.serving.judging import judge

if TYPE_CHECKING:
    from patcher.result import HostResult


def resume_host(h: walk.Host, reported: list[tuple[str, bool]] | None) -> resume.Resume:
    """Read the host's journal steps, look at the host again, and decide
    (rolloutresume.resume, rolloutresume.changes); `h` then holds the steps and measures its
    journal recorded (to walk on from, on `continue`), and on `changed` what changed."""
    ids = [s.id for s in h.specs]
    request: dict[str, Any] = {
        "op": "inspect",
        "packages": {},
        "state_dir": h.state_dir,
        "seen_for": ids,
    }
    ans = walk._journal(h, request, "cannot read the host's journal", None)
    steps, problems = resume.read_steps(ans.get("rollout"))
    h.result.warnings += problems
    decision = resume.resume(h.plan, h.run, reported, steps, ids)
    mine = [s for s in steps if s.run == h.run and s.walked()]
    h.done = list(decision.done)
    h.phases = [s.phase() for s in mine]
    for s in mine:
        m = resume.measures_of(s.measures)
        if s.step == decide.BASELINE:
            h.before = m
        elif s.step == decide.WINDOW:
            h.after = m
        elif s.step == decide.GATES:
            h.undecided = s.undecided
    decision = resume.looked(h.plan, h.run, decision, steps, ans.get("seen"))
    if decision.action == resume.RESUME_CHANGED:
        h.changed = decision.why
        return decision
    if decision.action == resume.RESUME_DONE and h.after is not None:
        h.judged = decide.settle(judge(h.before, h.after, h.gates))
    return decision


def changed(h: walk.Host, recorded: bool = False) -> HostResult:
    """The result of a host found changed (h.changed), its verdict journaled: the run's
    lease taken (over, when its controller is gone) and given up with the entry, so nothing
    of this run holds the host any more. A lease the host refuses (another controller of
    this run still beats) leaves the journal as it is, said in a warning. `recorded`: the
    journal says so already (an earlier --resume found it): nothing is asked of the host."""
    if recorded:
        return walk.finish(h)
    lease = walk.lease_of(h)
    last, ok = h.done[-1] if h.done else (decide.BASELINE, True)
    entry = protocol.step_entry(
        run=h.run,
        step=last,
        ok=ok,
        specs=[s.id for s in h.specs],
        detail=h.changed,
        verdict=decide.CHANGED_SINCE,
    )
    try:
        lease.take(ttl_for(decide.GATES, h.cfg, walk.HEALTH_CALL), resume=True)
        walk._journal(h, protocol.step_request(entry, h.state_dir, lease.release()), "", None)
    except Refused as exc:
        h.result.warnings.append(f"the verdict is not in the host's journal: {exc.error}")
    except VpatchError as exc:
        h.result.warnings.append(f"the verdict is not in the host's journal: {exc.message}")
    return walk.finish(h)
