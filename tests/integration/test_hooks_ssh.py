"""`vpatch ensure` on real sshd test hosts (tests/sshd.py): apply when missing, a fast no-op when
present, re-apply after a real `pip install --force-reinstall`, one clear line for a host whose
installed version has no variant; then docs/hooks.md's CI step over an inventory."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

from patcher._compat import tomllib
from tests import envs, standin
from tests import sshd as harness
from tests.conftest import fingerprint, vpatch
from tests.support.hooklab import PIP, REINSTALL, recipe, swap
from tests.support.standin_specs import REL, SPEC_A

PY = "/root/ml-env/bin/python"


def hosts_env(host: harness.SshHost) -> None:
    """h1 has the stand-in 1.0.0 (the spec's range); h2 has 0.9.0, which no variant covers."""
    harness.standin_env_factory(host, version="0.9.0" if host.name == "h2" else "1.0.0")


def _home_files(host: harness.SshHost) -> dict[str, tuple[int, int, int]]:
    """Every file of the host's /root but the agent's own code, which the first session of a
    host keeps there (transports/bundle.kept_boot): that write is the transport's, not a
    change to the host's environment or state."""
    kept = os.path.join(".cache", "vpatch", "agent") + os.sep
    return {k: v for k, v in fingerprint(host.home).items() if not k.startswith(kept)}


def on_host(host: harness.SshHost) -> Path:
    return envs.site_packages(host.home / "ml-env") / REL


def force_reinstall(host: harness.SshHost, tmp_path: Path) -> None:
    """A real `pip install --force-reinstall` into the host's env (its /root/ml-env)."""
    whl = standin.build_wheel(tmp_path)
    subprocess.run(
        [*PIP, "--python", str(host.home / "ml-env/bin/python"), *REINSTALL, str(whl)],
        check=True,
        capture_output=True,
    )


def test_ensure_over_ssh(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    lab = ssh_lab_factory(2, hosts_env)
    h1 = lab.host("h1")
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    common = ["--ssh-config", str(lab.ssh_config), "--python", PY]

    first = vpatch("ensure", spec, "--host", "h1", *common, "--json")
    assert first.code == 0, first.out + first.err
    assert first.patch()["outcome"] == "applied" and first.patch()["probes"][0]["ok"]
    assert '"kimi_k2",' in on_host(h1).read_text()

    snap = fingerprint(h1.home)
    started = time.monotonic()
    again = vpatch("ensure", spec, "--host", "h1", *common, "--json")
    wall = time.monotonic() - started
    assert again.code == 0 and again.patch()["outcome"] == "already_applied"
    assert again.patch()["probes"] == [] and again.doc["stats"]["libcst_parses"] == 0
    assert fingerprint(h1.home) == snap
    seconds = again.doc["hosts"][0]["seconds"]
    print(f"\nensure no-op over ssh: {seconds:.3f}s in vpatch, {wall:.2f}s with connect + start")

    force_reinstall(h1, tmp_path)
    assert "kimi_k2" not in on_host(h1).read_text()
    back = vpatch("ensure", spec, "--host", "h1", *common)
    assert back.code == 0, back.out + back.err
    assert (
        back.out.splitlines()[0] == "applied: h1: servekit-kimi (servekit 1.0.0), 1/1 checks passed"
    )
    assert '"kimi_k2",' in on_host(h1).read_text()

    h2_snap = _home_files(lab.host("h2"))
    both = vpatch("ensure", spec, "--host", "h1", "--host", "h2", *common)
    assert both.code == 1 and both.out == ""
    assert both.err.splitlines() == [
        "error: h2: servekit-kimi: not_applicable: servekit 0.9.0 is in no variant's range (>=1.0)",
        "hint: add a [[variant]] for this version (`vpatch matrix SPEC` shows fits)",
        "ensure: 1 problem(s) on 2 host(s) [1 already_applied, 1 not_applicable]",
    ]
    assert _home_files(lab.host("h2")) == h2_snap


def test_ci_recipe_over_an_inventory(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    """docs/hooks.md's CI step and inventory, with the doc's hosts pointed at the lab's."""
    lab = ssh_lab_factory(2, hosts_env)
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    inv = tomllib.loads(recipe("inventory"))
    names = [h["name"] for h in inv["host"]]
    lines = [f"[defaults]\nuser = {inv['defaults']['user']!r}\npython = {PY!r}\n"]
    for name, host in zip(names, lab.hosts, strict=True):
        lines.append(f"[[host]]\nname = {name!r}\naddress = {host.name!r}\ngroups = ['prod']\n")
    hosts_toml = tmp_path / "hosts.toml"
    hosts_toml.write_text("\n".join(lines))

    step = yaml_step()
    argv = shlex.split(step)
    doc_spec = next(a for a in argv if a.endswith(".toml") and "patches/" in a)
    report = tmp_path / "vpatch-report.json"
    paths = {
        doc_spec: str(spec),
        "deploy/hosts.toml": str(hosts_toml),
        "deploy/known_hosts": str(lab.known_hosts),
        "vpatch-report.json": str(report),
    }
    cmd = [*swap(argv, paths), "--ssh-config", str(lab.ssh_config)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr  # one host cannot take the patch
    assert res.stdout.splitlines() == [
        f"applied: {names[0]}: servekit-kimi (servekit 1.0.0), 1/1 checks passed"
    ]
    assert res.stderr.splitlines()[0] == (
        f"error: {names[1]}: servekit-kimi: not_applicable: "
        "servekit 0.9.0 is in no variant's range (>=1.0)"
    )
    doc = json.loads(report.read_text())
    assert doc["command"] == "ensure" and doc["ok"] is False
    outcome = {h["target"]: h["patches"][0]["outcome"] for h in doc["hosts"]}
    assert outcome == {names[0]: "applied", names[1]: "not_applicable"}


def yaml_step() -> str:
    import yaml

    [step] = yaml.safe_load(recipe("ci"))
    run: str = step["run"]
    assert run.startswith("vpatch ensure ")
    return run
