"""Issue 25 item 5 on real files: random stacks of specs from the golden rewrite cases
(tests/support/stackprops.py) applied to a real pip install of a wheel holding the cases'
modules, through real `python -I` agents (the local transport): verify is green for whatever
apply put in place, a partial rollback keeps the rest green, rollback-all gives pip's bytes
and removes what add_file created.

Derandomized, few examples by default (each is a fresh hard-link copy of the env and a handful
of agent runs); VPATCH_PROPERTY_EXAMPLES=N runs N locally. The pure variant:
tests/unit/test_stack_property.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patcher.plan.base import Options
from patcher.result import GOOD
from patcher.run import engine
from patcher.transports.pipe import LocalTransport
from tests import envs, standin
from tests.support.stackprops import (
    PACKAGE,
    PICKS,
    SHARED,
    SOURCES,
    VERSION,
    Pick,
    base_files,
    site_files,
    specs_of,
)

EXAMPLES = max(1, int(os.environ.get("VPATCH_PROPERTY_EXAMPLES", "25")) // 5)
pick = st.one_of(st.sampled_from(PICKS), st.sampled_from(SHARED))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with propkit (every case's module) installed by real pip: never modified."""
    dest = tmp_path_factory.mktemp("propkit")
    sources = {f"{PACKAGE}/__init__.py": "", **SOURCES}
    venv = dest / "venv"
    standin.install_venv(venv, standin.package_wheel(dest, PACKAGE, VERSION, sources))
    return venv


def _run(
    fn: str, py: Path, specs: list[object] | None, ids: tuple[str, ...] = ()
) -> list[tuple[str, str, str]]:
    transport = LocalTransport(str(py))
    try:
        opts = Options(level="static")
        if fn == "apply":
            host = engine.apply(specs, transport, opts)  # type: ignore[arg-type]
        elif fn == "verify":
            host = engine.verify(specs, transport, opts)  # type: ignore[arg-type]
        else:
            host = engine.rollback(specs, transport, opts, ids=ids)  # type: ignore[arg-type]
    finally:
        transport.close()
    assert host.error is None, (host.error, host.hint)
    return [(p.id, p.outcome, p.message) for p in host.patches]


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    picks=st.lists(pick, min_size=2, max_size=4),
    one_shot=st.booleans(),
    keep=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_real_stacks_apply_verify_rollback(
    template: Path,
    tmp_path_factory: pytest.TempPathFactory,
    picks: list[Pick],
    one_shot: bool,
    keep: list[bool],
) -> None:
    root = tmp_path_factory.mktemp("example") / "venv"
    subprocess.run(["cp", "-al", str(template), str(root)], check=True)
    py, site = root / "bin" / "python", envs.site_packages(root)
    specs = specs_of(picks)
    rels = sorted({p.rel for p in picks})
    assert site_files(site, rels) == base_files(picks)
    good: set[str] = set()
    for batch in [specs] if one_shot else [[s] for s in specs]:
        good |= {sid for sid, out, _ in _run("apply", py, batch) if out in GOOD["apply"]}
    for sid, out, why in _run("verify", py, specs):
        assert sid not in good or out in GOOD["verify"], (sid, out, why)
    out_ids = tuple(s.id for s, k in zip(specs, keep, strict=False) if not k)
    if out_ids:
        got = _run("rollback", py, None, out_ids)
        if all(o in ("rolled_back", "not_applied") for _, o, _ in got):
            kept = [s for s in specs if s.id in good and s.id not in out_ids]
            for sid, out, why in _run("verify", py, kept) if kept else []:
                assert out in GOOD["verify"], (sid, out, why)
    whole = _run("rollback", py, None)
    assert all(o == "rolled_back" for _, o, _ in whole), whole
    assert site_files(site, rels) == base_files(picks)
