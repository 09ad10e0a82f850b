"""SSH settings as OpenSSH resolves them (`ssh -G`: Include, Match, every known_hosts file),
known_hosts markers understood, and host names checked before any ssh_config can run them.

Against the real sshd lab (tests/sshd.py): hosts on 127.0.0.1, configs written under the
test's temp dir and passed with --ssh-config (never ~/.ssh)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import jsondoc
from tests import sshd as harness
from tests.conftest import REPO, VPATCH
from tests.support.sshargs import CLIENTS

PY = "/root/ml-env/bin/python"


def run(
    *args: str | Path, cwd: Path = REPO, path: str | None = None
) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if path is not None:
        env["PATH"] = path
    done = subprocess.run(
        [*VPATCH, *map(str, args), "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, jsondoc.check(json.loads(done.stdout)), done.stderr


def key_of(host: harness.SshHost) -> str:
    return " ".join(host.known_hosts_line.split()[1:3])


def test_include_match_exec_and_every_known_hosts_file(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """paramiko's parser knows no Include: only `ssh -G` resolves `gpu-alias` here. The port
    comes from a `Match ... exec` block, the host key from the SECOND UserKnownHostsFile, and
    a known_hosts with @revoked/@cert-authority lines for other hosts does not get in the way."""
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    h = lab.hosts[0]
    d = tmp_path / "ssh"
    (d / "conf.d").mkdir(parents=True)
    flag = tmp_path / "on-port"
    other = " ".join(
        subprocess.run(["ssh-keygen", "-y", "-f", str(lab.client_key)], capture_output=True,
                       text=True, check=True).stdout.split()[:2]
    )  # fmt: skip
    (d / "kh_first").write_text(
        f"@revoked [10.9.9.9]:22 {other}\n@cert-authority *.example.com {other}\n"
    )
    (d / "kh_second").write_text(f"[127.0.0.1]:{h.port} {key_of(h)}\n")
    (d / "config").write_text(
        f"Include {d}/conf.d/*.conf\n"
        "Host *\n"
        "  Port 1\n"  # reached only when the Match below did not set a port
        "  GlobalKnownHostsFile /dev/null\n"
    )
    (d / "conf.d" / "fleet.conf").write_text(
        "Host gpu-alias\n"
        "  HostName 127.0.0.1\n"
        "  User root\n"
        f'Match host 127.0.0.1 exec "test -e {flag}"\n'
        f"  Port {h.port}\n"
        f"  IdentityFile {lab.client_key}\n"
        "  IdentitiesOnly yes\n"
        "  IdentityAgent none\n"
        f"  UserKnownHostsFile {d}/kh_first {d}/kh_second\n"
    )
    args = ("status", "--host", "gpu-alias", "--ssh-config", d / "config", "--python", PY)

    flag.touch()
    code, doc, err = run(*args)
    assert code == 0, err
    assert doc["hosts"][0]["target"] == "gpu-alias" and doc["hosts"][0]["ok"]

    flag.unlink()  # the Match no longer applies: port 1, nothing listens there
    code, doc, err = run(*args)
    assert code == 1 and "cannot connect" in doc["hosts"][0]["error"], doc


def test_without_an_openssh_client_paramiko_parses_the_config(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    bare = tmp_path / "bin"  # a PATH with no `ssh` on it
    bare.mkdir()
    code, doc, err = run(
        "status", "--host", "h1", "--ssh-config", lab.ssh_config, "--python", PY, path=str(bare)
    )
    assert code == 0, err
    assert doc["hosts"][0]["ok"]


@pytest.mark.parametrize("client", CLIENTS)
def test_revoked_key_is_refused_and_cert_authority_explained(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, client: str
) -> None:
    """Each is one host's error (exit 1), never a crash of the whole run: the healthy host of
    the same fleet is served. h2 presents a plain key where a @cert-authority line expects a
    certificate: paramiko cannot check certificates at all, OpenSSH did and found none."""
    lab = ssh_lab_factory(3, harness.standin_env_factory)
    h1, h2, h3 = lab.hosts
    kh = tmp_path / "known_hosts"
    kh.write_text(
        f"@revoked [127.0.0.1]:{h1.port} {key_of(h1)}\n"
        f"[127.0.0.1]:{h1.port} {key_of(h1)}\n"  # listed as known too: revoked wins
        f"@cert-authority [127.0.0.1]:{h2.port} {key_of(h3)}\n"
        f"[127.0.0.1]:{h3.port} {key_of(h3)}\n"
    )
    hosts = ("--host", "h1", "--host", "h2", "--host", "h3")
    for accept in ((), ("--accept-new-host-key",)):
        code, doc, err = run(
            "status", *hosts, "--ssh-config", lab.ssh_config, "--python", PY,
            "--known-hosts", kh, "--ssh-client", client, *accept,
        )  # fmt: skip
        assert code == 1, err
        by = {x["target"]: x for x in doc["hosts"]}
        assert "@revoked" in by["h1"]["error"] and "refused" in by["h1"]["error"]
        assert by["h3"]["ok"], by["h3"]
        if not accept:
            assert "unknown host key" in by["h2"]["error"]
            explained = {
                "paramiko": "cannot check host certificates",
                "openssh": "presented no certificate signed by it",
            }
            assert explained[client] in by["h2"]["hint"]
            assert "@cert-authority" in by["h2"]["hint"]
        else:  # recorded as any new key would be (the CA line cannot vouch for it)
            assert by["h2"]["ok"], by["h2"]
    assert kh.read_text().count(f"[127.0.0.1]:{h1.port} ") == 2  # the revoked key never added


@pytest.mark.parametrize("client", CLIENTS)
def test_hostile_names_never_reach_ssh(tmp_path: Path, client: str) -> None:
    """`ssh -G` runs `Match exec` commands with %h and %r substituted: a host or user name with
    shell syntax is exit 2 before it runs, for --host and for inventory addresses alike."""
    seen = tmp_path / "seen"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f'Match exec "echo %h %r >> {seen}"\n'
        "  HostName 127.0.0.1\n"
        "  Port 1\n"
        "  GlobalKnownHostsFile /dev/null\n"
    )
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[host]]\nname = "a"\naddress = "y; touch M #"\n')
    cases = [
        ("--host", f"[x;touch {tmp_path}/M;]"),
        ("--host", "x$(touch${IFS}M)"),
        ("--host", "ops`touch M`@gpu"),
        ("--host", "-oProxyCommand=touch M"),
        ("--inventory", str(inventory)),
    ]
    for flag, value in cases:
        code, doc, err = run(
            "status", flag, value, "--ssh-config", cfg, "--ssh-client", client, cwd=tmp_path
        )
        assert code == 2, (value, err)
        assert doc["error"] and doc["hint"], doc
        assert err.count("error: ") == 1 and "hint: " in err
    assert not seen.exists() and not (tmp_path / "M").exists()
    # The same config with a plain name: the Match exec does run (and the host is refused on
    # port 1 of the loopback), so the check above proves something.
    code, doc, _ = run(
        "status", "--host", "gpu-01", "--ssh-config", cfg, "--ssh-client", client, cwd=tmp_path
    )
    assert code == 1 and "cannot connect" in doc["hosts"][0]["error"], doc
    assert seen.read_text().split()[0] == "gpu-01"


def test_ansible_inventory_reaches_the_same_hosts_as_hosts_toml(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """An Ansible INI inventory of the lab, and the hosts.toml of the same fleet: one result."""
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    ini = tmp_path / "hosts.ini"
    ini.write_text(
        "[gpu]\n"
        + "".join(
            f"{h.name} ansible_host={h.address} ansible_port={h.port} ansible_user=root\n"
            for h in lab.hosts
        )
        + f"\n[gpu:vars]\nansible_python_interpreter={PY}\n"
    )
    toml = tmp_path / "hosts.toml"
    toml.write_text(
        f'[defaults]\npython = "{PY}"\nuser = "root"\n'
        + "".join(
            f'[[host]]\nname = "{h.name}"\naddress = "{h.address}"\nport = {h.port}\n'
            'groups = ["gpu"]\n'
            for h in lab.hosts
        )
    )
    docs = []
    for inventory in (ini, toml):
        code, doc, err = run(
            "status", "--inventory", inventory, "--group", "gpu", "--ssh-config", lab.ssh_config
        )
        assert code == 0, err
        docs.append([(x["target"], x["ok"], x["python_path"]) for x in doc["hosts"]])
    assert docs[0] == docs[1] == [(h.name, True, PY) for h in lab.hosts]
