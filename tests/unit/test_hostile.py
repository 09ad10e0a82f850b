"""Hostile values: what a spec or a command line carries never reaches a shell, never becomes
code it was not meant to be, and never makes a file invalid.

A spec value is DATA: it must land in the file as a literal that reads back as exactly that
value (`ast.literal_eval`), or the edit is refused. A spec `expr`/`code` is code by design, and
must land as exactly that code (same AST) or be refused. Arguments (--python, --host,
--state-dir) are paths and names, passed as argv or JSON, never through a shell. Each value
that would do something if a shell or an eval saw it touches a marker file; none may appear.
The SSH side (remote command line, state dir and probe names over SSH) is in
tests/integration/test_hostile_ssh.py.
"""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from patcher.errors import HostError, UsageError
from patcher.rewrite import apply_edit
from patcher.specs.model import Edit
from patcher.transports.pipe import LocalTransport
from patcher.transports.ssh import parse_target
from tests import standin
from tests.conftest import Env, vpatch
from tests.support import specs
from tests.support.cases import EDIT

# Per process (values are built at import time); a concurrent run has its own.
MARKERS = Path(tempfile.gettempdir()) / f"vpatch-hostile-markers-{os.getpid()}"

# Each would run `touch MARKERS/<name>` if a shell, an eval or a format string got it.
HOSTILE: list[str] = [
    f"'; touch {MARKERS}/single; '",
    f'"; touch {MARKERS}/double; "',
    f"$(touch {MARKERS}/dollar)",
    f"`touch {MARKERS}/backtick`",
    f"x\ntouch {MARKERS}/newline\n",
    f"x\r\ntouch {MARKERS}/crlf",
    f"__import__('os').system('touch {MARKERS}/eval')",
    f"{{__import__('os').system('touch {MARKERS}/fstring')}}",
    f")]}}; import os; os.system('touch {MARKERS}/close') #",
    "\"\"\" triple \"\"\" ''' triple '''",
    "\\' \\\" \\\\ \\n \\x00 \\N{BULLET}",
    "nul\x00byte",
    "\x1b[31mterminal escape\x1b[0m",
    "\u2028line\u2029separators\x85",
    "tab\there\x0bvt\x0cff",
    "# not a comment",
    "%s %d {0} {name}",
    "ünïcödé 漢字 🎉 \U0001f600",
    "",
    " " * 7,
    "x" * 100_000,
]
IDS = [f"v{i}" for i in range(len(HOSTILE))]

CONFIG = standin.CONFIG_PY


@pytest.fixture(autouse=True)
def markers() -> Any:
    MARKERS.mkdir(exist_ok=True)
    yield
    left = list(MARKERS.iterdir())
    shutil.rmtree(MARKERS)
    assert left == [], "a hostile value was executed"


def edit(**spec: Any) -> Edit:
    return EDIT.validate_python(spec)


def literal_at(source: str, path: str) -> Any:
    """Value of `LIMITS`, `LIMITS[key]`, `supported` in SpecConfig.verify or budget's default."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if path == "supported" and isinstance(node, ast.Assign):
            if getattr(node.targets[0], "id", "") == "supported":
                return ast.literal_eval(node.value)
        if path == "LIMITS" and isinstance(node, ast.Assign):
            if getattr(node.targets[0], "id", "") == "LIMITS":
                return ast.literal_eval(node.value)
        if path == "default" and isinstance(node, ast.FunctionDef) and node.name == "budget":
            return ast.literal_eval(node.args.defaults[0])
    raise AssertionError(path)


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_ensure_then_remove_round_trips_the_exact_value(value: str) -> None:
    added = apply_edit(
        CONFIG,
        edit(op="ensure_elements", scope="SpecConfig.verify", target="supported", values=[value]),
    )
    assert added.status == "changed", added.message
    compile(added.source, "<hostile>", "exec")
    assert literal_at(added.source, "supported") == ["llama", "qwen", value]
    # The rest of the file is untouched and the new line holds nothing but the literal.
    assert len(added.source.splitlines()) == len(CONFIG.splitlines()) + 1
    back = apply_edit(
        added.source,
        edit(op="remove_elements", scope="SpecConfig.verify", target="supported", values=[value]),
    )
    assert (back.status, back.source) == ("changed", CONFIG)


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
@pytest.mark.parametrize("where", ["rhs", "key", "entry", "default"])
def test_set_value_lands_as_the_literal(value: str, where: str) -> None:
    spec: dict[str, Any] = {"op": "set_value", "value": value}
    if where == "default":
        spec.update(scope="budget", param="factor")
    else:
        spec["target"] = "LIMITS"
        if where == "key":  # the hostile string as a NEW dict key
            spec.update(key=value, value=1)
        elif where == "entry":
            spec["key"] = "max_batch"
    res = apply_edit(CONFIG, edit(**spec))
    assert res.status == "changed", res.message
    compile(res.source, "<hostile>", "exec")
    if where == "default":
        assert literal_at(res.source, "default") == value
    elif where == "rhs":
        assert literal_at(res.source, "LIMITS") == value
    elif where == "key":
        assert literal_at(res.source, "LIMITS") == {"max_batch": 8, value: 1}
    else:
        assert literal_at(res.source, "LIMITS") == {"max_batch": value}


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_expr_and_code_are_code_exactly_or_refused(value: str) -> None:
    """As source, a hostile string is refused (not an expression / statement) or lands with
    exactly its own AST; quoted inside code (`repr`), it reads back as the value."""
    for spec in (
        {"op": "set_value", "target": "LIMITS", "key": "max_batch", "expr": value},
        {"op": "set_value", "scope": "budget", "param": "factor", "expr": value},
        {"op": "insert_statement", "match": "LIMITS = {'max_batch': 8}", "code": value},
    ):
        try:
            e = edit(**spec)
        except ValidationError:
            continue  # refused up front, with a message naming the field
        res = apply_edit(CONFIG, e)
        if res.status != "changed":
            assert res.status == "invalid" and res.message, res
            continue
        compile(res.source, "<hostile>", "exec")
        written = ast.dump(ast.parse(res.source))
        if "expr" in spec:
            assert ast.dump(ast.parse(value.strip(), mode="eval").body) in written
        else:
            assert all(ast.dump(s) in written for s in ast.parse(textwrap.dedent(value)).body)
    quoted = apply_edit(
        CONFIG,
        edit(op="insert_statement", match="LIMITS = {'max_batch': 8}", code=f"MSG = {value!r}"),
    )
    assert quoted.status == "changed", quoted.message
    namespace: dict[str, Any] = {}
    exec(compile(quoted.source, "<hostile>", "exec"), namespace)  # a literal: nothing runs
    assert namespace["MSG"] == value


def test_whole_cli_run_with_every_hostile_value(tmp_path: Path, standin_env: Env) -> None:
    """One real apply (level full: the module is imported and the probe runs) carrying every
    hostile value in a list, as dict keys and values, and as probe names; then rollback."""
    values = [v for v in HOSTILE if v]  # "" twice would be one value
    edits = [
        specs.edit("ensure_elements", scope="SpecConfig.verify", target="supported", values=values)
    ]
    edits += [specs.edit("set_value", target="LIMITS", key=v, value=v[::-1]) for v in values]
    check = "\n".join(f"assert module.LIMITS[{v!r}] == {v[::-1]!r}" for v in values)
    spec = tmp_path / "hostile.toml"
    spec.write_text(
        specs.spec_toml(
            id="hostile",
            summary="hostile values",
            package="servekit",
            versions=">=1.0",
            file="servekit/config.py",
            edits=edits,
            probes=[specs.probe(HOSTILE[2] + HOSTILE[12], "servekit.config", check)],
        )
    )
    py = ["--python", str(standin_env.python)]
    pristine = standin_env.file("servekit/config.py").read_bytes()
    res = vpatch("apply", spec, *py, "--json")
    assert res.code == 0, res.out[-3000:] + res.err
    [probe] = res.patch()["probes"]
    assert probe["ok"] and probe["name"] == HOSTILE[2] + HOSTILE[12]
    text = standin_env.file("servekit/config.py").read_text()
    assert literal_at(text, "supported") == ["llama", "qwen", *values]
    human = vpatch("verify", spec, *py)  # probe names and messages printed for people
    assert human.code == 0 and "\x1b" not in human.out, human.out[-2000:]
    assert vpatch("rollback", *py).code == 0
    assert standin_env.file("servekit/config.py").read_bytes() == pristine


def test_hostile_arguments(tmp_path: Path, standin_env: Env) -> None:
    """--python and --host are names, --state-dir is a path: argv and JSON, never a shell.

    Each value goes through the functions the CLI calls (LocalTransport, parse_target); one
    real CLI run per argument shows the whole path, state dir included, with all of them."""
    spec = tmp_path / "a.toml"
    spec.write_text(
        specs.spec_toml(
            id="a",
            summary="s",
            package="servekit",
            versions=">=1.0",
            file="servekit/config.py",
            edits=[
                specs.edit(
                    "ensure_elements",
                    scope="SpecConfig.verify",
                    target="supported",
                    values=["kimi_k2"],
                )
            ],
        )
    )
    py = str(standin_env.python)
    shellish = [v for v in HOSTILE if "touch" in v]
    for value in shellish:
        with pytest.raises(HostError, match="not found"):
            LocalTransport(py + value)
        with pytest.raises(UsageError, match="--host"):
            parse_target(value)
        with pytest.raises(UsageError, match="--host"):
            parse_target(f"{value}@gpu-01")
    bad_python = vpatch("status", "--python", py + shellish[0])
    assert bad_python.code == 1 and "not found" in bad_python.err, bad_python.err
    bad_host = vpatch("status", "--host", shellish[2])
    assert bad_host.code == 2 and bad_host.err.startswith("error: --host"), bad_host.err
    # One directory name holding every trick (NUL is the one byte a path cannot hold).
    name = "".join(v.replace("/", "_").replace("\x00", "") for v in shellish)[:200]
    state = tmp_path / name
    ok = vpatch("apply", spec, "--python", py, "--state-dir", state, "--level", "static")
    assert ok.code == 0, ok.out + ok.err
    assert (state / "journal.jsonl").is_file()  # exactly that directory, literally
    assert vpatch("rollback", "--python", py, "--state-dir", state).code == 0
