"""Issue 25 item 5 on paper: for random stacks of specs from the golden rewrite cases, whatever
apply wrote verify accepts, and rollback-all gives the base bytes (tests/support/stackprops.py).

Derandomized with few examples by default (CI); VPATCH_PROPERTY_EXAMPLES=N runs N locally.
The same property on real files and real `python -I` agents:
tests/integration/test_stack_property.py.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patcher.plan.apply import plan_apply
from patcher.plan.base import Options
from patcher.plan.rollback import plan_rollback
from patcher.plan.verify import verify_spec
from patcher.result import GOOD
from tests.support.stackprops import PICKS, SHARED, PaperHost, Pick, base_files, specs_of

EXAMPLES = int(os.environ.get("VPATCH_PROPERTY_EXAMPLES", "25"))
pick = st.one_of(st.sampled_from(PICKS), st.sampled_from(SHARED))


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    picks=st.lists(pick, min_size=1, max_size=5),
    one_shot=st.booleans(),
    keep=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_apply_verify_rollback(picks: list[Pick], one_shot: bool, keep: list[bool]) -> None:
    specs = specs_of(picks)
    base = base_files(picks)
    host = PaperHost.fresh(base)
    opts = Options(level="static")
    good: set[str] = set()  # what apply called in place: applied, or already there
    for batch in [specs] if one_shot else [[s] for s in specs]:
        plan = plan_apply(batch, host.facts(), opts)
        host.commit(plan)
        good |= {r.id for r in plan.results if r.outcome in GOOD["apply"]}
    facts = host.facts()
    for spec in specs:
        res, _ = verify_spec(spec, facts)
        if spec.id in good:
            assert res.outcome in GOOD["verify"], (spec.id, res.outcome, res.message)
        assert plan_apply([spec], facts, opts).writes == [], spec.id
    # a partial rollback keeps every other spec in place; then everything out: the base bytes
    out = {s.id for s, k in zip(specs, keep, strict=False) if not k}
    part = plan_rollback(out, host.facts(), opts)
    if out and all(r.outcome in ("rolled_back", "not_applied") for r in part.results):
        host.commit(part)
        facts = host.facts()
        for spec in specs:
            if spec.id in good and spec.id not in out:
                res, _ = verify_spec(spec, facts)
                assert res.outcome in GOOD["verify"], (spec.id, res.outcome, res.message)
    whole = plan_rollback(None, host.facts(), opts)
    assert all(r.outcome == "rolled_back" for r in whole.results), [
        (r.id, r.outcome, r.message) for r in whole.results
    ]
    host.commit(whole)
    assert host.files == base
    assert not host.facts().journal
