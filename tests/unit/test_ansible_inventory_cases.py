"""vpatch's own reader of Ansible inventories on golden cases (tests/cases/ansible_inventory/):
the edges users meet on day one, each written as Ansible's `ini` and `yaml` plugins read it.

Each NAME.json holds what vpatch reads (hosts in order, groups, the variables vpatch uses, the
targets it makes) or the refusal, and whether ansible-inventory reads the same; that last claim is
checked against real ansible-core by tests/integration/test_ansible_conformance.py. These run
without ansible-core: the reader under test is the one used when `ansible-inventory` is not on
PATH.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patcher.errors import SpecError
from patcher.inventory.targets import load_inventory
from tests.conftest import vpatch
from tests.support import ansibleconf

CASES = ansibleconf.cases()


def test_every_case_has_its_golden_file() -> None:
    assert len(CASES) >= 20
    for case in CASES:
        assert case.with_suffix(".json").exists(), case.name
    assert {p.stem for p in ansibleconf.CASES.glob("*.json")} == {c.stem for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_builtin_reader_reads_the_golden_case(case: Path) -> None:
    want = ansibleconf.golden(case)
    verdict = want.pop("ansible")
    assert verdict in ("same", "refuses") or verdict.removeprefix("deliberate: ") in set(
        ansibleconf.DELIBERATE.values()
    ), verdict
    got = ansibleconf.as_doc(ansibleconf.by_vpatch(case), case)
    assert got == want


REFUSED = [c for c in CASES if "error" in ansibleconf.golden(c)]


@pytest.mark.parametrize("case", REFUSED, ids=[c.name for c in REFUSED])
def test_a_refused_inventory_is_one_error_and_one_hint(case: Path, tmp_path: Path) -> None:
    """Through the real CLI: exit 2, `error:` naming the file, `hint:`, no traceback."""
    bare = tmp_path / "bin"  # no ansible-inventory on PATH: vpatch's own reader
    bare.mkdir()
    ran = vpatch("status", "--inventory", case, env={"PATH": f"{bare}{os.pathsep}/usr/bin:/bin"})
    lines = ran.err.strip().splitlines()
    assert ran.code == 2, ran.err
    assert "Traceback" not in ran.err
    assert [line.split(":")[0] for line in lines] == ["error", "hint"], ran.err
    assert str(case) in lines[0]


def test_yaml_hosts_as_one_name_reads_that_host() -> None:
    """`hosts: NAME` (the yaml plugin's own example) once raised AttributeError: exit 1."""
    got = ansibleconf.as_doc(
        ansibleconf.by_vpatch(ansibleconf.CASES / "yaml_hosts_string.yml"), Path()
    )
    assert [h[0] for h in got["hosts"]] == ["web1", "db1"]


def test_ini_edges_read_as_ansible_reads_them() -> None:
    """The INI edges, by value: header comments, `key = value`, values with spaces (quoted on a
    host line, the rest of a :vars line), a kept `# ...` after text, 0x8AE and 22.0 as ports."""
    targets = {
        name: ansibleconf.as_doc(ansibleconf.by_vpatch(ansibleconf.CASES / name), Path())["targets"]
        for name in ("section_comments.ini", "vars_values.ini", "host_quoted.ini", "ports.ini")
    }
    assert [t["groups"] for t in targets["section_comments.ini"]] == [["serving", "web"]] * 2
    served = targets["vars_values.ini"][0]
    assert served["restart"] == "systemctl restart vllm"
    assert served["health"] == "http://localhost:8000/health # the engine's health"
    assert (served["port"], served["user"], served["sudo"]) == (2222, "deploy", True)
    assert [t["restart"] for t in targets["host_quoted.ini"]] == [
        "systemctl restart vllm",
        'supervisorctl restart "vllm"',
        "systemctl restart vllm",
    ]
    assert [t["port"] for t in targets["ports.ini"]] == [2222, 22, 2200, 2201, 2203, 2223]


def test_a_port_with_a_fraction_is_refused_before_any_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ansible reads `ansible_port=22.5` (and its ssh connection refuses it); vpatch says so
    while reading the inventory."""
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SpecError, match=r"port: Input should be a valid integer"):
        load_inventory(str(ansibleconf.CASES / "port_fraction.ini"), {})
