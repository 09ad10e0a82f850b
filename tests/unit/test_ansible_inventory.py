"""`--inventory` takes an Ansible inventory (INI or YAML) as well as a hosts.toml: the same
fleet written three ways gives the same targets and groups, read by `ansible-inventory` when it
is on PATH and by vpatch's own reader of the documented subset when it is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patcher.errors import SpecError
from patcher.inventory import load_inventory
from tests import scale

TOML = """\
[defaults]
user = "root"

[[host]]
name = "lonely"
address = "10.0.0.9"

[[host]]
name = "gpu-01"
address = "gpu-01.example.com"
port = 2222
python = "/srv/venv/bin/python"
identity = "/etc/vpatch/key"
groups = ["prod", "h100", "serving"]

[[host]]
name = "gpu-02"
address = "gpu-02"
user = "ops"
sudo = true
python = "/srv/venv/bin/python"
groups = ["prod", "serving"]
"""

INI = """\
# the same fleet, as Ansible writes it
lonely ansible_host=10.0.0.9

[prod]
gpu-01 ansible_host=gpu-01.example.com ansible_port=2222
gpu-02 ansible_user=ops ansible_become=true

[h100]
gpu-01 ansible_ssh_private_key_file=/etc/vpatch/key

[serving:children]
prod

[serving:vars]
ansible_python_interpreter=/srv/venv/bin/python

[all:vars]
ansible_user=root
"""

YAML = """\
all:
  vars:
    ansible_user: root
  hosts:
    lonely:
      ansible_host: 10.0.0.9
  children:
    serving:
      vars:
        ansible_python_interpreter: /srv/venv/bin/python
      children:
        prod:
          hosts:
            gpu-01:
              ansible_host: gpu-01.example.com
              ansible_port: 2222
            gpu-02:
              ansible_user: ops
              ansible_become: yes
    h100:
      hosts:
        gpu-01:
          ansible_ssh_private_key_file: /etc/vpatch/key
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("reader", ["builtin", "ansible-inventory"])
def test_same_fleet_three_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    bare = tmp_path / "bin"  # a PATH without ansible-inventory
    bare.mkdir()
    path = str(scale.ansible_core_bin()) if reader == "ansible-inventory" else str(bare)
    monkeypatch.setenv("PATH", path + os.pathsep + "/usr/bin:/bin")
    flags = {"python": None, "identity": None, "sudo": None}
    want = load_inventory(write(tmp_path, "hosts.toml", TOML), flags).hosts
    assert [t.name for t, _ in want] == ["lonely", "gpu-01", "gpu-02"]
    for name, text in (("hosts.ini", INI), ("hosts.yml", YAML), ("hosts", INI)):
        got = load_inventory(write(tmp_path, name, text), flags).hosts
        assert got == want, name


def test_builtin_reader_refuses_what_it_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    flags: dict[str, object] = {}
    with pytest.raises(SpecError, match="needs ansible-inventory"):
        load_inventory(write(tmp_path, "r.ini", "[web]\nweb[01:20].example.com\n"), flags)
    with pytest.raises(SpecError, match="not key=value"):
        load_inventory(write(tmp_path, "kv.ini", "[web]\nweb1 ansible_port\n"), flags)
    with pytest.raises(SpecError, match="host name contains"):
        load_inventory(write(tmp_path, "x.ini", "evil ansible_host='y;touch M'\n"), flags)


def test_group_vars_give_the_rollout_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`vpatch_restart` (and the URLs) as Ansible group or host variables (builtin reader)."""
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare) + os.pathsep + "/usr/bin:/bin")
    ini = (
        "[serving]\ngpu-01\ngpu-02 vpatch_restart='docker restart vllm'\n"
        "[serving:vars]\nvpatch_restart='supervisorctl restart vllm'\n"
        "vpatch_health_url=http://localhost:8000/health\n"
    )
    (a, _), (b, _) = load_inventory(write(tmp_path, "hosts.ini", ini), {}).hosts
    assert (a.restart, a.health, a.metrics) == (
        "supervisorctl restart vllm",
        "http://localhost:8000/health",
        None,
    )
    assert b.restart == "docker restart vllm"
