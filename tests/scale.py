"""Engines beyond one control node, for the tests and docs/scale-lab.md: ansible-core and Ray.

Each engine gets its own cached venv under envs.CACHE (outside the repo and /root), holding the
engine plus vpatch's runtime dependencies, as `pip install vpatch ansible-core` or
`pip install 'vpatch[ray]'` would; `patcher` itself comes from the work tree through PYTHONPATH,
so the code under test is always this tree's. Installs use pip's own configuration.

- Ansible: `collection()` builds `vpatch.core` with `ansible-galaxy collection build` and
  installs the tarball (offline) into a private collections path; `AnsibleLab` writes an
  inventory for an sshd lab (its known_hosts, client key, host key checking on) and an
  ansible.cfg, and runs playbooks with ansible's JSON or default callback.
- Ray: `RayCluster` runs a real multi-node cluster on loopback. Every process of it (and every
  driver) lives in a private network namespace that has only `lo`, so Ray's node IP resolves to
  127.0.0.1, every socket it opens is on loopback, and no packet can leave the namespace. A node
  can also join the mount namespace of an sshd lab host, so it sees that host's /root/ml-env: the
  Ray path and the SSH path then act on the very same environments. Teardown kills exactly the
  processes in that network namespace (pidfds; never by name, never `ray stop`, which would stop
  every Ray on the machine).

`python -m tests.scale compare` times 8 targets through SSH, Ray and Ansible (docs/scale-lab.md).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patcher._compat import tomllib
from tests import envs
from tests import sshd as harness

REPO = Path(__file__).resolve().parent.parent
ANSIBLE_CORE = "ansible-core==2.19.14"  # the bench's pin (bench/ansible.py): one version in play
RAY = "ray[client]==2.58.0"  # the `vpatch[ray]` extra, pinned for the tests
TARGET_PYTHON = "/usr/bin/python3"  # what ansible runs modules with on lab hosts
RAY_PORT = 6379  # the head's GCS port; free by construction in a private network namespace


def _vpatch_dependencies() -> list[str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(data["project"]["dependencies"])


def engine_venv(
    name: str, packages: Sequence[str], python: str = sys.executable, vpatch_deps: bool = True
) -> Path:
    """A cached venv at envs.CACHE/name with `packages` + vpatch's runtime dependencies (unless
    `vpatch_deps` is False: a tool that never imports vpatch).

    Rebuilt only when that list or the base interpreter changes (stamp file). With vpatch's
    dependencies the name carries a digest of them: work trees whose pyproject differs (one
    branch adds a dependency) get a venv each instead of rebuilding one in turn."""
    deps = _vpatch_dependencies() if vpatch_deps else []
    if deps:
        name += "-" + hashlib.sha256("\n".join(deps).encode()).hexdigest()[:10]
    venv = envs.CACHE / name
    stamp = venv / ".vpatch-ready"
    # The real interpreter, not the dev venv's path (which differs per clone, e.g. on CI).
    want = "\n".join([os.path.realpath(python), *packages, *deps])
    if stamp.exists() and stamp.read_text() == want:
        return venv
    with envs._cache_lock():
        if stamp.exists() and stamp.read_text() == want:
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run(
            [python, "-m", "venv", "--without-pip", str(venv)],
            check=True,
            capture_output=True,
        )
        pip = [sys.executable, "-m", "pip", "-q", "--python", str(venv / "bin" / "python")]
        res = subprocess.run(
            [*pip, "install", "--disable-pip-version-check", *packages, *deps],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise RuntimeError(f"pip install {' '.join(packages)} failed:\n{res.stderr[-3000:]}")
        stamp.write_text(want)
    return venv


@functools.cache
def _patcher_path() -> str:
    """A dir holding only a `patcher` symlink to the work tree's: what goes on PYTHONPATH.

    Not the repo root itself: ansible treats every `ansible_collections/` on sys.path as
    installed collections, so the repo's SOURCE of vpatch.core would shadow the built tarball
    the tests mean to exercise (and `ansible-galaxy collection install` would skip it)."""
    path = Path(tempfile.mkdtemp(prefix="vpatch-pypath-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    (path / "patcher").symlink_to(REPO / "patcher")
    return str(path)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Our environment without settings that would steer the engines (ANSIBLE_*, RAY_*,
    PYTHONPATH), plus PYTHONPATH for the work tree's `patcher`."""
    drop = ("ANSIBLE_", "RAY_", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "PYTHONPATH": _patcher_path(), "LC_ALL": "C.UTF-8", **(extra or {})}


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def doc(self) -> Any:
        return json.loads(self.out)


def run(argv: Sequence[str], env: dict[str, str], cwd: Path = REPO, timeout: float = 600) -> Ran:
    started = time.monotonic()
    proc = subprocess.run(
        list(argv),
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


# --------------------------------------------------------------------------------------------
# Ansible


def ansible_bin() -> Path:
    return engine_venv("ansible-vpatch-venv", [ANSIBLE_CORE]) / "bin"


def ansible_core_bin() -> Path:
    """ansible-core alone (`ansible-inventory`, `ansible-test`): a venv whose stamp does not
    change with vpatch's dependencies, so no work tree's pyproject rebuilds it under another's
    feet."""
    return engine_venv("ansible-core-venv", [ANSIBLE_CORE], vpatch_deps=False) / "bin"


def collection(dest: Path) -> Path:
    """Build vpatch.core (ansible-galaxy collection build) and install the tarball into
    dest/collections, offline; returns the collections path."""
    galaxy = str(ansible_bin() / "ansible-galaxy")
    src = REPO / "ansible_collections" / "vpatch" / "core"
    dist = dest / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    env = child_env({"ANSIBLE_LOCAL_TEMP": str(dest / "local-tmp")})
    built = run([galaxy, "collection", "build", str(src), "--output-path", str(dist)], env)
    if built.code != 0:
        raise RuntimeError(f"ansible-galaxy collection build failed:\n{built.out}{built.err}")
    [tarball] = sorted(dist.glob("vpatch-core-*.tar.gz"))
    path = dest / "collections"
    installed = run(
        [galaxy, "collection", "install", "--offline", "-p", str(path), str(tarball)], env
    )
    if installed.code != 0:
        raise RuntimeError(f"ansible-galaxy collection install failed:\n{installed.err}")
    return path


# ansible-core has no JSON stdout callback of its own (it lives in ansible.posix, which we do not
# install): this one prints ONE document, {"tasks": [{"name", "hosts": {host: result}}],
# "stats": {host: summary}}, so tests read results instead of scraping the human output.
JSON_CALLBACK = r"""
from __future__ import annotations

import json

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = "name: vpatch_json\nshort_description: one JSON document\ntype: stdout\n"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "vpatch_json"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tasks = []

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.tasks.append({"name": task.get_name(), "hosts": {}})

    def _record(self, result, **extra):
        self.tasks[-1]["hosts"][result._host.get_name()] = dict(result._result, **extra)

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=True)

    def v2_runner_on_unreachable(self, result):
        self._record(result, unreachable=True)

    def v2_runner_on_skipped(self, result):
        self._record(result, skipped=True)

    def v2_playbook_on_stats(self, stats):
        summary = {h: stats.summarize(h) for h in sorted(stats.processed)}
        doc = {"tasks": self.tasks, "stats": summary}
        self._display.display(json.dumps(doc, default=str))
"""


@dataclass
class Played(Ran):
    """One ansible-playbook run; with the JSON callback, `doc` is its one JSON document."""

    def results(self, task: int = -1) -> dict[str, dict[str, Any]]:
        """host -> the task's result (last task by default), from the JSON callback."""
        out: dict[str, dict[str, Any]] = self.doc["tasks"][task]["hosts"]
        return out

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = self.doc["stats"]
        return out


@dataclass
class AnsibleLab:
    """ansible-playbook against an sshd lab: host key checking on, the lab's client key."""

    work: Path
    lab: harness.SshLab
    collections: Path
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "local-tmp").mkdir(exist_ok=True)
        (self.work / "callback_plugins").mkdir(exist_ok=True)
        (self.work / "callback_plugins" / "vpatch_json.py").write_text(JSON_CALLBACK)

    def inventory(self, hosts: Sequence[harness.SshHost]) -> Path:
        ssh_args = " ".join(
            [
                f"-o UserKnownHostsFile={self.lab.known_hosts}",
                "-o GlobalKnownHostsFile=/dev/null",
                "-o IdentitiesOnly=yes",
                "-o IdentityAgent=none",
            ]
        )
        inv = {
            "all": {
                "hosts": {
                    h.name: {
                        "ansible_host": h.address,
                        "ansible_port": h.port,
                        **self.host_vars.get(h.name, {}),
                    }
                    for h in hosts
                },
                "vars": {
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(self.lab.client_key),
                    "ansible_ssh_common_args": ssh_args,
                    "ansible_python_interpreter": TARGET_PYTHON,
                },
            }
        }
        path = self.work / f"hosts-{len(hosts)}.json"
        path.write_text(json.dumps(inv, indent=2))
        return path

    def config(self, control_dir: Path, forks: int) -> Path:
        path = self.work / "ansible.cfg"
        path.write_text(
            "\n".join(
                [
                    "[defaults]",
                    "host_key_checking = True",
                    "gathering = explicit",
                    "retry_files_enabled = False",
                    "nocolor = True",
                    f"forks = {forks}",
                    f"local_tmp = {self.work / 'local-tmp'}",
                    f"collections_path = {self.collections}",
                    f"callback_plugins = {self.work / 'callback_plugins'}",
                    "",
                    "[ssh_connection]",
                    "ssh_args = -C -o ControlMaster=auto -o ControlPersist=60s",
                    f"control_path_dir = {control_dir}",
                    "pipelining = True",
                    "",
                ]
            )
        )
        return path

    def play(
        self,
        tasks: list[dict[str, Any]],
        *flags: str,
        hosts: Sequence[harness.SshHost] | None = None,
        callback: str = "vpatch_json",
        name: str = "play",
        play_keys: dict[str, Any] | None = None,
    ) -> Played:
        """`play_keys`: more keys of the play (`serial`, `max_fail_percentage`, ...)."""
        hosts = list(hosts or self.lab.hosts)
        book = self.work / f"{name}.json"  # JSON is YAML: no quoting surprises
        play = {"name": name, "hosts": "all", "gather_facts": False, **(play_keys or {})}
        book.write_text(json.dumps([{**play, "tasks": tasks}]))
        # Short: ssh's control socket paths must fit in 107 bytes (pytest tmp dirs do not).
        control_dir = Path(tempfile.mkdtemp(prefix="vcp-", dir="/tmp"))
        env = child_env(
            {
                "ANSIBLE_CONFIG": str(self.config(control_dir, max(1, len(hosts)))),
                "ANSIBLE_STDOUT_CALLBACK": callback,
                "HOME": str(self.work),  # ~/.ansible of the controller: ours, not root's
            }
        )
        playbook = str(ansible_bin() / "ansible-playbook")
        try:
            ran = run([playbook, "-i", str(self.inventory(hosts)), *flags, str(book)], env)
        finally:
            close_masters(control_dir)
        print(
            f"ansible-playbook {name} {' '.join(flags)}: {ran.seconds:.2f} s, {len(hosts)} hosts",
            file=sys.stderr,
        )
        return Played(ran.code, ran.out, ran.err, ran.seconds)


def close_masters(control_dir: Path) -> None:
    """Ask each ssh master ansible left in `control_dir` to exit (`ssh -O exit`): they are our
    own descendants and would otherwise hold a session on a lab host for 60 s."""
    for sock in control_dir.iterdir():
        subprocess.run(
            ["ssh", "-S", str(sock), "-O", "exit", "vpatch-control"],
            capture_output=True,
            timeout=10,
        )
    shutil.rmtree(control_dir, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Ray


def ray_venv() -> Path:
    """From the system interpreter, not the dev venv's (pyenv, under /root): a Ray node that
    joins an sshd lab host's mount namespace sees that host's /root, not the machine's."""
    return engine_venv("ray-venv", [RAY], envs.HOST_PYTHON)


def _netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _mntns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


class RayCluster:
    """A real Ray cluster on loopback only, in a private network namespace (see module doc)."""

    def __init__(self) -> None:
        # Short (/tmp/vr-XXXX): Ray's unix socket paths live under it and must fit in 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="vr-", dir="/tmp"))
        self.venv = ray_venv()
        self.nodes: dict[str, int | None] = {}  # node name -> pid whose mount ns it joined
        self._holder = subprocess.Popen(
            ["unshare", "--net", "sh", "-c", "ip link set lo up && exec sleep infinity"],
            stdin=subprocess.DEVNULL,
        )
        self._holder_fd = os.pidfd_open(self._holder.pid)
        self.netns: str | None = None  # set once the holder is in its own namespace
        atexit.register(self.close)
        deadline = time.monotonic() + 10
        while _netns(self._holder.pid) == _netns(os.getpid()) or not self._lo_up():
            if self._holder.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("could not make a private network namespace (unshare --net)")
            time.sleep(0.01)
        self.netns = _netns(self._holder.pid)

    def _lo_up(self) -> bool:
        try:
            return Path(f"/proc/{self._holder.pid}/comm").read_text().strip() == "sleep"
        except OSError:
            return False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{RAY_PORT}"

    def inside(self, argv: Sequence[str], mount_pid: int | None = None) -> list[str]:
        """argv run in the cluster's network namespace (and a lab host's mount namespace)."""
        ns = [f"--net=/proc/{self._holder.pid}/ns/net"]
        if mount_pid is not None:
            ns.append(f"--mount=/proc/{mount_pid}/ns/mnt")
        return ["nsenter", *ns, "--", *argv]

    def env(self) -> dict[str, str]:
        """A driver's environment (the vpatch CLI): the work tree's `patcher` importable."""
        # No memory monitor: every node of this one-machine cluster would count the WHOLE
        # machine's memory as its own and kill our tasks when anything else on it (another
        # test, another engineer's build) fills memory (seen: OutOfMemoryError on all nodes).
        return child_env({"RAY_USAGE_STATS_ENABLED": "0", "RAY_memory_monitor_refresh_ms": "0"})

    def node_env(self) -> dict[str, str]:
        """A node's environment: no vpatch at all, as on a real cluster. The task function
        reaches the nodes pickled by value; this makes the test prove it."""
        return {k: v for k, v in self.env().items() if k != "PYTHONPATH"}

    def _ray_start(self, name: str, args: list[str], mount_pid: int | None) -> None:
        ray = str(self.venv / "bin" / "ray")
        common = [
            "--node-ip-address",
            "127.0.0.1",
            "--node-name",
            name,
            "--num-cpus",
            "1",
            "--object-store-memory",
            str(80 * 1024 * 1024),
            "--disable-usage-stats",
        ]
        argv = self.inside([ray, "start", *args, *common], mount_pid)
        res = run(argv, self.node_env(), cwd=self.root, timeout=120)
        if res.code != 0:
            raise RuntimeError(f"ray start ({name}) failed:\n{res.out[-2000:]}{res.err[-2000:]}")
        self.nodes[name] = mount_pid

    def start_head(self, name: str, mount_pid: int | None = None) -> None:
        args = [
            "--head",
            "--port",
            str(RAY_PORT),
            "--include-dashboard",
            "false",
            "--temp-dir",
            str(self.root / "t"),
            # A killed node is declared dead after ~1.5 s instead of ~30 s.
            "--system-config",
            json.dumps({"health_check_period_ms": 500, "health_check_failure_threshold": 3}),
        ]
        self._ray_start(name, args, mount_pid)

    def start_worker(self, name: str, mount_pid: int | None = None) -> None:
        self._ray_start(name, ["--address", self.address], mount_pid)

    def vpatch(self, *args: str | Path, timeout: float = 600) -> Ran:
        """The vpatch CLI as a Ray driver: the ray venv's python, inside the namespace."""
        python = str(self.venv / "bin" / "python")
        argv = self.inside([python, "-m", "patcher.cli", *map(str, args)])
        # Not from the repo: Ray puts the driver's cwd on its workers' sys.path, which would
        # make `patcher` importable on the nodes and hide a task that is not self-contained.
        return run(argv, self.env(), cwd=self.root, timeout=timeout)

    def _members(self) -> list[int]:
        out = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and int(entry.name) != self._holder.pid:
                try:
                    if os.readlink(f"/proc/{entry.name}/ns/net") == self.netns:
                        out.append(int(entry.name))
                except OSError:
                    continue
        return out

    def _kill(self, keep: Any) -> None:
        """SIGKILL our namespace's processes for which keep(pid) is False, by pidfd, re-checking
        the namespace after opening it (a recycled PID is never hit)."""
        for _ in range(20):  # processes may fork while we look: repeat until none is left
            fds = []
            for pid in self._members():
                try:
                    fd = os.pidfd_open(pid)
                except OSError:
                    continue
                try:
                    mine = _netns(pid) == self.netns and not keep(pid)
                except OSError:
                    mine = False
                if mine:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    fds.append(fd)
                else:
                    os.close(fd)
            if not fds:
                return
            for fd in fds:
                select.select([fd], [], [], 5)
                os.close(fd)

    def kill_node(self, name: str) -> None:
        """Every process of one node (it joined its own mount namespace): a node that died."""
        mount_pid = self.nodes[name]
        assert mount_pid is not None, "only nodes started in their own mount namespace"
        target = _mntns(mount_pid)

        def keep(pid: int) -> bool:
            try:
                return _mntns(pid) != target
            except OSError:
                return True

        self._kill(keep)

    def close(self) -> None:
        """Kill every process of the cluster (and drivers) and the namespace; idempotent, and
        also run at exit, so a test process that dies does not leave a cluster running."""
        if self._holder_fd < 0:
            return
        if self._holder.poll() is None:
            # Never scan by namespace unless it is a private one: ours holds everything else.
            if self.netns is not None and self.netns != _netns(os.getpid()):
                self._kill(lambda pid: False)
            signal.pidfd_send_signal(self._holder_fd, signal.SIGKILL)
            self._holder.wait(timeout=10)
        os.close(self._holder_fd)
        self._holder_fd = -1
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# 8 targets through SSH, Ray and Ansible, side by side (docs/scale-lab.md)


def _ssh_args(lab: harness.SshLab) -> list[str]:
    return ["--ssh-config", str(lab.ssh_config), "--known-hosts", str(lab.known_hosts)]


def compare(n: int = 8, rounds: int = 3) -> dict[str, Any]:
    """Apply + rollback of the stand-in spec on n targets through each engine; medians."""
    from tests.support.standin_specs import SPEC_A

    root = Path(tempfile.mkdtemp(prefix="vs-", dir="/tmp"))
    spec = root / "spec.toml"
    spec.write_text(SPEC_A)
    lab = harness.start_lab(n, root / "lab", harness.standin_env_factory)
    cluster = None
    try:
        python = "/root/ml-env/bin/python"
        hosts = [a for h in lab.hosts for a in ("--host", h.name)]
        dev = child_env()
        cli = [sys.executable, "-m", "patcher.cli"]
        results: dict[str, Any] = {"targets": n, "rounds": rounds, "runs": {}}
        results["loadavg before"] = os.getloadavg()

        def record(engine: str, what: str, ran: Ran) -> None:
            assert ran.code == 0, f"{engine} {what}: {ran.out[-2000:]}{ran.err[-2000:]}"
            results["runs"].setdefault(f"{engine} {what}", []).append(round(ran.seconds, 2))

        # Every engine is up before the clock runs, and the rounds interleave the engines, so
        # a load change on the (shared) machine hits all three alike.
        cluster = RayCluster()
        t0 = time.monotonic()
        cluster.start_head(lab.hosts[0].name, lab.hosts[0].pid)
        for h in lab.hosts[1:]:
            cluster.start_worker(h.name, h.pid)
        results["ray cluster start (s)"] = round(time.monotonic() - t0, 1)
        play = AnsibleLab(root / "ansible", lab, collection(root / "collection"), {})  # forks = n
        task = {"vpatch.core.patch": {"spec": str(spec), "python": python}}
        back = {"vpatch.core.patch": {"spec": str(spec), "python": python, "state": "absent"}}
        ssh = [*hosts, *_ssh_args(lab), "--python", python, "--parallel", str(n)]
        ray = ["--ray", cluster.address, "--python", python, "--parallel", str(n)]
        for _ in range(rounds):
            record("ssh", "apply", run([*cli, "apply", spec, *ssh, "--json"], dev))
            record("ssh", "rollback", run([*cli, "rollback", *ssh, "--json"], dev))
            record("ray", "apply", cluster.vpatch("apply", spec, *ray, "--json"))
            record("ray", "rollback", cluster.vpatch("rollback", *ray, "--json"))
            record("ansible", "apply", play.play([task], name="apply"))
            record("ansible", "rollback", play.play([back], name="rollback"))
        results["loadavg after"] = os.getloadavg()
        results["median"] = {k: sorted(v)[len(v) // 2] for k, v in results["runs"].items()}
        return results
    finally:
        if cluster is not None:
            cluster.close()
        lab.close()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["compare"]:
        n = int(argv[1]) if len(argv) > 1 else 8
        print(json.dumps(compare(n), indent=2))
        return 0
    if argv[:1] == ["venvs"]:
        print(ansible_bin().parent, ray_venv())
        return 0
    print("usage: python -m tests.scale compare [N] | venvs", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
