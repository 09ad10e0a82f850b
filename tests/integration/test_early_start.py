"""The first hosts' sessions start while the specs load (cli._start_early,
PipeTransport.start), on real sshd hosts through the real CLI. The spec is a FIFO, so the
controller is provably still reading it when each host's agent starts; an invalid spec then
kills those sessions before anything was asked, and nothing on a host changes. The lab logs in
as root, so the first interpreter a session starts is privsep's stage 0 under the trusted
interpreter (agent/privsep.py): that is the one wrapped here to note its start."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests import envs
from tests import sshd as harness
from tests.conftest import REPO, VPATCH, fingerprint
from tests.support.standin_specs import REL, SPEC_A

# Each host's trusted interpreter (--trusted-python): notes its pid, then is the system python.
WRAPPER = '#!/bin/sh\necho $$ >> /root/started\nexec /usr/bin/python3 "$@"\n'


def _lab(tmp_path: Path, lab: harness.SshLab) -> tuple[Path, list[str]]:
    lines = ["[defaults]\npython = '/root/ml-env/bin/python'\n"]
    for h in lab.hosts:
        wrapper = h.home / "started-python"
        wrapper.write_text(WRAPPER)
        wrapper.chmod(0o755)
        lines.append(f"[[host]]\nname = '{h.name}'\naddress = '{h.name}'\n")
    inv = tmp_path / "hosts.toml"
    inv.write_text("\n".join(lines))
    fifo = tmp_path / "servekit-kimi.toml"  # the spec's id is its file name
    os.mkfifo(fifo)
    argv = [*VPATCH, "apply", str(fifo), "--inventory", str(inv)]
    argv += ["--trusted-python", "/root/started-python"]
    return fifo, [*argv, "--ssh-config", str(lab.ssh_config), "--json"]


def _started(h: harness.SshHost) -> list[int]:
    marker = h.home / "started"
    return [int(x) for x in marker.read_text().split()] if marker.exists() else []


def _wait_started(hosts: list[harness.SshHost], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while not all(_started(h) for h in hosts):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no host interpreter started while the spec loaded"
        time.sleep(0.02)


def _apply_when_started(
    argv: list[str], fifo: Path, spec: str, hosts: list[harness.SshHost], tmp_path: Path
) -> tuple[int, str, str]:
    """Run the apply; once every host's interpreter has started (vpatch still blocked opening
    the spec), feed it `spec`. (exit code, stdout, stderr)."""
    env = {**os.environ, "VPATCH_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _wait_started(hosts, proc)
        fifo.write_text(spec)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_hosts_start_before_the_spec_is_read(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    fifo, argv = _lab(tmp_path, lab)
    code, out, err = _apply_when_started(argv, fifo, SPEC_A, lab.hosts, tmp_path)
    assert code == 0, out + err
    doc = json.loads(out)
    assert [p["outcome"] for h in doc["hosts"] for p in h["patches"]] == ["applied"] * 2
    for h in lab.hosts:
        assert b'"kimi_k2",' in (envs.site_packages(h.home / "ml-env") / REL).read_bytes()
        assert len(_started(h)) == 1  # the early session is the one that did the work


def test_an_invalid_spec_kills_the_early_sessions_and_changes_nothing(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    fifo, argv = _lab(tmp_path, lab)
    before = [fingerprint(h.home / "ml-env") for h in lab.hosts]
    spec = "colour = 'red'\n" + SPEC_A
    code, out, err = _apply_when_started(argv, fifo, spec, lab.hosts, tmp_path)
    assert code == 2, out + err
    doc = json.loads(out)  # --json: still one document
    assert "colour" in doc["error"], doc
    assert [fingerprint(h.home / "ml-env") for h in lab.hosts] == before
    assert not any((h.home / ".local").exists() for h in lab.hosts)  # no journal, no state dir
    deadline = time.monotonic() + 10  # the host side of a killed ssh winds down on its own
    alive = [pid for h in lab.hosts for pid in _started(h)]
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists()]
        time.sleep(0.05)
    assert alive == [], "an agent outlived the run that started it"
