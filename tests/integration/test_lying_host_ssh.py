"""One host of a fleet lies (issue 24, attack 3): its interpreter is a wrapper that rewrites
the agent's answers, sending a backdoored text under the sha256 of the file every other host
has. Over real sshd hosts: the liar fails with a clear error, and the honest hosts after it get
the spec's rewrite of their own bytes, exactly."""

from __future__ import annotations

from pathlib import Path

from patcher.rewrite import apply_edits
from patcher.specs.model import load_spec
from tests import sshd as harness
from tests.conftest import vpatch
from tests.support.liar import BACKDOOR, make_liar
from tests.support.sshargs import host_file, ssh_args
from tests.support.standin_specs import REL, SPEC_A, write


def test_a_lying_host_cannot_reach_another_hosts_write(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(3, harness.standin_env_factory)
    liar, *honest = lab.hosts
    make_liar(liar, REL)
    spec = write(tmp_path, "a.toml", SPEC_A)
    pristine = host_file(honest[0], REL).read_text()
    [variant] = load_spec(spec).variant
    want = apply_edits(pristine, variant.edit).source
    assert BACKDOOR not in want and want != pristine

    hosts = [a for h in lab.hosts for a in ("--host", h.name)]
    # One at a time, the liar first: its answer is what the honest hosts would be planned on.
    res = vpatch("apply", spec, *hosts, *ssh_args(lab), "--parallel", "1", "--json")
    assert res.code == 1, res.out[-3000:] + res.err
    by = {h["target"]: h for h in res.doc["hosts"]}
    error = by[liar.name]["error"] or ""
    assert "not the bytes of the sha256 it claims" in error, by[liar.name]
    assert f"servekit/{REL}" in error
    assert host_file(liar, REL).read_text() == pristine  # nothing written there either
    for h in honest:
        assert by[h.name]["ok"], by[h.name]
        assert by[h.name]["patches"][0]["outcome"] == "applied"
        assert host_file(h, REL).read_text() == want, h.name

    # The human report says so too, and the error names the liar only.
    human = vpatch("status", spec, *hosts, *ssh_args(lab))
    assert f"error: {liar.name}: the host sent a text" in human.err, human.err
