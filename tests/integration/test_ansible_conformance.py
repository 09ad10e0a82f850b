"""vpatch's own Ansible inventory reader against real `ansible-inventory --list` (ansible-core, its
own venv, cached), on ansible-core's own inventories and on vpatch's golden cases.

The corpus comes from ansible-core's sdist, downloaded at test time with pip and cached
(tests/support/ansibleconf.py): every `test/integration/targets/inventory*` file that is not a
script, a plugin or TOML, and the `ini` and `yaml` plugins' EXAMPLES. For each, both readers give
the same hosts in the same order, the same groups, the same values of every variable vpatch
reads and the same targets (address, port, user, sudo, python...), or both refuse the file; the
only exceptions are the deliberate divergences in ansibleconf.DELIBERATE, each listed with its
reason in docs/inventory.md and asserted to still happen (a fixed one must leave the list).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import ansibleconf, inventorygen

REPO = Path(__file__).resolve().parent.parent.parent


def _report(capsys: pytest.CaptureFixture[str], lines: list[str]) -> None:
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_ansible_cores_own_inventories_read_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = ansibleconf.compare(tmp_path)
    readable = [c for c in cases if c.readable]
    same = [c for c in readable if c.same]
    refused = [c for c in cases if not c.readable]
    hosts = sum(len(c.ansible.hosts or []) for c in same)
    diverged = [c for c in cases if not c.same]
    _report(
        capsys,
        [
            f"ansible-core {ansibleconf.VERSION} inventories: {len(cases)} files "
            f"(targets/inventory* and the ini/yaml plugins' EXAMPLES)",
            f"  {len(same)} of {len(readable)} that ansible-inventory reads are identical "
            f"({hosts} hosts, same order, groups, variables, targets)",
            f"  {sum(c.same for c in refused)} of {len(refused)} that it refuses vpatch refuses",
            *(f"  deliberate: {c.rel}: {ansibleconf.DELIBERATE.get(c.rel)}" for c in diverged),
        ],
    )
    assert len(cases) >= 40 and len(readable) >= 12  # the corpus is there, not an empty tar
    assert any(c.rel.startswith("examples/ini-") for c in same)
    assert any(c.rel.startswith("examples/yaml-") for c in same)
    unexplained = [
        (c.rel, c.ansible.error or (c.ansible.hosts, c.ansible.targets), c.vpatch.error)
        for c in diverged
        if c.rel not in ansibleconf.DELIBERATE
    ]
    assert unexplained == []
    listed = {k for k in ansibleconf.DELIBERATE if "/" in k}  # the corpus's (a case: no "/")
    assert listed == {c.rel for c in diverged}, "a deliberate divergence that no longer happens"
    for case in diverged:  # each is Ansible skipping with a warning what vpatch refuses
        assert case.vpatch.error and "Skipping" in case.ansible.warnings, case.rel


def test_generated_inventories_read_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seeded mixes of the rules (tests/support/inventorygen.py): both readers agree on every
    one, the files Ansible refuses (undeclared groups, loops) included."""
    files = inventorygen.write(tmp_path / "gen", 25)
    cases = ansibleconf.compare(tmp_path, files)
    readable = [c for c in cases if c.readable and c.ansible.hosts]
    _report(
        capsys,
        [
            f"generated inventories: {sum(c.same for c in cases)} of {len(cases)} read alike "
            f"({len(readable)} with hosts, {sum(len(c.ansible.hosts or []) for c in readable)} "
            f"hosts; {sum(not c.readable for c in cases)} refused by both)"
        ],
    )
    assert len(readable) >= 15
    assert [(c.rel, c.ansible.hosts, c.vpatch.hosts) for c in cases if not c.same] == []


CASES = ansibleconf.cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_case_is_what_ansible_reads(case: Path, tmp_path: Path) -> None:
    """Each golden case's claim about Ansible, checked on ansible-inventory itself: "same" (it
    reads what the golden file says vpatch reads), "refuses", or a deliberate divergence
    (Ansible reads it, warning that it skipped part of it)."""
    want = ansibleconf.golden(case)
    verdict = want.pop("ansible")
    theirs = ansibleconf.by_ansible(case, tmp_path)
    if verdict == "refuses":
        assert theirs.hosts is None and "error" in want
    elif verdict == "same":
        assert ansibleconf.as_doc(theirs, case) == want
    else:
        assert verdict.removeprefix("deliberate: ") == ansibleconf.DELIBERATE[case.name]
        assert theirs.hosts is not None and "Skipping" in theirs.warnings
        assert "error" in want


def test_every_deliberate_divergence_is_documented() -> None:
    docs = " ".join((REPO / "docs" / "inventory.md").read_text().split())
    for why in set(ansibleconf.DELIBERATE.values()):
        assert why in docs, why
