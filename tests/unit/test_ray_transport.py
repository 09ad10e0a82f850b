"""patcher.transports.ray without a cluster: a fake `ray` module that runs each "task" here.

The fake keeps Ray's contract as the transport uses it (init / nodes / remote(...).options(
scheduling_strategy=...).remote(...) / get / cancel / exceptions / cloudpickle), and runs the
task function for real: the agent starts under the node's interpreter (a stand-in env made by
pip), so the engine, the agent and the transport are the real ones. The real cluster is in
tests/integration/test_ray.py; these cover node selection, the python map, errors and the CLI
wiring in milliseconds, and run where Ray is not installed.
"""

from __future__ import annotations

import json
import signal
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from patcher import cli
from patcher.errors import HostError, SpecError, UsageError
from patcher.plan.base import Options
from patcher.run import engine
from patcher.specs.model import load_spec
from patcher.transports import ray
from tests import standin
from tests.support.standin_specs import SPEC_A

ID_A, ID_B = "a" * 56, "b" * 56


class RayError(Exception):
    pass


class NodeDiedError(RayError):
    pass


class GetTimeoutError(RayError, TimeoutError):
    pass


class NodeAffinitySchedulingStrategy:
    def __init__(self, node_id: str, soft: bool) -> None:
        self.node_id, self.soft = node_id, soft


class _Ref:
    def __init__(self, fake: FakeRay, fn: Callable[..., Any], node: str, args: tuple[Any, ...]):
        self.fake, self.fn, self.node, self.args = fake, fn, node, args


class _Options:
    def __init__(self, fake: FakeRay, fn: Callable[..., Any], strategy: Any) -> None:
        self.fake, self.fn, self.strategy = fake, fn, strategy

    def remote(self, *args: Any) -> _Ref:
        assert isinstance(self.strategy, NodeAffinitySchedulingStrategy)
        assert self.strategy.soft is False  # pinned: never runs on another node
        self.fake.calls.append((self.strategy.node_id, json.loads(args[2].split(b"\n", 1)[1])))
        return _Ref(self.fake, self.fn, self.strategy.node_id, args)


class _Remote:
    def __init__(self, fake: FakeRay, fn: Callable[..., Any]) -> None:
        self.fake, self.fn = fake, fn

    def options(self, scheduling_strategy: Any) -> _Options:
        return _Options(self.fake, self.fn, scheduling_strategy)


class FakeRay(types.ModuleType):
    """What the transport needs of `ray`, in-process; `dead`/`slow` nodes fail their tasks."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__("ray")
        self._nodes = nodes
        self.address: str | None = None
        self.remote_options: dict[str, Any] = {}
        self.registered = 0  # remote functions made (each one is an export to the cluster)
        self.by_value: list[str] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.cancelled: list[tuple[_Ref, bool]] = []
        self.dead: set[str] = set()
        self.slow: set[str] = set()
        self.exceptions = types.SimpleNamespace(RayError=RayError, GetTimeoutError=GetTimeoutError)
        self.cloudpickle = types.SimpleNamespace(
            register_pickle_by_value=lambda m: self.by_value.append(m.__name__)
        )

    def is_initialized(self) -> bool:
        return self.address is not None

    def init(self, address: str, **_: Any) -> None:
        self.address = address

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes

    def remote(self, **opts: Any) -> Callable[[Callable[..., Any]], _Remote]:
        self.remote_options = opts
        self.registered += 1
        return lambda fn: _Remote(self, fn)

    def get(self, ref: _Ref, timeout: float) -> Any:
        assert timeout > 0
        if ref.node in self.dead:
            raise NodeDiedError(ref.node)
        if ref.node in self.slow:
            raise GetTimeoutError(ref.node)
        return ref.fn(*ref.args)

    def cancel(self, ref: _Ref, force: bool) -> None:
        self.cancelled.append((ref, force))

    def shutdown(self) -> None:
        self.address = None


def node(node_id: str, name: str, alive: bool = True) -> dict[str, Any]:
    return {"NodeID": node_id, "NodeManagerAddress": "10.0.0.7", "NodeName": name, "Alive": alive}


@pytest.fixture(scope="module")
def pythons(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two stand-in envs (pip-installed), one per fake node."""
    root = tmp_path_factory.mktemp("envs")
    return {name: str(standin.make_env(root / name)) for name in ("n1", "n2")}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    fake = FakeRay([node(ID_B, "n2"), node(ID_A, "n1"), node("c" * 56, "gone", alive=False)])
    util = types.ModuleType("ray.util")
    strategies = types.ModuleType("ray.util.scheduling_strategies")
    strategies.NodeAffinitySchedulingStrategy = NodeAffinitySchedulingStrategy  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setitem(sys.modules, "ray.util", util)
    monkeypatch.setitem(sys.modules, "ray.util.scheduling_strategies", strategies)
    yield fake


def test_nodes_alive_sorted_with_map_then_python_then_own() -> None:
    raw = [
        node(ID_B, "n2"),
        {**node(ID_A, "n1"), "NodeManagerAddress": "10.0.0.8"},
        node("c" * 56, "n3"),
        node("d" * 56, "dead", alive=False),
    ]
    pymap = {ID_A: "/by/id", "n1": "/by/name", "10.0.0.7": "/by/address"}
    got = ray.select_nodes(raw, "/flag", pymap)
    assert [(n.name, n.python) for n in got] == [
        ("n1", "/by/id"),  # id beats name
        ("n2", "/by/address"),
        ("n3", "/by/address"),
    ]
    assert got[0].target == f"10.0.0.8/{ID_A}"
    assert [n.python for n in ray.select_nodes(raw, "/flag", {})] == ["/flag"] * 3
    assert [n.python for n in ray.select_nodes(raw, None, {})] == [None] * 3


def test_map_key_matching_no_alive_node_is_refused() -> None:
    with pytest.raises(UsageError) as err:
        ray.select_nodes([node(ID_A, "n1"), node(ID_B, "dead", False)], None, {"dead": "/p"})
    assert "'dead' match no alive node" in err.value.message
    assert "n1 (aaaaaaaaaaaa)" in err.value.hint


def test_python_map_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text("n1 = 3\n")
    with pytest.raises(SpecError, match="must map to an interpreter path"):
        ray.load_python_map(str(bad))
    bad.write_text("n1 = \n")
    with pytest.raises(SpecError, match="invalid TOML"):
        ray.load_python_map(str(bad))
    with pytest.raises(UsageError, match="cannot read"):
        ray.load_python_map(str(tmp_path / "missing.toml"))
    bad.write_text('n1 = "/srv/a/bin/python"\n"10.0.0.7" = "/srv/b/bin/python"\n')
    assert ray.load_python_map(str(bad)) == {
        "n1": "/srv/a/bin/python",
        "10.0.0.7": "/srv/b/bin/python",
    }


def test_map_tables_give_each_node_its_rollout_settings(tmp_path: Path) -> None:
    m = tmp_path / "m.toml"
    m.write_text(
        'n1 = {python = "/srv/a/bin/python", restart = "systemctl restart vllm", '
        'health = "http://localhost:8000/health"}\n'
        '"10.0.0.7" = {metrics = "http://localhost:8000/metrics"}\n'
        'n3 = "/srv/c/bin/python"\n'
    )
    pymap = ray.load_python_map(str(m))
    raw = [node(ID_A, "n1"), node(ID_B, "n2"), node("c" * 56, "n3")]
    got = {n.name: n for n in ray.select_nodes(raw, "/flag", pymap)}
    n1, n2, n3 = got["n1"], got["n2"], got["n3"]
    # the first matching entry is the node's, whole (n1's name beats n1's address)
    assert (n1.python, n1.restart, n1.health, n1.metrics) == (
        "/srv/a/bin/python",
        "systemctl restart vllm",
        "http://localhost:8000/health",
        None,
    )
    # a table without python: --python; its settings only where it sets them
    assert (n2.python, n2.restart, n2.metrics) == ("/flag", None, "http://localhost:8000/metrics")
    assert (n3.python, n3.restart, n3.health, n3.metrics) == ("/srv/c/bin/python", None, None, None)

    m.write_text('n1 = {python = "/p", restrat = "x"}\n')
    with pytest.raises(SpecError, match=r"unknown key.*'restrat'"):
        ray.load_python_map(str(m))
    m.write_text('n1 = {restart = ""}\n')
    with pytest.raises(SpecError, match="'restart' must be a non-empty string"):
        ray.load_python_map(str(m))
    m.write_text("n1 = {restart = 3}\n")
    with pytest.raises(SpecError, match="'restart' must be a non-empty string"):
        ray.load_python_map(str(m))


def test_engine_over_ray_tasks_pinned_per_node(
    tmp_path: Path, fake: FakeRay, pythons: dict[str, str]
) -> None:
    spec_file = tmp_path / "a.toml"
    spec_file.write_text(SPEC_A)
    spec = load_spec(spec_file)
    cluster = ray.nodes("auto", None, {"n1": pythons["n1"], "n2": pythons["n2"]})
    assert fake.address == "auto" and [n.name for n in cluster.nodes] == ["n1", "n2"]
    hosts = [engine.apply([spec], cluster.transport(n.target), Options()) for n in cluster.nodes]
    assert [h.patches[0].outcome for h in hosts] == ["applied", "applied"], hosts
    assert fake.registered == 1  # one task for the run's nodes, not one per node
    assert [h.python.split()[0] for h in hosts] == [pythons["n1"], pythons["n2"]]
    # Ray options that matter on a serving cluster: no CPU reserved, never retried.
    assert fake.remote_options == {"num_cpus": 0, "max_retries": 0}
    assert fake.by_value == ["patcher.transports.ray"]
    ops = [(n, req["op"]) for n, req in fake.calls]
    assert ops[:2] == [(ID_A, "inspect"), (ID_A, "commit")]
    # the import check and the closing inspect ride in the commit's exchange
    assert [r["op"] for r in fake.calls[1][1]["then"]] == ["verify", "inspect"]
    assert {n for n, _ in ops} == {ID_A, ID_B}


def test_dead_node_slow_node_and_missing_python_are_host_errors(
    tmp_path: Path, fake: FakeRay, pythons: dict[str, str]
) -> None:
    cluster = ray.nodes("auto", pythons["n1"], {})
    t1, t2 = (cluster.transport(n.target, 5) for n in cluster.nodes)
    request = {"op": "inspect", "packages": {}}
    assert t1.call(request)["ok"] is True

    fake.dead.add(ID_B)
    with pytest.raises(HostError) as err:
        t2.call(request)
    assert "node n2 lost mid-call (NodeDiedError); outcome unknown" in err.value.message

    fake.dead.clear()
    fake.slow.add(ID_B)
    with pytest.raises(HostError, match="timed out after 5s; outcome unknown"):
        t2.call(request)
    assert [force for _, force in fake.cancelled] == [True]

    fake.slow.clear()
    missing = ray.RayTransport(ray.RayNode(ID_B, "10.0.0.7", "n2", str(tmp_path / "no-python")), 5)
    with pytest.raises(HostError) as err:
        missing.call(request)
    assert "not found on this node" in err.value.message and "--ray-python-map" in err.value.hint


def test_each_run_reaches_the_nodes_it_listed(fake: FakeRay, pythons: dict[str, str]) -> None:
    """Two runs in one process (the tests, an Ansible worker): each reaches the nodes its own
    listing found, through its own Settings; a node the run did not list is a HostError."""
    from patcher.inventory.targets import Target
    from patcher.transports import Settings, open_transport

    first = ray.nodes("auto", pythons["n1"], {})
    fake._nodes = [node(ID_A, "n1")]  # n2 left the cluster
    second = ray.nodes("auto", pythons["n2"], {})
    targets = [Target(n.target, f"ray:{n.node_id}") for n in first.nodes]
    got = [open_transport(t, Settings(kind="ray", ray=first)) for t in targets]
    assert [t.node.python for t in got] == [pythons["n1"]] * 2  # type: ignore[attr-defined]
    assert {t.cluster for t in got} == {first}  # type: ignore[attr-defined]
    n1, n2 = targets
    again = open_transport(n1, Settings(kind="ray", ray=second))
    assert again.node.python == pythons["n2"] and again.cluster is second  # type: ignore[attr-defined]
    for settings in (Settings(kind="ray", ray=second), Settings(kind="ray")):
        with pytest.raises(HostError, match="not a node of this run's Ray cluster"):
            open_transport(n2, settings)


def test_run_agent_is_self_contained() -> None:
    """The task body needs nothing from vpatch: it is what cloudpickle ships by value."""
    code = ray.run_agent.__code__
    assert set(code.co_names) <= {
        "subprocess",
        "sys",
        "executable",
        "run",
        "returncode",
        "stdout",
        "stderr",
        "FileNotFoundError",
        "PermissionError",
        "TimeoutExpired",
        "encode",
        "os",
        "geteuid",
    }
    status, out, _ = ray.run_agent(
        None, "import sys; sys.stdout.write(sys.stdin.read())", b"hello", 10
    )
    assert (status, out) == (0, b"hello")
    assert ray.run_agent("/nonexistent/python", "", b"", 10)[0] == 127


def test_cluster_events_never_reach_stdout(fake: FakeRay, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    worker = types.ModuleType("ray._private.worker")
    worker.print_to_stdstream = lambda data, ignore_prefix: seen.append(data)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray._private.worker", worker)
    ray.connect("auto")
    worker.print_to_stdstream({"lines": ["node marked dead"], "is_err": False}, False)  # type: ignore[attr-defined]
    assert seen == [{"lines": ["node marked dead"], "is_err": True}]


def test_cli_ray_flags(
    tmp_path: Path,
    fake: FakeRay,
    pythons: dict[str, str],
    capfd: pytest.CaptureFixture[str],
) -> None:
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    pymap = tmp_path / "m.toml"
    pymap.write_text("".join(f'{k} = "{v}"\n' for k, v in pythons.items()))
    assert cli.main(["status", "--ray", "auto", "--host", "h1"]) == 2
    assert "--ray cannot be combined with --host" in capfd.readouterr().err
    assert cli.main(["status", "--ray-python-map", str(pymap)]) == 2
    assert "needs --ray" in capfd.readouterr().err

    # --report: render_json's default stream is bound at import, out of capfd's reach.
    report = tmp_path / "r.json"
    code = cli.main(
        [
            "apply",
            str(spec),
            "--ray",
            "auto",
            "--ray-python-map",
            str(pymap),
            "--report",
            str(report),
        ]
    )
    doc = json.loads(report.read_text())
    assert code == 0, doc
    assert [h["target"] for h in doc["hosts"]] == [f"10.0.0.7/{ID_A}", f"10.0.0.7/{ID_B}"]
    # The envs are shared with the engine test above: applied there or here, in place now.
    assert {h["patches"][0]["outcome"] for h in doc["hosts"]} <= {"applied", "already_applied"}


def test_cli_without_ray_installed(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert cli.main(["status", "--ray", "127.0.0.1:6379"]) == 2
    err = capfd.readouterr().err
    assert "needs the `ray` package" in err and "vpatch[ray]" in err


def test_rollout_over_ray_restarts_each_node_with_its_own_command(
    tmp_path: Path, fake: FakeRay, pythons: dict[str, str]
) -> None:
    """n1's restart from its map table; n2 (a plain python entry) falls back to --restart.
    (Last in the module: the envs are shared, and this one leaves them patched.)"""
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    marks = {n: tmp_path / f"restarted-{n}" for n in ("n1", "n2", "flag")}
    pymap = tmp_path / "m.toml"
    pymap.write_text(
        f'n1 = {{python = "{pythons["n1"]}", restart = "echo n1 >> {marks["n1"]}"}}\n'
        f'n2 = "{pythons["n2"]}"\n'
    )
    report = tmp_path / "r.json"
    argv = ["rollout", str(spec), "--ray", "auto", "--ray-python-map", str(pymap)]
    argv += ["--restart", f"echo flag >> {marks['flag']}", "--report", str(report)]
    before = signal.getsignal(signal.SIGINT)
    try:
        code = cli.main(argv)
    finally:  # a rollout ignores Ctrl-C once its hosts are done (the report must be written)
        signal.signal(signal.SIGINT, before)
    doc = json.loads(report.read_text())
    assert code == 0, doc
    assert marks["n1"].read_text() == "n1\n" and marks["flag"].read_text() == "flag\n"
    assert not marks["n2"].exists()
    by = {h["target"].split("/")[1]: h["rollout"] for h in doc["hosts"]}
    assert by[ID_A]["restart"] == f"echo n1 >> {marks['n1']}"
    assert by[ID_B]["restart"] == f"echo flag >> {marks['flag']}"
    assert {r["verdict"] for r in by.values()} == {"kept"}
    assert [p["step"] for p in by[ID_A]["phases"]] == ["apply", "restart"]
    # every restart ran as a task pinned to its own node
    restarts = [(n, req["command"]) for n, req in fake.calls if req["op"] == "restart"]
    assert sorted(restarts) == sorted([(ID_A, by[ID_A]["restart"]), (ID_B, by[ID_B]["restart"])])
