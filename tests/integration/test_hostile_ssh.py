"""Hostile values over real SSH, where a shell DOES exist (sshd runs the command line through
the login shell): only the constant bootstrap and the quoted interpreter path may reach it.

tests/integration/test_ssh.py::test_hostile_values_never_reach_a_shell covers four values in a
list and `;` in --python. This adds what it does not: every quoting trick in --python and in
the user part of --host, a hostile --state-dir and probe name, NUL and 100 KB values, all on
one host, with marker files that any shell or eval reaching them would create.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests import sshd as harness
from tests.conftest import vpatch
from tests.support.specs import probe
from tests.support.sshargs import CLIENTS, PY, host_file
from tests.support.standin_specs import REL, spec_a

TRICKS = [
    "'; touch {m}/q1; '",
    '"; touch {m}/q2; "',
    "$(touch {m}/d)",
    "`touch {m}/b`",
    "\ntouch {m}/n\n",
    "' \"$(touch {m}/mix)\" '",
    "\\'; touch {m}/bs #",
]


@pytest.mark.parametrize("client", CLIENTS)
def test_hostile_arguments_and_values_over_ssh(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, client: str
) -> None:
    marker = tmp_path / "markers"
    marker.mkdir()
    tricks = [t.format(m=marker) for t in TRICKS]
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    h = lab.hosts[0]
    cfg = ["--ssh-config", str(lab.ssh_config), "--ssh-client", client]

    for trick in tricks:
        res = vpatch("status", "--host", h.name, *cfg, "--python", PY + trick, "--json")
        assert res.code == 1, res.out + res.err
        assert (
            "not found" in res.doc["hosts"][0]["error"] or "agent" in res.doc["hosts"][0]["error"]
        )
        user = trick.strip().replace(" ", "").replace("\n", "") or "x"
        if "@" not in user and "/" not in user and ":" not in user:
            res = vpatch("status", "--host", f"{user}@{h.name}", *cfg, "--python", PY, "--json")
            assert res.code in (1, 2), res.out + res.err  # refused by vpatch or by sshd

    values = [*tricks, "nul\x00byte", "y" * 100_000]
    spec = tmp_path / "h.toml"
    spec.write_text(
        spec_a(
            values=values,
            probes=[probe(tricks[2] + tricks[4], "servekit.config", "assert module.LIMITS")],
        )
    )
    state = "/root/state " + tricks[0].replace("/", "_") + tricks[2].replace("/", "_")
    res = vpatch(
        "apply", spec, "--host", h.name, *cfg, "--python", PY, "--state-dir", state, "--json"
    )
    assert res.code == 0, res.out[-2000:] + res.err
    assert res.patch()["probes"][0]["name"] == tricks[2] + tricks[4]
    tree = ast.parse(host_file(h, REL).read_text())
    [lit] = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "supported"
    ]
    assert ast.literal_eval(lit) == ["llama", "qwen", *values]
    local_state = h.home / state.removeprefix("/root/")
    assert (local_state / "journal.jsonl").is_file()  # exactly that path, literally
    back = vpatch("rollback", "--host", h.name, *cfg, "--python", PY, "--state-dir", state)
    assert back.code == 0, back.out + back.err
    assert list(marker.iterdir()) == []
