"""The container kinds (patcher.transports.container, .podman, .docker) without an engine: the
argv each starts, here and through SSH, the engine's errors in vpatch's words, and the
inventory's container targets (the real engines: tests/integration/test_containers.py)."""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

import pytest

from patcher.errors import HostError, SpecError, UsageError
from patcher.inventory.targets import Target, load_inventory
from patcher.transports import KINDS, Settings, kind_for, open_transport
from patcher.transports.bundle import TRUSTED_PYTHON
from patcher.transports.container import Box, ContainerTransport, engine_error, exec_argv
from patcher.transports.openssh import OpenSshTransport
from patcher.transports.ssh import SshOptions

BOX = Target("vllm", "local", python="/srv/venv/bin/python", local=True, transport="podman",
             container="vllm-0")  # fmt: skip


@pytest.fixture
def engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`podman` and `docker` on PATH that run the agent's line here (`ENGINE exec -i [--user
    U] C sh -c LINE` -> `sh -c LINE`): the session's shape without an engine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("podman", "docker", "kubectl"):
        exe = bin_dir / name
        exe.write_text('#!/bin/sh\nwhile [ "$1" != sh ]; do shift; done\nexec "$@"\n')
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def test_each_engine_is_one_kind_and_a_container_is_reached_by_it() -> None:
    assert KINDS["podman"] == "patcher.transports.podman"
    assert KINDS["docker"] == "patcher.transports.docker"
    assert kind_for(BOX, Settings(kind="paramiko")) == "podman"  # local, yet its engine's
    remote = BOX._replace(address="gpu-01", local=False, transport="docker")
    assert kind_for(remote, Settings()) == "docker"
    with pytest.raises(UsageError):  # a run-wide engine would name no container
        kind_for(BOX._replace(container=None, transport=None, local=False), Settings(kind="podman"))


def test_argv_is_the_engines_exec_of_the_ssh_bootstrap(engines: Path) -> None:
    t = open_transport(BOX, Settings(trusted_python="/usr/bin/python3.11"))
    assert isinstance(t, ContainerTransport)
    argv = t._argv()
    assert argv[:5] == [str(engines / "podman"), "exec", "-i", "vllm-0", "sh"]
    line = argv[-1]
    assert argv[-2] == "-c"
    assert "/usr/bin/python3.11 -I -S -c" in line  # stage 0 as the container's root
    assert "exec /srv/venv/bin/python -I -c" in line  # else the env's own interpreter
    user = open_transport(BOX._replace(container_user="app", transport="docker"), Settings())
    assert user._argv()[1:6] == ["exec", "-i", "--user", "app", "vllm-0"]  # type: ignore[attr-defined]


def test_through_ssh_the_remote_command_is_the_exec(engines: Path) -> None:
    remote = BOX._replace(address="gpu-01", local=False, user="ops", sudo=True)
    t = open_transport(remote, Settings())
    assert isinstance(t, OpenSshTransport)
    argv = t._argv()
    assert argv[-2] == "gpu-01"
    words = shlex.split(argv[-1])
    assert words[:6] == ["sudo", "-n", "podman", "exec", "-i", "vllm-0"]
    assert words[6:8] == ["sh", "-c"] and TRUSTED_PYTHON in words[8]
    assert not t.kept  # nothing is kept in a container


def test_a_session_runs_through_the_engines_exec(engines: Path) -> None:
    """The whole pipe session (bundle, request, answer) through the fake engine's exec."""
    import sys

    t = open_transport(BOX._replace(python=sys.executable), Settings())
    try:
        answer = t.call({"op": "inspect", "packages": {}}, timeout=60)
    finally:
        t.close()
    assert answer.get("ok") is True, answer
    assert answer["python"]["executable"] == sys.executable, answer["python"]


def test_an_exec_of_another_shape_is_one_box(engines: Path) -> None:
    """What a kubectl kind would hand the transport: its own exec words, the same line and
    session (here through the stand-in `kubectl`)."""
    import sys

    words = ("kubectl", "exec", "-i", "-n", "serve", "vllm-0", "-c", "server", "--")
    box = Box("kubectl", "vllm-0", words=words)
    assert exec_argv(box, "LINE") == [*words, "sh", "-c", "LINE"]
    t = ContainerTransport("pod", box, SshOptions(python=sys.executable))
    try:
        answer = t.call({"op": "inspect", "packages": {}}, timeout=60)
    finally:
        t.close()
    assert answer.get("ok") is True, answer


@pytest.mark.parametrize(
    ("err", "code", "words"),
    [
        (b'Error: no container with name or ID "vllm-0" found: no such container', 125,
         "no container 'vllm-0' (podman)"),
        (b"Error: No such container: vllm-0", 1, "no container 'vllm-0'"),
        (b"Error: can only create exec sessions on running containers: container state improper",
         125, "is not running"),
        (b"Error response from daemon: Container 0f3a is not running", 1, "is not running"),
        (b'OCI runtime exec failed: exec: "sh": executable file not found in $PATH', 126,
         "could not start the agent"),
        (b"sh: 1: exec: /srv/venv/bin/python: not found", 127,
         "python '/srv/venv/bin/python' not found in container 'vllm-0'"),
    ],
)  # fmt: skip
def test_the_engines_errors_in_vpatchs_words(err: bytes, code: int, words: str) -> None:
    e = engine_error("vllm", Box("podman", "vllm-0"), SshOptions(python="/srv/venv/bin/python"),
                     err, code)  # fmt: skip
    assert isinstance(e, HostError)
    assert words in str(e), str(e)
    assert e.hint


@pytest.mark.parametrize("name", ["-it", "a b", "x;rm", "", "..", "a/b"])
def test_a_name_no_engine_takes_is_refused_before_anything_runs(engines: Path, name: str) -> None:
    with pytest.raises(HostError, match="container name"):
        open_transport(BOX._replace(container=name), Settings())
    with pytest.raises(HostError, match="exec --user"):
        open_transport(BOX._replace(container_user="--privileged"), Settings())


def test_the_inventory_names_containers(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.toml"
    inv.write_text(
        '[[host]]\nname = "a"\naddress = "local"\ntransport = "podman"\ncontainer = "vllm-a"\n'
        '[[host]]\nname = "b"\naddress = "gpu-01"\nuser = "ops"\ntransport = "docker"\n'
        'container = "vllm"\ncontainer_user = "app"\n'
    )
    hosts = [t for t, _ in load_inventory(str(inv), {}).hosts]
    assert [(t.local, t.transport, t.container, t.container_user, t.user) for t in hosts] == [
        (True, "podman", "vllm-a", None, None),
        (False, "docker", "vllm", "app", "ops"),
    ]


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ('address = "local"\ncontainer = "c"\n', "container 'c' without its engine"),
        ('address = "h"\ntransport = "docker"\n', "transport 'docker' names no container"),
        ('address = "h"\ntransport = "podman"\ncontainer = "-x"\n', "not a container name"),
    ],
)
def test_the_inventory_refuses_half_a_container(tmp_path: Path, table: str, words: str) -> None:
    inv = tmp_path / "hosts.toml"
    inv.write_text(f'[[host]]\nname = "a"\n{table}')
    with pytest.raises(SpecError, match=words) as exc:
        load_inventory(str(inv), {})
    assert exc.value.hint


def test_host_flag_names_a_container(engines: Path) -> None:
    """`--host podman://NAME` through the real CLI (the stand-in engine runs the line here),
    and the names it refuses: exit 2, one error and a hint, nothing run."""
    import os
    import sys

    from tests.conftest import vpatch

    env = {"PATH": os.environ["PATH"]}
    ran = vpatch("status", "--host", "podman://vllm-0", "--python", sys.executable, "--json",
                 env=env)  # fmt: skip
    assert ran.code == 0, ran.err
    [host] = ran.doc["hosts"]
    assert (host["target"], host["transport"]) == ("podman://vllm-0", "podman")
    # ephemeral unless the env is on a mount of its own (here: wherever the test's venv is)
    assert host["ephemeral"] is (host["env_mounted"] is not True)
    for bad in ("docker://-x", "podman://a b", "docker://ops@gpu-01/", "docker://x;y/vllm"):
        ran = vpatch("status", "--host", bad, env=env)
        assert ran.code == 2, (bad, ran.err)
        assert [ln.split(":")[0] for ln in ran.err.strip().splitlines()] == ["error", "hint"], (
            ran.err
        )
    ran = vpatch("status", "--host", "docker://vllm", "--sudo", env=env)
    assert ran.code == 2 and "--sudo does not apply" in ran.err, ran.err


def test_host_flag_on_an_ssh_host() -> None:
    import argparse

    from patcher.commands._targets import flag_target

    args = argparse.Namespace(python=None, identity=None, sudo=True, no_share=False)
    t = flag_target(args)("docker://ops@gpu-01:2222/vllm")
    assert (t.address, t.user, t.port, t.local, t.transport, t.container, t.sudo) == (
        "gpu-01", "ops", 2222, False, "docker", "vllm", True
    )  # fmt: skip
