"""vpatch's wheel choice against pip's own, on real releases of the index pip is configured
with (tests/cases/wheels/pip_conformance.json): build tags, a local version on find-links,
Requires-Python limits, yanked files, an sdist-only release, several Pythons and platforms.
pip answers through `pip install --dry-run --report` (tests/support/pipchoice.py, kept under
the test cache); vpatch through its index client (`Client.choice`, `listing.pick`), reading the
same configuration. Every query must give the same file from the same source (one file is on a
file:// index and on the http index: pip's order of sources decides), or none on both sides;
no divergence is left, so none is listed as deliberate. The counts go to the run's summary."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from patcher.wheels import indexclient, pipconf
from tests.support import pipchoice
from tests.support.cases import CASES

_QUERIES: list[dict[str, Any]] = json.loads(
    (CASES / "wheels" / "pip_conformance.json").read_text()
)["queries"]


def test_vpatch_picks_the_file_pip_picks(record_property: pytest.RecordProperty) -> None:
    config = pipconf.native()
    client = indexclient.Client(config, pipchoice.store_root())
    same: list[str] = []
    different: list[str] = []
    none_both = 0
    for q in _QUERIES:
        req = Requirement(q["pin"])
        [spec] = req.specifier
        major, minor = (int(n) for n in q["python"].split("."))
        files = client.files(req.name)
        got = client.choice(req.name, Version(spec.version), [q["platform"]], (major, minor))
        ours = None if got is None else unquote(got.url)
        listed = sorted((f.filename, f.url, f.yanked, f.requires_python) for f in files)
        pips = pipchoice.choice(q["pin"], q["python"], q["platform"], listed)
        where = f"{q['pin']} python {q['python']} {q['platform']} ({q['what']})"
        if ours == pips:
            same.append(where)
            none_both += ours is None
        else:
            different.append(f"{where}: vpatch {ours}, pip {pips}")
    record_property(
        "conformance",
        f"pip's wheel choice: {len(same)} of {len(_QUERIES)} queries the same file from the "
        f"same source as pip ({none_both} of them none on both sides), "
        f"{len(different)} different",
    )
    assert not different, "\n".join(different)
