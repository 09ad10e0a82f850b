"""The agent's chained requests (patcher/agent/chain.py) and the fingerprint both sides compute
(patcher/agent/protocol.py), against a real agent in a real stand-in venv."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from patcher.agent import protocol
from patcher.plan.base import sha256_text
from patcher.transports.pipe import LocalTransport
from tests.conftest import Env
from tests.support.standin_specs import REL

PACKAGES = {"servekit": [REL]}


@pytest.fixture
def agent(standin_env: Env) -> Any:
    t = LocalTransport(str(standin_env.python))
    yield t
    t.close()


def _inspect(env: Env, **more: Any) -> dict[str, Any]:
    return {"op": "inspect", "packages": PACKAGES, "state_dir": str(env.root / ".vpatch"), **more}


def _commit(env: Env, before: str, after: str) -> dict[str, Any]:
    path = str(env.file(REL))
    return {
        "op": "commit",
        "state_dir": str(env.root / ".vpatch"),
        "writes": [{"path": path, "expect_sha256": sha256_text(before), "text": after}],
        "journal": [
            protocol.apply_entry(
                spec="s",
                spec_hash="0" * 16,
                package="servekit",
                version="1.0.0",
                file=REL,
                path=path,
                before=sha256_text(before),
                after=sha256_text(after),
                edits=[],
            )
        ],
    }


def test_fingerprint_ignores_what_moves_and_sees_what_decides(agent: Any, standin_env: Env) -> None:
    answer = agent.call(_inspect(standin_env))
    fp = protocol.fingerprint(answer)
    assert protocol.fingerprint(json.loads(json.dumps(answer))) == fp  # the wire keeps it
    [info] = answer["packages"]["servekit"]["files"].values()
    assert info["text"] and "free" in info and "free" in answer["state"]

    def changed(edit: Any) -> bool:
        a = copy.deepcopy(answer)
        edit(a, next(iter(a["packages"]["servekit"]["files"].values())))
        return protocol.fingerprint(a) != fp

    moves = [
        lambda a, f: f.update(text=None, cached=True, free=1, record_text="x"),
        lambda a, f: a["state"].update(free=7),
        lambda a, f: a.update(warnings=["x"], pid=1, restart_required=[{"pid": 1}], then=[]),
        lambda a, f: a.update(host="another-name"),
    ]
    decides = [
        lambda a, f: f.update(sha256="0" * 64),
        lambda a, f: f.update(writable=False),
        lambda a, f: a["packages"]["servekit"].update(version="1.0.1"),
        lambda a, f: a.update(locked=True),
        lambda a, f: a["state"].update(writable=False),
        lambda a, f: a.update(incomplete=[{"txn": "t"}]),
        lambda a, f: a["journal"].update({"/x": {"applied": {}, "base": None}}),
        lambda a, f: a["python"].update(version="3.9.0"),
    ]
    assert [changed(m) for m in moves] == [False] * len(moves)
    assert [changed(d) for d in decides] == [True] * len(decides)


def test_the_chain_runs_only_on_its_fingerprint(agent: Any, standin_env: Env) -> None:
    target = standin_env.file(REL)
    before = target.read_text()
    after = before.replace('"qwen",', '"qwen",\n            "kimi_k2",')
    chain = [
        _commit(standin_env, before, after),
        {"op": "verify", "checks": [{"name": "import", "module": "servekit.config", "code": ""}]},
        _inspect(standin_env),
    ]
    miss = agent.call(_inspect(standin_env, then_if={"0" * 64: chain}))
    assert miss["ok"] and "then" not in miss and target.read_text() == before
    fp = miss["fingerprint"]
    assert fp == protocol.fingerprint(miss)

    hit = agent.call(_inspect(standin_env, then_if={"1" * 64: [], fp: chain}))
    assert hit["fingerprint"] == fp and target.read_text() == after
    commit, verify, closing = hit["then"]
    assert commit["ok"] and verify["ok"] and [c["ok"] for c in verify["checks"]] == [True]
    [info] = closing["packages"]["servekit"]["files"].values()
    assert info["sha256"] == sha256_text(after) and closing["journal"]
    # The same guess again: the host has moved on, so nothing runs twice.
    again = agent.call(_inspect(standin_env, then_if={fp: chain}))
    assert "then" not in again and again["fingerprint"] == protocol.fingerprint(closing)


def test_a_chain_stops_at_its_first_failure(agent: Any, standin_env: Env) -> None:
    target = standin_env.file(REL)
    before = target.read_text()
    wrong = _commit(standin_env, before + "#", "x = 1\n")  # expects bytes the file has not
    fp = agent.call(_inspect(standin_env, then_if={}))["fingerprint"]
    res = agent.call(_inspect(standin_env, then_if={fp: [wrong, _inspect(standin_env)]}))
    [failed] = res["then"]
    assert failed["ok"] is False and failed["kind"] == protocol.CONFLICT
    assert target.read_text() == before
    # `then` on a commit runs after it the same way (the two-step path's second exchange).
    good = _commit(standin_env, before, before + "# ok\n")
    done = agent.call(dict(good, then=[_inspect(standin_env)]))
    assert done["ok"] and [a["ok"] for a in done["then"]] == [True]


@pytest.mark.parametrize(
    "chain",
    [
        [{"op": "fetch", "url": "http://127.0.0.1:9/"}],
        [{"op": "inspect", "then": [{"op": "inspect"}]}],
        [{"op": "inspect", "then_if": {}}],
        [{"op": "inspect"}] * 17,
        "not a list",
    ],
    ids=["op", "nested-then", "nested-then_if", "too-long", "not-a-list"],
)
def test_chains_the_agent_refuses(agent: Any, standin_env: Env, chain: Any, tmp_path: Path) -> None:
    before = standin_env.file(REL).read_bytes()
    fp = agent.call(_inspect(standin_env, then_if={}))["fingerprint"]
    res = agent.call(_inspect(standin_env, then_if={fp: chain}))
    [refused] = res["then"]
    assert refused["ok"] is False and refused["kind"] == protocol.INPUT, refused
    assert standin_env.file(REL).read_bytes() == before
