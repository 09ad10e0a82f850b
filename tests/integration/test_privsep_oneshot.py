"""The one-shot transports start the agent through privsep's stage 0 too (issue 24's leftover):
a Ray task and the Ansible agent module ran `python -I -c BOOT` as whoever they ran as, so
under a root Ray worker or `become: true` the environment owner's `.pth` ran as root on every
call. Now both start as root exactly as the pipe and SSH transports do: the trusted
interpreter `-I -S -c BOOT0 PYTHON` decides and drops to the owner.

A real unprivileged owner of a real venv (tests/support/owners.py) plants a `.pth` that
records the uid of every interpreter start that runs it; the Ray task body runs here, as the
cluster would run it on a node (the transport, the payload and the agent are the real ones).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from patcher.transports import ray
from patcher.transports.bundle import BOOT, BOOT0, agent_bundle
from tests.support.ansible_module import run_agent_module
from tests.support.owners import HOST_PYTHON, OwnedEnv, owned_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root is the operator here")

INSPECT: dict[str, Any] = {"op": "inspect", "packages": {}}


@pytest.fixture
def owned(tmp_path: Path) -> Iterator[OwnedEnv]:
    with owned_env(tmp_path) as env:
        env.plant_pth()
        yield env


class _Task:
    """`ray.remote(fn).options(...)`: `.remote(*args)` runs the task body here, as a node's
    Ray worker (root, like the worker of a root container) would."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def options(self, scheduling_strategy: Any) -> _Task:
        return self

    def remote(self, *args: Any) -> tuple[Any, ...]:
        return args


def test_ray_task_as_root_starts_stage_0(owned: OwnedEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    task = _Task(ray.run_agent)
    fake = SimpleNamespace(
        get=lambda args, timeout: task.fn(*args),
        exceptions=SimpleNamespace(GetTimeoutError=TimeoutError, RayError=RuntimeError),
        remote=lambda **options: lambda fn: task,
        cloudpickle=SimpleNamespace(register_pickle_by_value=lambda module: None),
    )
    strategies = SimpleNamespace(NodeAffinitySchedulingStrategy=lambda node_id, soft: None)
    monkeypatch.setattr(ray, "_ray", lambda: fake)
    for name, mod in (
        ("ray", fake),
        ("ray.util", SimpleNamespace()),
        ("ray.util.scheduling_strategies", strategies),
    ):
        monkeypatch.setitem(sys.modules, name, mod)
    node = ray.RayNode("a" * 56, "127.0.0.1", "n1", str(owned.python))
    answer = ray.RayTransport(node, 60).call(dict(INSPECT))
    assert answer["ok"], answer
    assert (answer["uid"], answer.get("dropped_from")) == (owned.uid, 0), answer
    assert owned.ran_as() == {owned.uid}, sorted(owned.markers.iterdir())


def test_ray_task_names_a_missing_trusted_interpreter(owned: OwnedEnv, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-python3")
    status, out, err = ray.run_agent(
        str(owned.python), BOOT, agent_bundle() + b"{}", 30, BOOT0, missing
    )
    assert (status, out) == (127, b"") and b"--trusted-python" in err, err
    assert owned.ran_as() == set()


def _module_args(python: Path, **extra: Any) -> dict[str, Any]:
    return {
        "request": json.dumps(INSPECT),
        "agent": agent_bundle().decode(),
        "boot": BOOT,
        "python": str(python),
        **extra,
    }


def test_ansible_module_as_root_starts_stage_0(owned: OwnedEnv, tmp_path: Path) -> None:
    res = run_agent_module(
        _module_args(owned.python, boot0=BOOT0, trusted_python=HOST_PYTHON), tmp_path
    )
    answer = json.loads(res["answer"])
    assert answer["ok"], res
    assert (answer["uid"], answer.get("dropped_from")) == (owned.uid, 0), answer
    assert owned.ran_as() == {owned.uid}, sorted(owned.markers.iterdir())


def test_ansible_module_as_root_refuses_without_stage_0(owned: OwnedEnv, tmp_path: Path) -> None:
    """A caller that sends only `boot` (what every call sent before) is refused as root,
    never run with root's power: nothing of the environment ran."""
    res = run_agent_module(_module_args(owned.python), tmp_path)
    assert res.get("failed") and res["kind"] == "privsep", res
    assert owned.ran_as() == set()
