"""The hosts.toml checks (patcher/inventory/targets.py `_validate`): plain code, as every run reads
the
inventory before it contacts a host. Each case: the data, then where and what is wrong (or
None for data that passes)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from patcher.errors import SpecError
from patcher.inventory.targets import load_inventory
from patcher.transports import KINDS

H = {"name": "a", "address": "a"}

CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("minimal", {"host": [H]}, None),
    (
        "all fields",
        {
            "defaults": {"user": "ops", "port": 22, "python": "/p", "identity": "/k", "sudo": True},
            "host": [dict(H, groups=["gpu"], port=2222)],
        },
        None,
    ),
    ("no host table", {"defaults": {"user": "ops"}}, "host: Field required"),
    ("empty host list", {"host": []}, "host: List should have at least 1 item"),
    ("host not a list", {"host": {"name": "a"}}, "host: Input should be a valid list"),
    ("host entry not a table", {"host": ["a"]}, "host[0]: Input should be a valid dictionary"),
    ("unknown top-level key", {"host": [H], "hosts": []}, "hosts: Extra inputs are not permitted"),
    ("unknown host field", {"host": [dict(H, pasword="x")]}, "host[0].pasword: Extra inputs"),
    ("unknown default", {"defaults": {"name": "x"}, "host": [H]}, "defaults.name: Extra inputs"),
    ("missing address", {"host": [{"name": "a"}]}, "host[0].address: Field required"),
    ("missing name", {"host": [{"address": "a"}]}, "host[0].name: Field required"),
    ("name with a space", {"host": [dict(H, name="a b")]}, "host[0].name: name must be"),
    (
        "address an option",
        {"host": [dict(H, address="-oProxyCommand=x")]},
        "host[0].address: host name",
    ),
    ("address with shell", {"host": [dict(H, address="y; touch M")]}, "host[0].address: host name"),
    ("user with shell", {"defaults": {"user": "a;b"}, "host": [H]}, "defaults.user: user name"),
    ("port zero", {"host": [dict(H, port=0)]}, "host[0].port: Input should be between 1 and 65535"),
    ("port too big", {"host": [dict(H, port=70000)]}, "host[0].port: Input should be between"),
    (
        "port a word",
        {"host": [dict(H, port="ssh")]},
        "host[0].port: Input should be a valid integer",
    ),
    (
        "port a bool",
        {"host": [dict(H, port=True)]},
        "host[0].port: Input should be a valid integer",
    ),
    (
        "port a float",
        {"host": [dict(H, port=22.5)]},
        "host[0].port: Input should be a valid integer",
    ),
    ("port as digits", {"host": [dict(H, port="2222")]}, None),
    (
        "sudo a word",
        {"host": [dict(H, sudo="maybe")]},
        "host[0].sudo: Input should be a valid bool",
    ),
    ("sudo as yes", {"host": [dict(H, sudo="yes")]}, None),
    (
        "python a number",
        {"host": [dict(H, python=3)]},
        "host[0].python: Input should be a valid str",
    ),
    (
        "groups a string",
        {"host": [dict(H, groups="gpu")]},
        "host[0].groups: Input should be a valid list",
    ),
    (
        "group a number",
        {"host": [dict(H, groups=[1])]},
        "host[0].groups[0]: Input should be a valid str",
    ),
    (
        "same name twice",
        {"host": [H, dict(H, address="b")]},
        "host[1].name: host name 'a' appears twice",
    ),
]


def _toml(data: dict[str, Any]) -> str:
    """The data as a hosts.toml (only the shapes CASES uses)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        return repr(v)

    return "\n".join(f"{k} = {value(v)}" for k, v in data.items()) + "\n"


@pytest.mark.parametrize(("name", "data", "error"), CASES, ids=[c[0] for c in CASES])
def test_inventory_cases(
    tmp_path: Path, name: str, data: dict[str, Any], error: str | None
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(_toml(data))
    if error is None:
        inv = load_inventory(str(path), {})
        assert [t.name for t, _ in inv.hosts] == [h["name"] for h in data["host"]]
        return
    with pytest.raises(SpecError) as got:
        load_inventory(str(path), {})
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+: {re.escape(error)}", got.value.message), (
        got.value.message
    )
    assert "[[host]]" in (got.value.hint or "")


def test_values_and_precedence(tmp_path: Path) -> None:
    """A host's own field wins over [defaults], which wins over the command line's flags; the
    strings an Ansible inventory gives become numbers and booleans."""
    path = tmp_path / "hosts.toml"
    path.write_text(
        '[defaults]\nuser = "ops"\nsudo = "yes"\n'
        '[[host]]\nname = "a"\naddress = "10.0.0.1"\nport = "2222"\ngroups = ["gpu"]\n'
        '[[host]]\nname = "b"\naddress = "b"\nuser = "root"\nsudo = false\n'
    )
    inv = load_inventory(str(path), {"python": "/flag/python", "user": "flag", "port": None})
    (a, ga), (b, gb) = inv.hosts
    assert (a.address, a.user, a.port, a.python, a.sudo, ga) == (
        "10.0.0.1",
        "ops",
        2222,
        "/flag/python",
        True,
        frozenset({"gpu"}),
    )
    assert (b.user, b.port, b.sudo, gb) == ("root", None, False, frozenset())


def test_rollout_fields_host_over_defaults(tmp_path: Path) -> None:
    """`vpatch rollout`'s per-host restart command and URLs: a host's own win over [defaults];
    a non-string is refused like any other field."""
    path = tmp_path / "hosts.toml"
    path.write_text(
        '[defaults]\nrestart = "systemctl restart vllm"\nhealth = "http://localhost:8000/health"\n'
        '[[host]]\nname = "a"\naddress = "a"\n'
        '[[host]]\nname = "b"\naddress = "b"\nrestart = "docker restart vllm"\n'
        'metrics = "http://localhost:9000/metrics"\n'
    )
    (a, _), (b, _) = load_inventory(str(path), {}).hosts
    assert (a.restart, a.health, a.metrics) == (
        "systemctl restart vllm",
        "http://localhost:8000/health",
        None,
    )
    assert (b.restart, b.metrics) == ("docker restart vllm", "http://localhost:9000/metrics")
    path.write_text('[[host]]\nname = "a"\naddress = "a"\nrestart = 3\n')
    with pytest.raises(SpecError) as got:
        load_inventory(str(path), {})
    assert "host[0].restart: Input should be a valid string" in got.value.message


HOSTS = """\
[defaults]
user = "ops"

[[host]]
name = "a"
address = "a1"

[[host]]
name = "b"
address = "b1"
  prot = 22
"""


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (HOSTS, "11:3: host[1].prot: Extra inputs are not permitted"),
        (HOSTS.replace("prot = 22", "groups = [1]"), "11:3: host[1].groups[0]: Input should be"),
        (HOSTS.replace("  prot = 22", "  port = 0"), "11:3: host[1].port: Input should be between"),
        (HOSTS.replace('"b"', '"a"').replace("  prot = 22\n", ""), "9:1: host[1].name: host"),
        (HOSTS.replace('user = "ops"', 'usr = "ops"'), "2:1: defaults.usr: Extra inputs"),
        (HOSTS.replace('[[host]]\nname = "b"', '[[host]\nname = "b"'), "8:7: invalid TOML"),
        ('[[host]]\nname = "a"\n', "1:1: host[0].address: Field required"),
    ],
    ids=["unknown field", "group item", "bad value", "same name", "defaults", "syntax", "missing"],
)
def test_errors_say_file_line_and_column(tmp_path: Path, text: str, error: str) -> None:
    """`FILE:LINE:COL: FIELD: message`, as `vpatch check` says a spec's problems: the line and
    column where the field is written, or the table that lacks it, or the TOML syntax error."""
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as got:
        load_inventory(str(path), {})
    assert got.value.message.startswith(f"{path}:{error}"), got.value.message


def test_metrics_may_list_several_endpoints_and_defaults_name_the_control_hosts(
    tmp_path: Path,
) -> None:
    """`metrics = [URL, ...]`: one host's engines (summed by the rollout's scrape);
    `[defaults] control = K`: the rollout's control hosts (--control K wins)."""
    from patcher.inventory.targets import load_inventory
    from patcher.rollout import settings

    inv = tmp_path / "hosts.toml"
    inv.write_text(
        "[defaults]\ncontrol = 1\nmetrics = 'http://localhost:8000/metrics'\n"
        "[[host]]\nname = 'a'\naddress = '127.0.0.1'\n"
        "metrics = ['http://localhost:8000/metrics', 'http://localhost:8001/metrics']\n"
        "[[host]]\nname = 'b'\naddress = '127.0.0.1'\n"
    )
    read = load_inventory(str(inv), {})
    a, b = (t for t, _ in read.hosts)
    assert settings.urls(a.metrics) == [
        "http://localhost:8000/metrics",
        "http://localhost:8001/metrics",
    ]
    assert settings.urls(b.metrics) == ["http://localhost:8000/metrics"]
    assert read.control == 1


def test_a_host_names_its_own_transport(tmp_path: Path) -> None:
    """`transport = KIND` (a name in patcher.transports.KINDS): the host's own wins over
    [defaults]; none leaves the run's choice (None); `local` makes the host this machine, as
    `address = "local"` does."""
    path = tmp_path / "hosts.toml"
    path.write_text(
        '[defaults]\ntransport = "openssh"\n'
        '[[host]]\nname = "a"\naddress = "a"\ntransport = "paramiko"\n'
        '[[host]]\nname = "b"\naddress = "b"\n'
        '[[host]]\nname = "c"\naddress = "c"\ntransport = "local"\n'
    )
    (a, _), (b, _), (c, _) = load_inventory(str(path), {}).hosts
    assert [(t.transport, t.local) for t in (a, b, c)] == [
        ("paramiko", False),
        ("openssh", False),
        (None, True),
    ]
    path.write_text('[[host]]\nname = "a"\naddress = "a"\n')
    assert load_inventory(str(path), {}).hosts[0][0].transport is None


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        ("paramico", 'did you mean "paramiko"? a transport is one of: '),
        ("no-such-kind", "a transport is one of: "),
    ],
)
def test_an_unknown_transport_is_an_error_where_it_is_written(
    tmp_path: Path, kind: str, hint: str
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(
        f'[[host]]\nname = "a"\naddress = "a"\n\n[[host]]\nname = "b"\n'
        f'address = "b"\n  transport = "{kind}"\n'
    )
    with pytest.raises(SpecError) as got:
        load_inventory(str(path), {})
    assert got.value.message == f"{path}:8:3: host[1].transport: unknown transport {kind!r}"
    assert got.value.hint == hint + ", ".join(KINDS)


def test_the_local_target_takes_no_other_transport(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    """A host's own `transport` on `address = "local"` contradicts it; [defaults]' is for the
    other hosts."""
    path.write_text('[[host]]\nname = "here"\naddress = "local"\ntransport = "openssh"\n')
    with pytest.raises(SpecError, match="transport 'openssh' on the local target"):
        load_inventory(str(path), {})
    path.write_text(
        '[defaults]\ntransport = "paramiko"\n[[host]]\nname = "here"\naddress = "local"\n'
        '[[host]]\nname = "a"\naddress = "a"\n'
    )
    (here, _), (a, _) = load_inventory(str(path), {}).hosts
    assert (here.local, here.transport, a.local, a.transport) == (True, None, False, "paramiko")
    # [defaults] cannot make every host this machine
    path.write_text('[defaults]\ntransport = "local"\n[[host]]\nname = "a"\naddress = "gpu-1"\n')
    with pytest.raises(SpecError) as got:
        load_inventory(str(path), {})
    assert got.value.message.startswith(f"{path}:2:1: defaults.transport: transport 'local'")
