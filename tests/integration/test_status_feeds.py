"""`vpatch status --format prometheus|nagios` over real sshd hosts, with the real CLI: a host
where the patch holds, one where a hand edit went over it (drifted), one whose package was
upgraded by pip (the patch gone), one whose sshd is down (unreachable). The textfile that -o
writes is read back by prometheus_client's parser and Prometheus' `promtool check metrics`;
the Nagios check's exit code follows the worst host, and bad input is UNKNOWN."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests import sshd as harness
from tests import standin
from tests.conftest import vpatch
from tests.envs import site_packages
from tests.support import debtools
from tests.support.standin_specs import REL, SPEC_A, write

PY = "/root/ml-env/bin/python"


def _gauges(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation, family.name
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, key  # no series twice
            out[key] = s.value
    return out


def _one(gauges: dict[tuple[str, frozenset[tuple[str, str]]], float], **labels: str) -> list[str]:
    """The states whose vpatch_host_state / vpatch_spec_state series for these labels is 1."""
    name = "vpatch_spec_state" if "spec" in labels else "vpatch_host_state"
    return sorted(
        dict(k)["state"]
        for (n, k), v in gauges.items()
        if n == name and v == 1 and set(labels.items()) <= set(k)
    )


def test_a_fleet_in_four_states(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    lab = ssh_lab_factory(4, harness.standin_env_factory)
    h1, h2, h3, h4 = lab.hosts
    spec = write(tmp_path, "a.toml", SPEC_A)
    ssh = ["--ssh-config", str(lab.ssh_config), "--python", PY]
    hosts = [a for h in lab.hosts for a in ("--host", h.name)]
    for h in (h1, h2, h3):
        done = vpatch("apply", spec, "--host", h.name, *ssh, "--level", "static")
        assert done.code == 0, done.err
    edited = site_packages(h2.home / "ml-env") / REL
    edited.write_text(edited.read_text() + "# a hand edit over vpatch's bytes\n")
    standin.install_venv(h3.home / "ml-env", standin.build_wheel(tmp_path, "1.1.0"))
    h4.stop()

    # the textfile, written where node_exporter's collector reads it
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    prom = textdir / "vpatch.prom"
    st = vpatch("status", *hosts, *ssh, "--format", "prometheus", "-o", prom)
    assert st.code == 1 and st.out == "", st.out + st.err
    assert sorted(os.listdir(textdir)) == ["vpatch.prom"]  # no temp file left beside it
    text = prom.read_text()
    gauges = _gauges(text)
    assert _one(gauges, host=h1.name) == ["ok"]
    assert _one(gauges, host=h2.name) == ["drifted"]
    assert _one(gauges, host=h3.name) == ["upgraded"]
    assert _one(gauges, host=h4.name) == ["unreachable"]
    assert _one(gauges, host=h1.name, spec="servekit-kimi") == ["applied"]
    assert _one(gauges, host=h2.name, spec="servekit-kimi") == ["drifted"]
    assert _one(gauges, host=h3.name, spec="servekit-kimi") == ["upgraded"]
    assert not [k for (n, k) in gauges if n == "vpatch_spec_state" and ("host", h4.name) in k]
    assert gauges[("vpatch_status_exit_code", frozenset())] == 1
    assert debtools.promtool("check", "metrics", text=text) == (0, "")
    assert f"error: {h4.name}: " in st.err  # the problems, on stderr as ever

    # stdout: the same series (the file's time aside, nothing differs)
    again = vpatch("status", *hosts, *ssh, "--format", "prometheus")
    assert again.code == 1 and _gauges(again.out) == gauges, again.err

    # the JSON: unreachable is not drifted
    doc = vpatch("status", *hosts, *ssh, "--json")
    assert doc.code == 1
    assert [h["state"] for h in doc.doc["hosts"]] == ["ok", "drifted", "upgraded", "unreachable"]
    for client in ("openssh", "paramiko"):  # either client's refused connection is one
        one = vpatch("status", "--host", h4.name, *ssh, "--ssh-client", client, "--json")
        assert one.code == 1 and one.doc["hosts"][0]["state"] == "unreachable", one.out

    # Nagios: the worst host decides; nothing on stderr (Icinga shows it)
    for names, code, word in (
        ([h1], 0, "OK"),
        ([h1, h3], 1, "WARNING"),
        ([h1, h2, h3, h4], 2, "CRITICAL"),
        ([h1, h4], 3, "UNKNOWN"),
    ):
        argv = [a for h in names for a in ("--host", h.name)]
        check = vpatch("status", *argv, *ssh, "--format", "nagios")
        assert check.code == code and check.err == "", check.out + check.err
        assert check.out.startswith(f"VPATCH {word} - {len(names)} host"), check.out
        assert f" | hosts={len(names)};;;0 " in check.out.splitlines()[0]

    # bad input: UNKNOWN, and -o refuses a link planted at its name (nothing written)
    typo = vpatch("status", "--inventory", tmp_path / "hosts.tmol", *ssh, "--format", "nagios")
    assert typo.code == 3 and typo.out.startswith("VPATCH UNKNOWN - error: "), typo.out
    link = textdir / "link.prom"
    link.symlink_to(tmp_path / "elsewhere")
    refused = vpatch("status", *hosts, *ssh, "--format", "prometheus", "-o", link)
    assert refused.code == 2 and "symbolic link" in refused.err
    assert not (tmp_path / "elsewhere").exists()
