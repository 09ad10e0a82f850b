"""A command run's shared state lives in its exchange.RunContext (or an object its command
made and passed, or its transport), never in a module (issue 27): what one run learns (texts,
rewrites, counts, pip's bytes, a cluster's nodes) is that run's alone. Kept for every module of
patcher/ from the code's own ast, and shown against a real agent in a real stand-in venv."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from patcher.plan.base import Options
from patcher.run import engine, exchange
from patcher.specs.model import load_spec
from patcher.transports.pipe import LocalTransport
from tests.conftest import Env
from tests.support.standin_specs import SPEC_A, write

PATCHER = Path(engine.__file__).parent.parent

# Module state that is not a run's, each with why. Everything else a module binds at import is
# a constant: a literal table nothing writes, a compiled regex, a frozenset, a str or number.
NOT_RUN_STATE = {
    # pure memos: a function of immutable input, the same for every run
    "caches/facts.py:_SHAS": "sha256 of a text keyed by its identity, the str held (immutable)",
    "result.py:_FIELDS": "a dataclass type's field names (what dataclasses.fields says)",
    "plan/base.py:_memo_diff": "lru_cache of a unified diff of two immutable strs",
    "caches/rewrites.py:code_version": "cache: the hash of the installed rewrite/ sources",
    "specs/cache.py:_code_key": "cache: the installed format's sources and pydantic's version",
    "transports/bundle.py:agent_bundle": "cache: the installed agent/*.py as one bundle line",
    "transports/bundle.py:agent_key": "cache: that bundle's hash (its name on a host)",
    "authoring/sysdiff.py:_memory_files": "cache: whether this system has memfd_create and /dev/fd",
    "serving/stats.py:_NORMAL": "statistics.NormalDist(): the standard normal (immutable)",
    "transports/share.py:_made": "memo: the -F file for an ssh_config as it is on disk",
    "transports/share.py:_hashed": "memo: a file's digest keyed by its path, inode, size, mtime",
    "transports/share.py:_named": "memo: the files an ssh_config names, keyed by its digest",
    "transports/paramiko_ssh.py:_quiet_paramiko": "cache: a once-per-process logging setting",
    "inventory/ansible.py:_loader": "cache: PyYAML's SafeLoader class plus Ansible's two tags",
    "rewrite/__init__.py:rewrites": "cache: the op table's rewrite functions (constant)",
    # objects made at import that nothing writes
    "specs/validate.py:_edits": "pydantic's validator of a list of edits (stateless once built)",
    "wheels/matrix.py:_RULES": "a str: the hash of spec.py, plan.py and rewrite/ as installed",
    "transports/__init__.py:DEFAULTS": "a Settings() NamedTuple (immutable)",
    # the agent: a process of its own per host and run (it ends with os._exit after its last
    # answer), so its module state is that run's, gone with it
    "agent/__init__.py:global _DROPPED_FROM": "who stage 0 dropped from, set once at start",
    "agent/__init__.py:global _REFUSED": "why stage 0 refused to drop, set once at start",
    "agent/confine.py:_SITE": "the interpreter's site dirs, read once per agent",
    "agent/confine.py:_SYSCONFIG": "sysconfig's purelib and platlib, read once per agent",
    "agent/faults.py:_ARMED": "TEST-ONLY: the armed fault point of this agent",
    "agent/faults.py:REACHED": "TEST-ONLY: fault points the current request passed",
    "agent/fsops.py:_COMPILED": "the last compile_check's code, cleared with every request",
    "agent/rootscan.py:STATE": "who the agent works as, settled once at start",
    "agent/privsep.py:_PROBE_USERS": "the closure's answer per package set, once per agent",
    # the process's terminal, not a run's: made anew by configure() at each command's start
    "output/progress.py:_state": "-q/-v/--json and the one live line on this process's stderr",
    "output/progress.py:global _state": "configure() makes it anew for each command",
    "output/colour.py:global _choice": "--color for this process: configure() sets it per command",
    "pyast.py:_LOCK": "guards CPython's own parser state (shared by threads before 3.13)",
}
# Calls whose result at import is a constant (immutable, or a str/number read once).
_PURE_CALLS = {
    "re.compile",
    "frozenset",
    "tuple",
    "int",
    "str",
    "getattr",
    "os.environ.get",
    "Path",
    "TypeVar",
    "cst.SimpleWhitespace",
    "Profile",  # serving.model's frozen rows of counter names: a new engine is one more
}
# Calls that make a container: run state when something writes it, a table when nothing does.
_CONTAINER_CALLS = {"dict", "list", "set", "dict.fromkeys", "str.maketrans", "defaultdict"}
_DISPLAYS = (ast.Dict, ast.Set, ast.List, ast.DictComp, ast.SetComp, ast.ListComp)
_WRITES = {
    "append",
    "extend",
    "insert",
    "add",
    "update",
    "setdefault",
    "pop",
    "popitem",
    "clear",
    "remove",
    "discard",
    "sort",
    "reverse",
    "__setitem__",
}
_CACHES = {"cache", "lru_cache", "functools.cache", "functools.lru_cache"}


def _callee(node: ast.expr) -> str:
    """`re.compile` of `re.compile(...)`; `functools.lru_cache` of `functools.lru_cache(...)(f)`."""
    while isinstance(node, ast.Call):
        node = node.func
    return ast.unparse(node)


def _bindings(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) of every module-level assignment."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield ast.unparse(target), node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            yield ast.unparse(node.target), node.value


def _written(trees: dict[str, ast.Module], module: str, name: str) -> bool:
    """Whether any module writes the container `name` of `module`: a write method on it,
    an item or slice assigned or deleted (`NAME` in its own module, `x.NAME` anywhere)."""

    def ref(node: ast.expr, here: str) -> bool:
        if isinstance(node, ast.Name):
            return here == module and node.id == name
        return isinstance(node, ast.Attribute) and node.attr == name

    for here, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in _WRITES and ref(node.func.value, here):
                    return True
            targets: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            if any(isinstance(t, ast.Subscript) and ref(t.value, here) for t in targets):
                return True
    return False


def module_state(sources: dict[str, str] | None = None) -> list[str]:
    """`module:name` of every piece of module state in patcher/ that may hold a run's data:
    a container some module writes, an object made by a call at import, a `global`
    statement (`module:global NAME`), a functools cache; `sources` (relative path -> text):
    modules to check instead of the files (the test of the checker itself)."""
    texts = sources or {
        str(p.relative_to(PATCHER)): p.read_text() for p in sorted(PATCHER.rglob("*.py"))
    }
    trees = {m: ast.parse(t, m) for m, t in texts.items()}
    found: list[str] = []
    for module, tree in trees.items():
        for name, value in _bindings(tree):
            if name == "__all__" or isinstance(value, ast.Subscript):  # a type alias
                continue
            callee = _callee(value) if isinstance(value, ast.Call) else ""
            container = isinstance(value, _DISPLAYS) or callee in _CONTAINER_CALLS
            if container and _written(trees, module, name):
                found.append(f"{module}:{name}")
            elif callee and not container and callee not in _PURE_CALLS:
                if not (isinstance(value.func, ast.Attribute) and value.func.attr == "replace"):
                    found.append(f"{module}:{name}")  # (str.replace of a constant: a str)
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found += [f"{module}:global {n}" for n in node.names]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(_callee(d) in _CACHES for d in node.decorator_list):
                    found.append(f"{module}:{node.name}")
    return sorted(set(found))


def test_no_module_keeps_run_state() -> None:
    """What one run learns lives in its RunContext (or the object its command made and
    passed, or its transport): never in a module, where a second run in the process (the
    tests, an Ansible worker) would find it. The allowlist holds no stale entry."""
    found = module_state()
    assert [f for f in found if f not in NOT_RUN_STATE] == []
    assert [k for k in NOT_RUN_STATE if k not in found] == []


def test_the_state_check_can_fail() -> None:
    """The checker sees what it must refuse (a set a function fills, a dict another module
    writes, a `global`, an lru_cache, an object made at import) and lets constants be."""
    planted = {
        "specs/catalog.py": "_warned: set[str] = set()\ndef warn(why):\n    _warned.add(why)\n",
        "authoring/handedit.py": "_PRISTINE = {}\nTABLE = {'a': 1}\nWORDS = re.compile('x')\n",
        "run/engine.py": (
            "from patcher.authoring import handedit\ndef f(p):\n    handedit._PRISTINE[p] = 1\n"
        ),
        "transports/ray.py": "_N = None\ndef make():\n    global _N\n    _N = 1\n",
        "plan/apply.py": (
            "import functools\n@functools.lru_cache(maxsize=None)\ndef facts(h): ...\n"
        ),
        "run/exchange.py": "import threading\n_LOCK = threading.Lock()\n_X = [1]\n_X[:] = []\n",
        "result.py": "_FIELDS = dict.fromkeys('ab')\nGOOD = frozenset({'applied'})\n",
    }
    assert module_state(planted) == [
        "authoring/handedit.py:_PRISTINE",
        "plan/apply.py:facts",
        "run/exchange.py:_LOCK",
        "run/exchange.py:_X",
        "specs/catalog.py:_warned",
        "transports/ray.py:global _N",
    ]


def test_a_run_learns_and_counts_for_itself(tmp_path: Path, standin_env: Env) -> None:
    spec = load_spec(write(tmp_path, "a.toml", SPEC_A))
    ctx, other = exchange.RunContext(), exchange.RunContext()
    t = LocalTransport(str(standin_env.python))
    try:
        host = engine.apply([spec], t, Options(level="static"), ctx=ctx)
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
