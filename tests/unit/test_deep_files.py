"""A host's file nested thousands of levels deep (issue 24): libcst's native parser recursed
on the C stack and the controller died with SIGSEGV, every host's run with it. Now the file is
refused before libcst sees it: one clean error for that host, the run goes on."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from patcher.rewrite.depth import MAX_DEPTH, nesting_problem
from tests.conftest import REPO, Env, vpatch
from tests.support.standin_specs import REL, SPEC_A, write

DEEP = {
    "attributes": "y = a" + ".b" * 8000 + "\n",
    "brackets": "y = " + "[" * 5000 + "]" * 5000 + "\n",
    "calls": "y = a" + "()" * 8000 + "\n",
    "unary": "y = " + "-" * 8000 + "1\n",
}


@pytest.mark.parametrize("shape", sorted(DEEP))
def test_a_deeply_nested_host_file_is_one_clean_error(
    tmp_path: Path, standin_env: Env, shape: str
) -> None:
    target = standin_env.file(REL)
    target.write_text(target.read_text() + DEEP[shape])
    before = target.read_bytes()
    spec = write(tmp_path, "a.toml", SPEC_A)
    res = vpatch("apply", spec, "--python", standin_env.python, "--json")
    assert res.code == 1, (res.code, res.err[-2000:])
    assert "Traceback" not in res.err
    patch = res.patch()
    assert "nested too deeply" in patch["message"], patch
    assert target.read_bytes() == before


def test_libcst_would_have_crashed_on_these() -> None:
    """The attack is real: libcst itself, given the deepest shape, kills its process."""
    code = "import libcst, sys; libcst.parse_module(sys.stdin.read())"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),  # no core dump
        input=DEEP["brackets"],
        text=True,
        capture_output=True,
        cwd=REPO,
    )
    assert proc.returncode < 0 or proc.returncode > 128, proc.returncode


def test_real_code_is_far_below_the_bound() -> None:
    assert nesting_problem("x = " + "-" * (MAX_DEPTH // 2) + "1\n") is None
    assert nesting_problem("x = " + "-" * (MAX_DEPTH * 2) + "1\n") is not None
    assert nesting_problem("def f(:\n") is None  # a plain syntax error: libcst words it
    assert nesting_problem("type X = int\n" + "(" * 300 + ")" * 300) is not None
    assert nesting_problem((REPO / "patcher" / "plan" / "apply.py").read_text()) is None
