"""A real container engine for the container transports' tests (podman, and docker where its
daemon starts), each with a private store in a temp dir, on images built from Debian packages.

- The root file system (Debian minbase + python3 + python3-venv, made by `mmdebstrap` from
  this machine's own apt sources, no image registry) is cached outside the repo, under
  $VPATCH_TEST_CACHE/containers, and built only when missing (minutes once; `make test-deps`
  installs the packages). Each lab imports it into its own store (`ENGINE import`).
- The stand-in image: a container of that image gets a user `app` (uid 1000) and a venv
  /srv/venv owned by it, into which the container's own pip installs the stand-in wheel
  built at test time (tests/standin.py), copied in with `ENGINE cp`: containers run with no
  network (`netns = none`, `--network none`). The container is committed as STANDIN.
- podman: rootful, runc (crun refuses this machine's hybrid cgroups), cgroupfs, the file
  events logger, overlay storage in the lab's dir, ulimits at the caller's hard limits (no
  CAP_SYS_RESOURCE here). docker: `dockerd` with its own data and exec roots and socket,
  `--iptables=false --bridge=none`.

Every container and image a lab made is removed with it, then its store; `env` is what a
vpatch child needs to reach the same store (CONTAINERS_CONF... or DOCKER_HOST).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests import envs, standin

CACHE = envs.CACHE / "containers"
SUITE = "bookworm"
ROOTFS = CACHE / f"{SUITE}-python3-v1.tar"
BASE = "localhost/vpatch-py:bookworm"
STANDIN = "localhost/vpatch-standin:1"
VENV = "/srv/venv"
PYTHON = f"{VENV}/bin/python"
APP_UID = 1000
PACKAGES = ("podman", "runc", "conmon", "catatonit", "mmdebstrap")
# PID 1 of a stand-in container: a Python "server" that exits on SIGTERM as vLLM does (PID 1
# has no default handler), importing the stand-in at start so a restart loads the patch.
SERVER = (
    "import signal, sys, time, servekit.config\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "while True:\n"
    "    time.sleep(3600)\n"
)


# PID 1 of a rollout container: a stand-in vLLM endpoint on the container's own loopback
# (tests/support/gateserver.py's counters, copied into the image) that serves as the
# stand-in's files it imported say: SPEC_A (kimi_k2 accepted) drafts well, SPEC_B (the batch
# limit raised) halves the tokens/s. No port is published: the agent in the container fetches.
LAB_SERVER = """
import http.server, signal, sys, time
from types import SimpleNamespace
sys.path.insert(0, "/srv/lab")
from gateserver import metrics_text
import servekit.config as cfg
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
try:
    rate = 0.7 if cfg.SpecConfig.verify(SimpleNamespace(model_type="kimi_k2")) else 0.3
except ValueError:
    rate = 0.3
pace = 0.5 if cfg.LIMITS["max_batch"] != 8 else 1.0
started = time.monotonic()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            body = b"ok"
        else:
            body = metrics_text((time.monotonic() - started) * pace, rate).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""
LAB_URL = "http://127.0.0.1:8000"


def missing() -> list[str]:
    """The programs the podman lab needs that are not on PATH (make test-deps installs them)."""
    return [p for p in PACKAGES if shutil.which(p) is None]


def rootfs() -> Path:
    """The cached root file system tarball, built once (under the cache's lock: two test
    workers never build it twice) by mmdebstrap, from this machine's apt sources."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ROOTFS.is_file():
            return ROOTFS
        part = CACHE / f".{ROOTFS.name}.part"
        part.unlink(missing_ok=True)
        subprocess.run(
            [
                "nice", "mmdebstrap", "--quiet", "--variant=minbase",
                "--include=python3,python3-venv",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "--format=tar", SUITE, str(part), *_apt_sources(),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        part.rename(ROOTFS)
    return ROOTFS


def _apt_sources() -> list[str]:
    """This machine's own apt sources (the files apt-get reads, as `make test-deps` uses
    them), which mmdebstrap takes as its mirrors."""
    etc = Path("/etc/apt")
    files = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]
    files += sorted((etc / "sources.list.d").glob("*.sources"))
    found = [str(f) for f in files if f.is_file() and f.stat().st_size]
    assert found, "no apt sources in /etc/apt: the lab's image is built from Debian's packages"
    return found


@dataclass
class Lab:
    """One engine with a private store: `engine` is its CLI's name, `env` reaches its store."""

    engine: str
    home: Path
    env: dict[str, str]
    made: list[str] = field(default_factory=list)  # containers this lab started

    def cli(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        res = subprocess.run(
            [self.engine, *args],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"{self.engine} {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout.strip()

    def run(
        self,
        name: str,
        *cmd: str,
        image: str = STANDIN,
        user: str | None = None,
        opts: tuple[str, ...] = (),
    ) -> str:
        """Start a container (removed with the lab); PID 1 runs `cmd` (default: the server);
        `opts`: more `run` options (a volume)."""
        who = [*opts, *(["--user", user] if user else [])]
        argv = cmd or (PYTHON, "-c", SERVER)
        self.made.append(name)
        self.cli("run", "-d", "--pull=never", "--network", "none", "--name", name, *who, image,
                 *argv)  # fmt: skip
        self.wait_running(name)
        return name

    def wait_running(self, name: str) -> None:
        for _ in range(200):
            if self.cli("inspect", "-f", "{{.State.Running}}", name, check=False) == "true":
                return
            time.sleep(0.05)
        raise AssertionError(f"{name} is not running: {self.cli('logs', name, check=False)}")

    def sh(self, name: str, script: str, user: str | None = None) -> str:
        who = ["--user", user] if user else []
        return self.cli("exec", *who, name, "sh", "-c", script)

    def read(self, name: str, path: str) -> bytes:
        """A file's bytes inside the container (through `cat`: exact)."""
        res = subprocess.run(
            [self.engine, "exec", name, "cat", path], env=self.env, capture_output=True, check=True
        )
        return res.stdout

    def started_at(self, name: str) -> str:
        return self.cli("inspect", "-f", "{{.State.StartedAt}}", name)

    def restart(self, name: str) -> None:
        self.cli("restart", "-t", "5", name)
        self.wait_running(name)

    def rm(self, name: str) -> None:
        self.cli("rm", "-f", name)

    def inventory(self, path: Path, names: list[str], **extra: str) -> Path:
        """A hosts.toml of these containers on this machine."""
        rows = [
            f'[[host]]\nname = "{n}"\naddress = "local"\ntransport = "{self.engine}"\n'
            f'container = "{n}"\npython = "{PYTHON}"\n'
            + "".join(f'{k} = "{v}"\n' for k, v in extra.items())
            for n in names
        ]
        path.write_text("\n".join(rows))
        return path

    def build_standin(self, work: Path) -> None:
        """STANDIN: the base image plus user `app` and its venv holding the stand-in,
        installed by the container's pip from a wheel copied in (no network there)."""
        whl = standin.build_wheel(work)
        name = f"vpatch-build-{os.getpid()}"
        self.made.append(name)
        self.cli("run", "-d", "--pull=never", "--network", "none", "--name", name, BASE,
                 "sleep", "600")  # fmt: skip
        self.cli("cp", str(whl), f"{name}:/tmp/{whl.name}")
        self.sh(name, "mkdir -p /srv/lab")
        self.cli("cp", str(Path(__file__).with_name("gateserver.py")), f"{name}:/srv/lab/")
        self.sh(
            name,
            f"useradd -u {APP_UID} -m app && python3 -m venv {VENV} && "
            f"{VENV}/bin/pip install -q --no-index --no-deps /tmp/{whl.name} && "
            f"rm /tmp/{whl.name} && chown -R app: {VENV}",
        )
        self.cli("commit", name, STANDIN)
        self.rm(name)


def _podman_env(home: Path) -> dict[str, str]:
    """A private store and config for rootful podman on this machine (see the module doc)."""
    p = home / "podman"
    for d in ("storage", "run", "tmp", "netcfg"):
        (p / d).mkdir(parents=True, exist_ok=True)
    nofile = _hard(resource.RLIMIT_NOFILE, 1 << 20)
    nproc = _hard(resource.RLIMIT_NPROC, 32768)  # podman's own hard limit here
    (p / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{p}/storage"\nrunroot = "{p}/run"\n'
    )
    (p / "containers.conf").write_text(
        "[containers]\n"
        'netns = "none"\n'
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
        f'events_logfile_path = "{p}/run/events.log"\ntmp_dir = "{p}/tmp"\n'
        f'volume_path = "{p}/storage/volumes"\n'
        f'[network]\nnetwork_config_dir = "{p}/netcfg"\n'
    )
    return {
        **os.environ,
        "CONTAINERS_CONF": str(p / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(p / "storage.conf"),
    }


def _hard(limit: int, most: int) -> int:
    """This process's hard limit, at most `most` (podman's rootful defaults are above what a
    process without CAP_SYS_RESOURCE may set)."""
    hard = resource.getrlimit(limit)[1]
    return most if hard == resource.RLIM_INFINITY else min(hard, most)


@contextmanager
def podman_lab() -> Iterator[Lab]:
    """A podman with a private store, holding BASE and STANDIN; all of it removed after."""
    home = Path(tempfile.mkdtemp(prefix="vpatch-ct-"))
    lab = Lab("podman", home, _podman_env(home))
    made = _leftovers(["/sys/fs/cgroup/*/libpod_parent"])
    try:
        lab.cli("import", "--quiet", "--change", 'CMD ["/usr/bin/python3"]', str(rootfs()), BASE)
        lab.build_standin(home)
        yield lab
    finally:
        _remove(lab)
        lab.cli("system", "reset", "-f", check=False)
        _unmount_under(home)
        _rmtree(home)
        made()


@contextmanager
def docker_lab() -> Iterator[Lab]:
    """A dockerd of its own (private roots and socket, no bridge, no iptables), holding BASE
    and STANDIN; stopped and removed after."""
    home = Path(tempfile.mkdtemp(prefix="vpatch-dk-", dir="/tmp"))
    sock = home / "docker.sock"
    log = open(home / "dockerd.log", "wb")
    # process-start: the lab's own dockerd, stopped below by its Popen handle
    daemon = subprocess.Popen(
        [
            "dockerd", "--data-root", str(home / "data"), "--exec-root", str(home / "exec"),
            "--pidfile", str(home / "docker.pid"), "-H", f"unix://{sock}",
            "--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-forward=false",
            "--ip-masq=false", "--userland-proxy=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    lab = Lab("docker", home, {**os.environ, "DOCKER_HOST": f"unix://{sock}"})
    made = _leftovers(["/sys/fs/cgroup/*/docker", "/run/docker", "/run/containerd"])
    try:
        for _ in range(300):
            if lab.cli("version", "-f", "{{.Server.Version}}", check=False):
                break
            if daemon.poll() is not None:
                raise AssertionError(f"dockerd exited: {(home / 'dockerd.log').read_text()[-800:]}")
            time.sleep(0.1)
        lab.cli("import", "--change", 'CMD ["/usr/bin/python3"]', str(rootfs()), BASE)
        lab.build_standin(home)
        yield lab
    finally:
        with contextlib.suppress(AssertionError):
            _remove(lab)
            lab.cli("rmi", "-f", STANDIN, BASE, check=False)
        daemon.terminate()
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        _unmount_under(home)
        _rmtree(home)
        made()


def _remove(lab: Lab) -> None:
    for name in lab.made:
        lab.cli("rm", "-f", name, check=False)


def _unmount_under(home: Path) -> None:
    """Mounts an engine left under the lab's dir (none after a clean removal), deepest first."""
    with open("/proc/self/mounts") as fh:
        points = [line.split()[1] for line in fh if line.split()[1].startswith(f"{home}/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _rmtree(home: Path) -> None:
    """Remove the lab's dir; conmon's `container cleanup` children may still be writing their
    run dirs there for a moment after the last `rm`, so it is tried again for up to 10 s."""
    for _ in range(100):
        shutil.rmtree(home, ignore_errors=True)
        if not home.exists():
            return
        time.sleep(0.1)


def _leftovers(patterns: list[str]) -> Callable[[], None]:
    """What an engine makes outside its lab's dir (its cgroups, its run dirs) and leaves
    empty: the returned call removes the empty directories of those that did not exist
    before the lab started (never another engine's: a busy or non-empty one stays)."""
    before = {p for pattern in patterns for p in Path("/").glob(pattern.lstrip("/"))}

    def remove() -> None:
        for pattern in patterns:
            for top in set(Path("/").glob(pattern.lstrip("/"))) - before:
                _rmdirs(top)

    return remove


def _rmdirs(top: Path) -> None:
    """Empty cgroup directories under `top`, deepest first (one with a process is busy and
    stays: rmdir refuses it)."""
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            d.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()
