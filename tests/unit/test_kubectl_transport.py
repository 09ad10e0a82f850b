"""Kind kubectl (patcher.transports.kubectl) without a cluster: the exec command it starts, a
session through a stand-in `kubectl`, kubectl's errors in vpatch's words, the pod targets of a
hosts.toml and `--host kubectl://` (the real one-node cluster: tests/k8slab, `make k8s-lab`)."""

from __future__ import annotations

import argparse
import shlex
import stat
import sys
from pathlib import Path

import pytest

from patcher.errors import HostError, SpecError, UsageError
from patcher.inventory.targets import Target, load_inventory
from patcher.transports import KINDS, Settings, kind_for, open_transport
from patcher.transports.kubectl import exec_words, kube_error
from patcher.transports.openssh import OpenSshTransport

POD = Target("vllm-0", "local", python=sys.executable, local=True, transport="kubectl",
             container="serve/vllm-0", container_name="server")  # fmt: skip


@pytest.fixture
def kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `kubectl` on PATH that logs its argv and runs the agent's line here (`kubectl ...
    -- sh -c LINE` -> `sh -c LINE`): the session's shape without a cluster."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "kubectl"
    log = tmp_path / "argv"
    exe.write_text(f'#!/bin/sh\necho "$@" >>{log}\nwhile [ "$1" != sh ]; do shift; done\n'
                   'exec "$@"\n')  # fmt: skip
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return log


def test_kubectl_is_one_kind_and_a_pod_is_reached_by_it() -> None:
    assert KINDS["kubectl"] == "patcher.transports.kubectl"
    assert kind_for(POD, Settings()) == "kubectl"


def test_the_exec_words() -> None:
    assert exec_words("serve/vllm-0", "server", None, None) == (
        "kubectl", "exec", "-i", "-n", "serve", "vllm-0", "-c", "server", "--")  # fmt: skip
    assert exec_words("vllm-0", None, "prod", "/etc/k.conf") == (
        "kubectl", "--kubeconfig=/etc/k.conf", "--context=prod", "exec", "-i", "vllm-0",
        "--")  # fmt: skip


def test_a_session_runs_through_kubectl_exec(kubectl: Path) -> None:
    t = open_transport(POD, Settings())
    try:
        answer = t.call({"op": "inspect", "packages": {}}, timeout=60)
    finally:
        t.close()
    assert answer.get("ok") is True, answer
    argv = kubectl.read_text().split()
    assert argv[: argv.index("sh")] == ["exec", "-i", "-n", "serve", "vllm-0", "-c", "server",
                                        "--"]  # fmt: skip


def test_through_ssh_the_remote_command_is_kubectls_exec() -> None:
    t = open_transport(POD._replace(address="gpu-01", local=False, user="ops"), Settings())
    assert isinstance(t, OpenSshTransport)
    words = shlex.split(t._remote())  # type: ignore[attr-defined]
    assert words[:9] == ["kubectl", "exec", "-i", "-n", "serve", "vllm-0", "-c", "server", "--"]
    assert words[9:11] == ["sh", "-c"]


@pytest.mark.parametrize(
    "bad",
    [
        {"container": "-it"},
        {"container": "Serve/vllm"},
        {"container": "serve/a b"},
        {"container": "a/b/c"},
        {"container_name": "--privileged"},
        {"kube_context": "-x"},
        {"kubeconfig": "--server=evil"},
        {"container_user": "root"},
    ],
)
def test_a_name_kubectl_would_misread_is_refused_before_anything_runs(
    kubectl: Path, bad: dict[str, str]
) -> None:
    with pytest.raises(HostError) as exc:
        open_transport(POD._replace(**bad), Settings())
    assert exc.value.hint
    assert not kubectl.exists()


@pytest.mark.parametrize(
    ("err", "words"),
    [
        (b'Error from server (NotFound): pods "vllm-9" not found', "no pod 'serve/vllm-0'"),
        (b'error: unable to upgrade connection: container not found ("server")',
         "is not running"),
        (b"The connection to the server 10.0.0.1:6443 was refused - did you specify the right "
         b"host or port?\nUnable to connect to the server", "cannot reach the cluster"),
    ],
)  # fmt: skip
def test_kubectls_errors_in_vpatchs_words(err: bytes, words: str) -> None:
    e = kube_error("vllm-0", "serve/vllm-0", err, 1)
    assert e is not None and words in str(e), e
    assert e.hint
    assert kube_error("vllm-0", "serve/vllm-0", b"something else", 1) is None


def test_the_inventory_names_pods(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.toml"
    inv.write_text(
        '[defaults]\nkube_context = "prod"\n'
        '[[host]]\nname = "a"\naddress = "local"\npod = "serve/vllm-0"\n'
        'container_name = "server"\n'
        '[[host]]\nname = "b"\naddress = "gpu-01"\ntransport = "kubectl"\npod = "vllm-1"\n'
        'kubeconfig = "/etc/k.conf"\n'
    )
    hosts = [t for t, _ in load_inventory(str(inv), {}).hosts]
    got = [(t.local, t.transport, t.container, t.container_name, t.kube_context, t.kubeconfig)
           for t in hosts]  # fmt: skip
    assert got == [
        (True, "kubectl", "serve/vllm-0", "server", "prod", None),
        (False, "kubectl", "vllm-1", None, "prod", "/etc/k.conf"),
    ]


REFUSED_TABLES = {
    'address = "local"\npod = "a/b"\ncontainer = "c"\n': "pod 'a/b' with container 'c'",
    'address = "local"\npod = "a/b"\ntransport = "docker"\n': "with transport 'docker'",
    'address = "h"\ntransport = "kubectl"\n': "transport 'kubectl' names no container",
    'address = "local"\npod = "A/b"\n': "is not a pod",
    'address = "local"\npod = "a/b"\ncontainer_name = "-c"\n': "not a container name",
    'address = "local"\npod = "a/b"\nkubeconfig = "--server=x"\n': "not a file name",
}


def test_the_inventory_refuses_a_pod_it_cannot_name(tmp_path: Path) -> None:
    """Each table alone: one SpecError naming what is wrong, with a hint."""
    inv = tmp_path / "hosts.toml"
    for table, words in REFUSED_TABLES.items():
        inv.write_text(f'[[host]]\nname = "a"\n{table}')
        with pytest.raises(SpecError, match=words) as exc:
            load_inventory(str(inv), {})
        assert exc.value.hint, table


def _flag(spec: str, sudo: bool = False) -> Target:
    from patcher.commands._targets import flag_target

    args = argparse.Namespace(python=None, identity=None, sudo=sudo, no_share=False)
    return flag_target(args)(spec)


def test_host_flag_names_a_pod() -> None:
    t = _flag("kubectl://serve/vllm-0/server")
    assert (t.local, t.transport, t.container, t.container_name) == (
        True, "kubectl", "serve/vllm-0", "server")  # fmt: skip
    assert _flag("kubectl://serve/vllm-0").container_name is None
    for bad in ("kubectl://vllm-0", "kubectl://serve/", "kubectl://a/b/c/d", "kubectl://S/x",
                "kubectl://a/b/-c"):  # fmt: skip
        with pytest.raises(UsageError) as exc:
            _flag(bad)
        assert exc.value.hint, bad
    with pytest.raises(UsageError, match="--sudo"):
        _flag("kubectl://serve/vllm-0", sudo=True)


def test_status_of_a_pod_through_the_cli(kubectl: Path) -> None:
    """`--host kubectl://NS/POD` through the real CLI (the stand-in runs the line here): the
    host's transport is kubectl and its patches `ephemeral` unless its env is on a mount."""
    import os

    from tests.conftest import vpatch

    ran = vpatch("status", "--host", "kubectl://serve/vllm-0", "--python", sys.executable,
                 "--json", env={"PATH": os.environ["PATH"]})  # fmt: skip
    assert ran.code == 0, ran.err
    [host] = ran.doc["hosts"]
    assert (host["target"], host["transport"]) == ("kubectl://serve/vllm-0", "kubectl")
    assert host["ephemeral"] is (host["env_mounted"] is not True)
    assert kubectl.read_text().split()[:5] == ["exec", "-i", "-n", "serve", "vllm-0"]


def test_a_container_the_kubelet_is_restarting_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kubectl exec` refuses until the kubelet has started the container again: the session
    is begun again (nothing was asked) until it runs, or `restart_wait` has passed."""
    from patcher.transports.kubectl import PodTransport, Restarting

    bin_dir, count = tmp_path / "bin", tmp_path / "tries"
    bin_dir.mkdir()
    exe = bin_dir / "kubectl"
    exe.write_text(
        f'#!/bin/sh\necho x >>{count}\n'
        f'if [ "$(wc -l <{count})" -le 2 ]; then\n'
        '  echo \'error: unable to upgrade connection: container not found ("server")\' >&2\n'
        "  exit 1\nfi\n"
        'while [ "$1" != sh ]; do shift; done\nexec "$@"\n'
    )  # fmt: skip
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    t = open_transport(POD, Settings())
    assert isinstance(t, PodTransport)
    try:
        answer = t.call({"op": "inspect", "packages": {}}, timeout=60)
    finally:
        t.close()
    assert answer.get("ok") is True, answer
    assert count.read_text().count("x") == 3
    count.unlink()
    monkeypatch.setattr(PodTransport, "restart_wait", 0.0)
    t = open_transport(POD, Settings())
    with pytest.raises(Restarting, match="is not running"):
        t.call({"op": "inspect", "packages": {}}, timeout=60)
    t.close()
    assert count.read_text().count("x") == 1
