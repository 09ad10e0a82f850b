"""A command run's shared state lives in its exchange.RunContext, never in a module (issue 27):
what one run learns (texts, rewrites, counts) is that run's alone, against a real agent in a
real stand-in venv."""

from __future__ import annotations

import ast
from pathlib import Path

from patcher import engine, exchange
from patcher.plan import Options
from patcher.spec import load_spec
from patcher.transports.pipe import LocalTransport
from tests.conftest import Env
from tests.support.standin_specs import SPEC_A, write

PATCHER = Path(engine.__file__).parent
# The executors that carry a run: none of them may keep its state at module level.
EXECUTORS = ("engine.py", "exchange.py", "factcache.py", "rewrite_cache.py")
# Not run state: a memo of a pure function of an immutable str (sha256 of a text, keyed by its
# identity) and the counter that makes temp file names unique in the process.
NOT_RUN_STATE = {"factcache.py": {"_SHAS", "_serial"}}
_MUTABLE = (ast.Dict, ast.Set, ast.List, ast.DictComp, ast.SetComp, ast.ListComp, ast.Call)


def _module_state(path: Path) -> list[str]:
    """Module-level names bound to a container or an object made at import time."""
    found = []
    for node in ast.parse(path.read_text()).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if isinstance(value, _MUTABLE) and not _is_type_alias(value):
            found += [ast.unparse(t) for t in targets if ast.unparse(t) != "__all__"]
    return found


def _is_type_alias(value: ast.expr) -> bool:
    """`X = dict[str, Any]`, `Literal[...]`, `Callable[...]`: a type, not a container."""
    return isinstance(value, ast.Subscript)


def test_executors_keep_no_run_state_in_modules() -> None:
    found = {
        name: [n for n in _module_state(PATCHER / name) if n not in NOT_RUN_STATE.get(name, ())]
        for name in EXECUTORS
    }
    assert found == {name: [] for name in EXECUTORS}


def test_a_run_learns_and_counts_for_itself(tmp_path: Path, standin_env: Env) -> None:
    spec = load_spec(write(tmp_path, "a.toml", SPEC_A))
    ctx, other = exchange.RunContext(), exchange.RunContext()
    t = LocalTransport(str(standin_env.python))
    try:
        host = engine.run("apply", [spec], t, Options(level="static"), ctx)
        assert host.ok and [p.outcome for p in host.patches] == ["applied"], host
        counted = ctx.stats()
        # inspect, then commit + closing inspect in one exchange; one parse of the file
        assert counted == {
            "libcst_parses": 1,
            "rewrite_cache_hits": 0,
            "agent_exchanges": 2,
            "planned_ahead": 0,
        }
        again = engine.status([], t, Options(level="static"))  # a run of its own
        assert again.ok, again
    finally:
        t.close()
    assert ctx.stats() == counted  # the other run counted for itself
    assert other.stats() == dict.fromkeys(counted, 0) and not other.content
    # The texts this run holds go out as `known` (the agent leaves them out); another run's
    # inspect asks for them again.
    assert exchange.inspect_request(ctx, [spec], None)["known"]
    assert exchange.inspect_request(other, [spec], None)["known"] == []
