"""The agent on every alive node of a Ray cluster: one Ray task per agent call, pinned to its node.

Why Ray: multi-node vLLM already runs on a Ray cluster, often KubeRay, where pods have no SSH.
The cluster itself reaches every node, so vpatch rides it instead of opening connections:
`vpatch apply SPEC --ray auto` (or `--ray ray://head:10001`) lists the alive nodes and runs the
same engine as `--host`, on the controller, with each node as one target. Only the transport
differs: an agent call is a task pinned with `NodeAffinitySchedulingStrategy(soft=False)` that
starts the node's interpreter as `python -I -c BOOT` with the agent bundle and the request on
stdin, exactly as the local and SSH transports do, and returns its stdout.

Choices, and why:
- `num_cpus=0`: a serving cluster has its CPUs reserved by vLLM's actors; a patch task must not
  queue behind them (it is a short subprocess, not compute).
- `max_retries=0`: Ray would retry a task whose worker or node died on ANOTHER attempt; a commit
  must run at most once, and a lost call is reported as "outcome unknown" (the agent's writes are
  atomic, so `vpatch status` tells which side of the write the node is on).
- The task function is pickled by value (cloudpickle), so nodes need neither vpatch nor anything
  but their own Python: the same "nothing installed on the target" as over SSH.
- Which interpreter: a `--ray-python-map` entry for the node (by node id, node name or address),
  else `--python`, else the node's own Python (the Ray worker's `sys.executable`: on a vLLM Ray
  image that is the serving environment).
- `vpatch rollout --ray`: the same map entry may be a table that also names the node's
  `restart` command and `health`/`metrics` URLs (`n1 = {python = "...", restart = "..."}`),
  over `--restart`/`--health`/`--metrics`, as an inventory host's do over SSH. One file, not a
  second map: a node's environment and the service that serves from it belong together, and
  the key rules (id, name or address; a key matching no alive node is refused) stay one.

This is the only module that imports `ray` (the optional extra `vpatch[ray]`); the driver's Ray
and Python versions must match the cluster's, as for any Ray driver.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patcher._compat import tomllib
from patcher.errors import HostError, SpecError, UsageError
from patcher.transports import session
from patcher.transports.bundle import BOOT, BOOT0, TRUSTED_PYTHON, agent_bundle, decode_answer

if TYPE_CHECKING:
    from patcher.transports import Settings, Target

_HOW = "`vpatch status --ray ...`"
_SLACK = 30.0  # seconds on top of the agent's own timeout before the driver gives up on a task


def run_agent(
    python: str | None,
    boot: str,
    payload: bytes,
    timeout: float,
    boot0: str = "",
    trusted: str = "",
) -> tuple[int, bytes, bytes]:
    """Runs ON the node, inside a Ray worker: (exit status, stdout, stderr) of the agent.

    As root (a Ray worker often is) the agent starts as every transport starts it then:
    privsep's stage 0 (`boot0`) under the trusted interpreter with `-I -S`, which decides who
    may run the environment's interpreter and drops to its owner; else `python -I -c BOOT`
    with the worker's own power (bundle.agent_argv, written out here: this function must not
    need vpatch on the node).

    Stdlib only and self-contained (imports inside): it is shipped by value to nodes that may
    have nothing but Python. Never raises for expected failures, so that a Ray error always
    means the task itself was lost (node or worker died)."""
    import os
    import subprocess
    import sys

    exe = python or sys.executable
    argv = [exe, "-I", "-c", boot]
    if boot0 and os.geteuid() == 0:
        argv = [trusted, "-I", "-S", "-c", boot0, exe]
    try:
        # process-start: on the Ray node, not the controller: the agent `-I` (stage 0 `-I -S`)
        proc = subprocess.run(argv, input=payload, capture_output=True, timeout=timeout)
    except FileNotFoundError:
        if argv[0] == trusted:
            why = f"the trusted interpreter {trusted!r} (--trusted-python) is not on this node"
            return 127, b"", why.encode()
        return 127, b"", f"python {exe!r} not found on this node".encode()
    except PermissionError:
        return 126, b"", f"python {argv[0]!r} is not executable on this node".encode()
    except subprocess.TimeoutExpired:
        return 124, b"", f"agent timed out after {timeout:g}s; outcome unknown".encode()
    return proc.returncode, proc.stdout, proc.stderr


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--ray needs the `ray` package in vpatch's environment",
            "pip install 'vpatch[ray]' with the same Ray version as the cluster",
        ) from None
    return ray


# ---------------------------------------------------------------------------------------------
# Which interpreter on which node


NODE_KEYS = ("python", "restart", "health", "metrics")


@dataclass(frozen=True)
class NodeEntry:
    """A `--ray-python-map` table entry: the node's interpreter and its rollout settings (None:
    the flag's)."""

    python: str | None = None
    restart: str | None = None
    health: str | None = None
    metrics: str | None = None


def load_python_map(path: str) -> dict[str, str | NodeEntry]:
    """`--ray-python-map FILE`: TOML of `"<node id | node name | address>" = "/path/to/python"`
    or `= {python = "...", restart = "...", health = "URL", metrics = "URL"}` (any of them)."""
    try:
        data = tomllib.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise UsageError(
            f"--ray-python-map {path}: cannot read ({exc.strerror})", "pass an existing file"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}", "fix the TOML syntax") from None
    except RecursionError:  # tomllib's parser recurses once per level: `a = [[[[...`
        raise SpecError(
            f"{path}: invalid TOML: arrays or inline tables nested too deeply",
            'one line per node: h1 = "/srv/vllm/bin/python"',
        ) from None
    out: dict[str, str | NodeEntry] = {}
    bad: list[str] = []
    for key, value in data.items():
        if isinstance(value, str) and value:
            out[str(key)] = value
        elif isinstance(value, dict):
            out[str(key)] = _entry(path, str(key), value)
        else:
            bad.append(str(key))
    if bad:
        raise SpecError(
            f"{path}: {', '.join(map(repr, sorted(bad)))} must map to an interpreter path "
            "(a string) or a table",
            'one line per node: h1 = "/srv/vllm/bin/python" or h1 = {python = "...", '
            'restart = "systemctl restart vllm"} (node name, node id or address)',
        )
    return out


def _entry(path: str, key: str, table: dict[str, Any]) -> NodeEntry:
    unknown = sorted(set(table) - set(NODE_KEYS))
    if unknown:
        raise SpecError(
            f"{path}: {key!r}: unknown key(s) {', '.join(map(repr, unknown))}",
            f"a node's table takes {', '.join(NODE_KEYS)}",
        )
    bad = sorted(k for k, v in table.items() if not isinstance(v, str) or not v)
    if bad:
        raise SpecError(
            f"{path}: {key!r}: {', '.join(map(repr, bad))} must be a non-empty string",
            f'e.g. {key} = {{restart = "systemctl restart vllm"}}',
        )
    return NodeEntry(**{k: str(v) for k, v in table.items()})


@dataclass(frozen=True)
class RayNode:
    """One alive node; `python` None means the node's own interpreter; `restart`, `health`,
    `metrics` its own rollout settings from the map (None: the flags')."""

    node_id: str
    address: str
    name: str
    python: str | None = None
    restart: str | None = None
    health: str | None = None
    metrics: str | None = None

    @property
    def target(self) -> str:
        """How the node is named in reports and JSON: address, then node id (the address
        first, so a narrow table that cuts the id still says where the node is)."""
        return f"{self.address}/{self.node_id}"


def _pick(
    node_id: str, name: str, address: str, python: str | None, pymap: Mapping[str, str | NodeEntry]
) -> NodeEntry:
    """The map entry by node id, then name, then address; its python else --python (None:
    the node's own)."""
    for key in (node_id, name, address):
        if key in pymap:
            got = pymap[key]
            entry = NodeEntry(python=got) if isinstance(got, str) else got
            return replace(entry, python=entry.python or python)
    return NodeEntry(python=python)


def select_nodes(
    raw: list[dict[str, Any]], python: str | None, pymap: Mapping[str, str | NodeEntry]
) -> list[RayNode]:
    """Alive nodes from `ray.nodes()`, in a stable order, each with its interpreter (and its
    rollout settings from the map).

    A map key that matches no alive node is an error, not a silent fallback: a typo would
    otherwise patch the environment of `--python` (or the node's own) instead."""
    nodes: list[RayNode] = []
    used: set[str] = set()
    for n in raw:
        if not n.get("Alive"):
            continue
        node_id = str(n["NodeID"])
        address = str(n.get("NodeManagerAddress", "?"))
        name = str(n.get("NodeName") or address)
        e = _pick(node_id, name, address, python, pymap)
        used.update({node_id, name, address} & set(pymap))
        nodes.append(RayNode(node_id, address, name, e.python, e.restart, e.health, e.metrics))
    unknown = sorted(set(pymap) - used)
    if unknown:
        alive = ", ".join(f"{n.name} ({n.node_id[:12]})" for n in nodes) or "none"
        raise UsageError(
            f"--ray-python-map: {', '.join(map(repr, unknown))} match no alive node",
            f"keys are node ids, node names or addresses; alive: {alive}",
        )
    return sorted(nodes, key=lambda n: (n.name, n.address, n.node_id))


# ---------------------------------------------------------------------------------------------
# The cluster connection (`ray.init`: process-wide, as Ray's own state is) and one run's view
# of it (a Cluster)


def _check_reachable(address: str, timeout: float) -> None:
    """A plain TCP connect to HOST:PORT (or ray://HOST:PORT) first: `ray.init` keeps retrying
    an address where nothing listens (measured: still waiting after 600 s), while a user who
    typed a wrong port wants to hear so in seconds. `auto` is resolved by Ray itself."""
    hostport = address.removeprefix("ray://").rstrip("/")
    host, _, port = hostport.rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise HostError(
            f"cannot reach the Ray cluster at {address!r} ({exc.strerror or exc})",
            "pass the head's GCS address (HEAD:6379) or ray://HEAD:10001 (Ray Client); "
            "is the cluster up (`ray status` on the head)?",
        ) from None


def connect(address: str, connect_timeout: float = 10.0) -> None:
    """`ray.init` once per process; a cluster that cannot be reached is a HostError (exit 1)."""
    ray = _ray()
    if ray.is_initialized():
        return
    _check_reachable(address, connect_timeout)
    try:
        ray.init(
            address=address,
            namespace="vpatch",
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError (version mismatch), ...
        raise HostError(
            f"cannot connect to the Ray cluster at {address!r}: {exc}",
            "pass the head's GCS address (host:6379), `auto` on a cluster node, or "
            "ray://head:10001 (Ray Client); Ray and Python versions must match the cluster's",
        ) from None
    _keep_stdout_clean()


def _keep_stdout_clean() -> None:
    """Send the cluster's event messages to stderr: `--json` promises ONE document on stdout.

    A driver prints cluster events (e.g. "node ... has been marked dead") on STDOUT from a
    background thread, whatever `log_to_driver` says; measured with Ray 2.58 when a node dies
    mid-run. They go through `ray._private.worker.print_to_stdstream`, an internal name: if a
    Ray release renames it, this does nothing (and the node-death test sees stdout break)."""
    worker = sys.modules.get("ray._private.worker")
    original = getattr(worker, "print_to_stdstream", None)
    if original is None or getattr(original, "_vpatch", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr._vpatch = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr  # type: ignore[union-attr]


class Cluster:
    """One run's view of the cluster: the alive nodes it listed (by target name) and the agent
    task, registered with Ray once for all of them (one export to the cluster, not one per
    node). The command keeps it in its transport Settings (`Settings.ray`); a second run in
    the process lists the nodes again."""

    def __init__(self, nodes: list[RayNode]) -> None:
        self.nodes = nodes
        self.by_target = {n.target: n for n in nodes}
        self._task: Any = None
        self._lock = threading.Lock()

    def task(self) -> Any:
        """The registered remote function (`run_agent` as a Ray task), made on first use."""
        with self._lock:
            if self._task is None:
                ray = _ray()
                # By value: nodes do not need vpatch installed to unpickle the task.
                ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
                self._task = ray.remote(num_cpus=0, max_retries=0)(run_agent)
            return self._task

    def transport(
        self, target: str, call_timeout: float = 600.0, trusted_python: str = ""
    ) -> RayTransport:
        """The transport of a node this run listed, by its target name."""
        return RayTransport(self.by_target[target], call_timeout, trusted_python, self)


def nodes(
    address: str,
    python: str | None,
    pymap: Mapping[str, str | NodeEntry],
    connect_timeout: float = 10.0,
) -> Cluster:
    """Connect, then the alive nodes with their interpreters."""
    connect(address, connect_timeout)
    found = select_nodes(list(_ray().nodes()), python, pymap)
    if not found:
        raise HostError(f"the Ray cluster at {address!r} has no alive node", "check `ray status`")
    return Cluster(found)


def make(target: Target, settings: Settings) -> RayTransport:
    """Kind `ray`: a node the run's `nodes()` listed (`settings.ray`; the target is named as
    it named the node)."""
    cluster = settings.ray
    if cluster is None or target.name not in cluster.by_target:
        raise HostError(
            f"{target.name}: not a node of this run's Ray cluster",
            "name Ray nodes with --ray ADDRESS (vpatch lists them)",
        )
    return cluster.transport(target.name, settings.call_timeout, settings.trusted_python)


class RayTransport:
    """Agent calls on one node, each as one Ray task pinned to that node."""

    def __init__(
        self,
        node: RayNode,
        call_timeout: float = 600.0,
        trusted_python: str = "",
        cluster: Cluster | None = None,
    ) -> None:
        self.node = node
        self.target = node.target
        self.call_timeout = call_timeout
        self.trusted_python = trusted_python or TRUSTED_PYTHON
        self.cluster = cluster if cluster is not None else Cluster([node])

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = _ray()
        limit = timeout or self.call_timeout
        payload = agent_bundle() + json.dumps(request).encode()
        pinned = NodeAffinitySchedulingStrategy(node_id=self.node.node_id, soft=False)
        ref = (
            self.cluster.task()
            .options(scheduling_strategy=pinned)
            .remote(self.node.python, BOOT, payload, limit, BOOT0, self.trusted_python)
        )
        try:
            status, out, err = ray.get(ref, timeout=limit + _SLACK)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            raise session.timed_out(self.target, limit, _HOW) from None
        except ray.exceptions.RayError as exc:
            what = f"node {self.node.name}"
            raise session.lost(self.target, what, type(exc).__name__, _HOW) from None
        if status in (126, 127) and not out.strip():
            # run_agent's own words, or stage 0's (`vpatch agent: PATH: not found`)
            last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {status}"]
            why = last[0].removeprefix("vpatch agent: ")
            hint = (
                "pass --python or a --ray-python-map entry with the serving environment's "
                "interpreter on that node"
            )
            if "--trusted-python" in why:
                hint = "pass --trusted-python with a root-owned python3 on that node"
            elif status == 127 and self.node.python and "on this node" not in why:
                why = f"python {self.node.python!r} not found on this node"
            raise HostError(f"{self.target}: {why}", hint)
        if status == 124 and not out.strip():
            raise HostError(
                f"{self.target}: {err.decode('utf-8', 'replace')}",
                "run `vpatch status --ray ...` to see what state the node is in",
            )
        if status < 0 and not out.strip():  # OOM killer, kill -9, a crash
            raise session.killed(self.target, -status, _HOW)
        return decode_answer(self.target, out, err, status)

    def close(self) -> None:
        pass


def shutdown() -> None:
    """Disconnect the driver (the cluster keeps running)."""
    if "ray" in sys.modules:
        ray = sys.modules["ray"]
        if ray.is_initialized():
            ray.shutdown()
