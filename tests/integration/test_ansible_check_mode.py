"""The Ansible agent module in check mode refuses every request that would write, chained or
not (issue 24): its guard looked at the top-level op only, so a `verify` (or an `inspect`)
carrying a commit in `then`/`then_if` wrote the host in `--check`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from patcher.plan.apply import plan_apply
from patcher.plan.base import Options
from patcher.plan.hostfacts import HostFacts
from patcher.run import exchange
from patcher.specs.model import load_spec
from patcher.transports.bundle import BOOT, BOOT0, agent_bundle
from patcher.transports.pipe import LocalTransport
from tests.conftest import Env, fingerprint
from tests.support.ansible_module import run_agent_module
from tests.support.standin_specs import REL, SPEC_A, write


def commit_for(env: Env, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real commit of SPEC_A for `env`, planned the way the controller plans it, and the
    inspect it was planned on."""
    spec = load_spec(write(tmp_path, "a.toml", SPEC_A))
    # A run of its own: its content cache is empty, so the texts come back in this answer.
    ctx = exchange.RunContext()
    inspect = exchange.inspect_request(ctx, [spec], None)
    t = LocalTransport(str(env.python))
    try:
        facts = HostFacts.from_answer(t.call(inspect))
    finally:
        t.close()
    plan = plan_apply([spec], facts, Options(level="static"), ctx.caches.rewrite)
    assert plan.writes
    return exchange.commit_request(plan, None), inspect


@pytest.mark.parametrize("how", ["then-of-verify", "then-of-inspect", "then_if", "deeper"])
def test_check_mode_refuses_a_chained_commit(tmp_path: Path, standin_env: Env, how: str) -> None:
    commit, inspect = commit_for(standin_env, tmp_path)
    verify = {"op": "verify", "checks": []}
    request = {
        "then-of-verify": dict(verify, then=[commit]),
        "then-of-inspect": dict(inspect, then=[commit]),
        "then_if": dict(inspect, then_if={"any": [verify], "x": [commit]}),
        "deeper": dict(verify, then=[dict(verify, then=[commit])]),
    }[how]
    before = fingerprint(standin_env.root)
    args = {
        "request": json.dumps(request),
        "agent": agent_bundle().decode(),
        "boot": BOOT,
        "boot0": BOOT0,
        "python": str(standin_env.python),
        "_ansible_check_mode": True,
    }
    res = run_agent_module(args, tmp_path)
    assert res.get("failed") and "in check mode" in res["msg"], res
    assert res["kind"] == "check_mode"
    assert fingerprint(standin_env.root) == before
    # The same request outside check mode is an ordinary write: the guard is what refused it.
    if how == "then-of-verify":
        done = run_agent_module({**args, "_ansible_check_mode": False}, tmp_path)
        assert '"ok": true' in done["answer"], done
        assert "kimi_k2" in standin_env.file(REL).read_text()


def test_check_mode_still_allows_what_only_reads(tmp_path: Path, standin_env: Env) -> None:
    _commit, inspect = commit_for(standin_env, tmp_path)
    chained = dict(inspect, then_if={"fp": [{"op": "verify", "checks": []}, inspect]})
    res = run_agent_module(
        {
            "request": json.dumps(chained),
            "agent": agent_bundle().decode(),
            "boot": BOOT,
            "boot0": BOOT0,
            "python": str(standin_env.python),
            "_ansible_check_mode": True,
        },
        tmp_path,
    )
    assert not res.get("failed"), res
    assert json.loads(res["answer"])["ok"] is True
