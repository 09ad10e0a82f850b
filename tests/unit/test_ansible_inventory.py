"""`--inventory` takes an Ansible inventory (INI or YAML) as well as a hosts.toml: the same
fleet written three ways gives the same targets and groups, read by `ansible-inventory` when it
is on PATH and by vpatch's own reader of the documented subset when it is not."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from patcher.errors import SpecError
from patcher.inventory.targets import load_inventory
from patcher.transports.ssh import remote_command
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
    with pytest.raises(SpecError, match=r"r.ini:2: host range 'web\[01:100\]' must specify equal"):
        load_inventory(write(tmp_path, "r.ini", "[web]\nweb[01:100]\n"), flags)
    with pytest.raises(SpecError, match="not key=value"):
        load_inventory(write(tmp_path, "kv.ini", "[web]\nweb1 ansible_port\n"), flags)
    with pytest.raises(SpecError, match="host name contains"):
        load_inventory(write(tmp_path, "x.ini", "evil ansible_host='y;touch M'\n"), flags)


# Host ranges and ports in the host name, as Ansible expands them: leading zeros kept (a width),
# letters, a step, two ranges in one name (left to right), an empty begin (0), a range that
# counts down (no host), `:PORT` (before the line's own vars: host_vars still win).
RANGES_INI = """\
[gpu]
gpu[01:03] ansible_user=ops
node-[a:c]:2222
n[:6:3].example.com
r[1:2]-g[08:10:2]
db:5432 ansible_port=5433
[none]
h[9:1]
"""
RANGES_YAML = """\
all:
  children:
    gpu:
      hosts:
        gpu[01:03]:
          ansible_user: ops
        node-[a:c]:2222:
        n[:6:3].example.com:
        r[1:2]-g[08:10:2]:
        db:5432:
          ansible_port: 5433
    none:
      hosts:
        h[9:1]:
"""
RANGES = [
    ("gpu01", None, "ops"),
    ("gpu02", None, "ops"),
    ("gpu03", None, "ops"),
    ("node-a", 2222, None),
    ("node-b", 2222, None),
    ("node-c", 2222, None),
    ("n0.example.com", None, None),
    ("n3.example.com", None, None),
    ("n6.example.com", None, None),
    ("r1-g08", None, None),
    ("r1-g10", None, None),
    ("r2-g08", None, None),
    ("r2-g10", None, None),
    ("db", 5433, None),
]


@pytest.mark.parametrize("reader", ["builtin", "ansible-inventory"])
@pytest.mark.parametrize("form", ["ini", "yml"])
def test_host_ranges_expand_as_ansible_expands_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str, form: str
) -> None:
    """The built-in reader gives what ansible-inventory gives, host for host (the same table
    is asserted of both)."""
    _reader_path(tmp_path, monkeypatch, reader)
    text = RANGES_INI if form == "ini" else RANGES_YAML
    inv = load_inventory(write(tmp_path, f"hosts.{form}", text), {})
    got = [(t.name, t.port, t.user) for t, _ in inv.hosts]
    assert got == RANGES
    assert {g for _, groups in inv.hosts for g in groups} == {"gpu"}


# A 4-host fleet whose interpreter, port and users come from vars files only: group_vars/ and
# host_vars/ as files and as directories (read sorted, subdirectories too), as Ansible reads
# them. The built-in reader once skipped them: 3 of the 4 hosts ran the remote `python3`.
VARS_FLEET = """\
[gpu]
g1
g2 ansible_port=2200
[cpu]
c1
[edge]
e1
[serving:children]
gpu
cpu
"""
VARS_FILES = {
    "group_vars/all.yml": "ansible_user: deploy\nansible_python_interpreter: /usr/bin/python3\n",
    "group_vars/serving/10-env.yml": "ansible_python_interpreter: /srv/venv/bin/python\n",
    "group_vars/serving/20-more/key.yaml": "ansible_ssh_private_key_file: /k/serving\n",
    "group_vars/serving/.hidden.yml": "ansible_user: hidden\n",
    "group_vars/serving/backup.yml~": "ansible_user: backup\n",
    "group_vars/gpu.json": '{"ansible_python_interpreter": "/srv/gpu/bin/python"}',
    "group_vars/gpu.yml": "ansible_user: gpu-yml\n",  # wins: the first of .yml .yaml .json
    "host_vars/g2": "ansible_port: 2201\n",
    "host_vars/e1/conn.yml": "ansible_host: 10.0.0.5\nansible_become: true\n",
}


@pytest.mark.parametrize("reader", ["builtin", "ansible-inventory"])
def test_vars_dirs_read_as_ansible_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    _reader_path(tmp_path, monkeypatch, reader)
    for rel, text in VARS_FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    inv = load_inventory(write(tmp_path, "hosts", VARS_FLEET), {})
    got = {t.name: (t.address, t.user, t.port, t.python, t.identity, t.sudo) for t, _ in inv.hosts}
    assert got == {
        # gpu.yml is read, not gpu.json: Ansible takes the first of NAME, .yml, .yaml, .json
        "g1": ("g1", "gpu-yml", None, "/srv/venv/bin/python", "/k/serving", False),
        # host_vars/ beats the inventory's own host var
        "g2": ("g2", "gpu-yml", 2201, "/srv/venv/bin/python", "/k/serving", False),
        "c1": ("c1", "deploy", None, "/srv/venv/bin/python", "/k/serving", False),
        "e1": ("10.0.0.5", "deploy", None, "/usr/bin/python3", None, True),
    }


def _reader_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    bare = tmp_path / "bin"
    bare.mkdir(exist_ok=True)
    path = str(scale.ansible_core_bin()) if reader == "ansible-inventory" else str(bare)
    monkeypatch.setenv("PATH", path + os.pathsep + "/usr/bin:/bin")


@pytest.mark.parametrize("reader", ["builtin", "ansible-inventory"])
def test_what_vpatch_cannot_do_as_ansible_would_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    _reader_path(tmp_path, monkeypatch, reader)
    refused = {
        'web ansible_host=\'{{ lookup("env", "H") }}\'': "ansible_host is a template",
        "web ansible_python_interpreter='{{ venv }}/bin/python'": "is a template",
        "web ansible_connection=no-such-kind": "ansible_connection=no-such-kind",
        "web ansible_become=true ansible_become_method=su": "ansible_become_method=su",
        "web ansible_become=true ansible_become_flags=-i": "ansible_become_flags is set",
        "web ansible_ssh_common_args='-o ProxyJump=b'": "ansible_ssh_common_args is set",
        "web ansible_become_user=a ansible_sudo_user=b": "differ",
    }
    for i, (line, words) in enumerate(refused.items()):
        with pytest.raises(SpecError, match=re.escape(words)) as err:
            load_inventory(write(tmp_path, f"r{i}.ini", f"[g]\n{line}\n"), {})
        assert "host 'web'" in err.value.message, line


@pytest.mark.parametrize("reader", ["builtin", "ansible-inventory"])
def test_connection_aliases_and_become(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    _reader_path(tmp_path, monkeypatch, reader)
    text = """\
local
here ansible_connection=local
aliased ansible_host=a ansible_ssh_host=b ansible_port=1 ansible_ssh_port=2
[g]
aliased ansible_user=u ansible_ssh_user=v
[ungrouped]
svc ansible_become=yes ansible_become_user=vllm ansible_become_method=sudo
root ansible_become=true
asked ansible_become=false ansible_become_user=vllm
auto ansible_python_interpreter=auto_silent
own ansible_connection=paramiko vpatch_transport=paramiko
client ansible_connection=paramiko
"""
    inv = {t.name: t for t, _ in load_inventory(write(tmp_path, "h.ini", text), {}).hosts}
    # A host NAMED local is an SSH host; only ansible_connection=local is this machine.
    assert (inv["local"].local, inv["local"].address) == (False, "local")
    assert inv["here"].local
    assert (inv["aliased"].address, inv["aliased"].port, inv["aliased"].user) == ("b", 2, "v")
    assert (inv["svc"].sudo, inv["svc"].sudo_user) == (True, "vllm")
    assert (inv["root"].sudo, inv["root"].sudo_user) == (True, None)
    assert (inv["asked"].sudo, inv["asked"].sudo_user) == (False, None)
    assert inv["auto"].python == "python3"
    # vpatch_transport names the host's own kind; ansible_connection alone keeps the run's
    assert (inv["own"].transport, inv["client"].transport) == ("paramiko", None)
    with pytest.raises(SpecError, match="unknown transport 'no-such-kind'"):
        load_inventory(write(tmp_path, "d.ini", "h vpatch_transport=no-such-kind\n"), {})
    with pytest.raises(SpecError, match="sudo on the local target"):
        load_inventory(
            write(tmp_path, "l.ini", "h ansible_connection=local ansible_become=1\n"), {}
        )


def test_hosts_toml_local_only_when_written_as_address(tmp_path: Path) -> None:
    text = (
        '[[host]]\nname = "local"\naddress = "gpu-1"\n\n[[host]]\nname = "me"\naddress = "local"\n'
    )
    inv = {t.name: t for t, _ in load_inventory(write(tmp_path, "h.toml", text), {}).hosts}
    assert not inv["local"].local and inv["me"].local
    text = '[[host]]\nname = "a"\naddress = "a"\nsudo = true\nsudo_user = "vllm"\n'
    [(t, _)] = load_inventory(write(tmp_path, "s.toml", text), {}).hosts
    assert (t.sudo, t.sudo_user) == (True, "vllm")
    with pytest.raises(SpecError, match="user name"):
        load_inventory(write(tmp_path, "b.toml", text.replace("vllm", "-oX")), {})


def test_sudo_user_reaches_the_remote_command() -> None:
    assert remote_command("/p", True, sudo_user="vllm").startswith("sudo -n -u vllm /p -I -c ")
    # As root, the agent's stage 0 runs under the trusted interpreter (agent/privsep.py).
    assert remote_command("/p", True).startswith("sudo -n /usr/bin/python3 -I -S -c ")
    assert "-u vllm" not in remote_command("/p", False, sudo_user="vllm")


def test_yaml_without_pyyaml_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    with pytest.raises(SpecError, match="needs PyYAML") as err:
        load_inventory(write(tmp_path, "hosts.yml", YAML), {})
    assert err.value.hint


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
