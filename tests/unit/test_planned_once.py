"""A plan made ahead on a peer's answer is made once per run and recipe (exchange.RunContext
.planned): every host that guesses on it gets a plan of its own whose results it may fill in
without touching another host's, the rewrite cache's hits count as if each host had planned,
and a host's own stored answer (not a peer's) is planned on per host."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from patcher.plan.base import Plan
from patcher.plan.hostfacts import HostFacts
from patcher.result import FileChange, PatchResult, ProbeResult
from patcher.run.exchange import RunContext


def _maker(ctx: RunContext, made: list[HostFacts]) -> Callable[[HostFacts], Plan | None]:
    def make(facts: HostFacts) -> Plan | None:
        made.append(facts)
        ctx.caches.calls.n = ctx.caches.asked() + 2  # as two rewrites asked of the cache
        res = PatchResult("spec-a", "pkg", "1.0", "applied", files=[FileChange("p", "a", "b")])
        return Plan([res], entries=[{"action": "apply", "spec": "spec-a"}])

    return make


def test_a_peer_answer_is_planned_on_once_and_each_host_gets_its_own_plan() -> None:
    ctx = RunContext()
    peer = cast(HostFacts, object())  # planned() asks only who the facts are
    ctx.peers["request"] = [("fp", {}, peer)]
    made: list[HostFacts] = []
    make = _maker(ctx, made)
    first = ctx.planned(("apply", "spec"), peer, make)
    second = ctx.planned(("apply", "spec"), peer, make)
    assert first is not None and second is not None
    assert made == [peer]  # planned once
    assert ctx.caches.stats["hits"] == 2  # the copy's two rewrites, from the cache
    assert first is not second and first.results[0] is not second.results[0]
    first.results[0].probes.append(ProbeResult("import", False, "boom"))
    first.results[0].outcome = "failed"
    assert second.results[0].probes == [] and second.results[0].outcome == "applied"
    assert first.entries == second.entries and first.entries is not second.entries
    third = ctx.planned(("apply", "spec"), peer, make)  # the entry was never handed out
    assert (
        third is not None and third.results[0].outcome == "applied" and not third.results[0].probes
    )
    # another recipe (another command, other specs or options) is planned on afresh
    assert ctx.planned(("rollback", "spec"), peer, make) is not None and len(made) == 2


def test_facts_that_are_no_peer_are_planned_on_per_call() -> None:
    ctx = RunContext()
    own = cast(HostFacts, object())  # a host's own stored answer: not in ctx.peers
    made: list[HostFacts] = []
    make = _maker(ctx, made)
    ctx.planned(("apply", "spec"), own, make)
    ctx.planned(("apply", "spec"), own, make)
    assert made == [own, own] and ctx.caches.stats["hits"] == 0 and not ctx.ahead_plans
