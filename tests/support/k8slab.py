"""A real one-node Kubernetes for the kubectl transport's tests (`make k8s-lab`, never `make
test`: its first build takes ~20 minutes on two cores).

- The binaries: kube-apiserver and kubelet 1.20.2 built by tests/k8slab/build.sh from Debian's
  `kubernetes` source package with Debian's Go, cached under $VPATCH_TEST_CACHE/k8s/out/bin
  and built only when missing (its work dir, ~1.5 GB of source and Go cache, is removed
  after). etcd, containerd, runc, the CNI plugins: Debian packages, installed when missing.
- The images: the container lab's stand-in image (tests/support/containerlab.py: Debian
  rootfs, user `app`, the stand-in in /srv/venv) with vpatch's own venv at /opt/vpatch
  (tests/support/vpatchimage.py: built offline from wheels, cached), and a sandbox image
  `localhost/pause:1`, made in a private podman store and saved as one docker archive that
  containerd imports.
- The node: tests/k8slab/node.sh, in its own pid+net+mount+uts namespaces; `kubectl` here is a
  two-line script on the lab's PATH that enters only the node's network namespace and names
  the node's kubeconfig, so vpatch runs plain `kubectl exec -i` as it would on a laptop.

Stopping kills the namespace's PID 1 (every process of the cluster), removes the work dir
and the pod cgroups containerd made.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import envs
from tests.support import containerlab, vpatchimage

CACHE = envs.CACHE / "k8s"
BIN = CACHE / "out" / "bin"
HERE = Path(__file__).resolve().parent.parent / "k8slab"
PACKAGES = {"etcd": "etcd-server", "containerd": "containerd", "runc": "runc",
            "/usr/lib/cni/bridge": "containernetworking-plugins"}  # fmt: skip
PAUSE = "localhost/pause:1"
IMAGE = vpatchimage.IMAGE


def binaries() -> Path:
    """kube-apiserver and kubelet, built once (tests/k8slab/build.sh) under a lock."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ((BIN / "kubelet").exists() and (BIN / "kube-apiserver").exists()):
            work = Path(tempfile.mkdtemp(prefix="vpatch-k8sbuild-", dir=CACHE))
            env = {**os.environ, "OUT": str(BIN.parent), "WORK": str(work)}
            with open(CACHE / "build.log", "w") as log:
                subprocess.run(["bash", str(HERE / "build.sh")], env=env, stdout=log,
                               stderr=subprocess.STDOUT, check=True)  # fmt: skip
            shutil.rmtree(work, ignore_errors=True)
    return BIN


def install_packages() -> None:
    gone = [
        pkg for exe, pkg in PACKAGES.items() if not shutil.which(exe) and not Path(exe).exists()
    ]
    if gone:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *gone],
                       env=env, check=True, capture_output=True)  # fmt: skip


def images(work: Path) -> Path:
    """One docker archive of the serving image (the stand-in with vpatch) and the sandbox
    image (a private podman store, removed after)."""
    out = work / "images.tar"
    with containerlab.podman_lab() as lab:
        vpatchimage.build(lab, work / "vpatch-image")
        box = f"vpatch-pause-{os.getpid()}"
        lab.cli("create", "--pull=never", "--name", box, containerlab.BASE, "true")
        lab.cli("commit", "-q", "--change", 'CMD ["/bin/sleep","infinity"]', box, PAUSE)
        lab.cli("rm", box)
        lab.cli("save", "-q", "-m", "-o", str(out), IMAGE, PAUSE)
    return out


@dataclass
class Cluster:
    """The running node: `env` has the lab's `kubectl` first on PATH (for vpatch too)."""

    nspid: int
    work: Path
    env: dict[str, str]

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        res = subprocess.run(["kubectl", *args], env=self.env, input=stdin, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout.strip()

    def read(self, pod: str, path: str, container: str = "server") -> bytes:
        res = subprocess.run(["kubectl", "exec", pod, "-c", container, "--", "cat", path],
                             env=self.env, capture_output=True, check=True)  # fmt: skip
        return res.stdout

    def apply(self, manifest: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))

    def pod(self, name: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.kubectl("get", "pod", name, "-o", "json"))
        return doc

    def wait_ready(self, name: str, restarts: int = 0, timeout: float = 240) -> None:
        """Until the pod's containers are ready after `restarts` restarts of its first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.pod(name).get("status", {}).get("containerStatuses") or []
            if st and all(c.get("ready") for c in st) and st[0].get("restartCount") == restarts:
                return
            time.sleep(0.5)
        raise AssertionError(f"pod {name} not ready: {self.pod(name).get('status')}")


def _stop(nspid: int, work: Path, new_cgroups: bool) -> None:
    try:
        os.kill(nspid, 9)
    except ProcessLookupError:
        pass
    time.sleep(1)
    if new_cgroups:
        for top in Path("/sys/fs/cgroup").glob("*/k8s.io"):
            for d in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if d.is_dir():
                    try:
                        d.rmdir()
                    except OSError:
                        pass
            try:
                top.rmdir()
            except OSError:
                pass
    shutil.rmtree(work, ignore_errors=True)


@contextmanager
def cluster() -> Iterator[Cluster]:
    """The one-node cluster, its images loaded; stopped and removed after."""
    install_packages()
    bin_dir = binaries()
    home = Path(tempfile.mkdtemp(prefix="vpatch-k8slab-"))
    try:
        tar = images(home)
        env_out = home / "node.env"
        env = {**os.environ, "K8S_BIN": str(bin_dir), "IMAGES_TAR": str(tar),
               "ENV_OUT": str(env_out), "LOGS_TO": str(home / "logs")}  # fmt: skip
        ran = subprocess.run(["bash", str(HERE / "node.sh")], env=env, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
        if ran.returncode != 0:
            raise AssertionError(f"k8s node failed:\n{ran.stdout}\n{ran.stderr[-3000:]}")
        node = dict(line.split("=", 1) for line in env_out.read_text().split())
        nspid, work = int(node["NSPID"]), Path(node["WORK"])
        kube = home / "bin" / "kubectl"
        kube.parent.mkdir()
        real = shutil.which("kubectl") or "/usr/bin/kubectl"
        kube.write_text(f'#!/bin/sh\nexec nsenter -t {nspid} -n -- {real} '
                        f'--kubeconfig {node["KUBECONFIG"]} "$@"\n')  # fmt: skip
        kube.chmod(0o755)
        path = f"{kube.parent}{os.pathsep}{os.environ['PATH']}"
        try:
            yield Cluster(nspid, work, {**os.environ, "PATH": path, "NODE_LOG": ran.stdout})
        finally:
            _stop(nspid, work, node.get("CG_NEW") == "1")
    finally:
        shutil.rmtree(home, ignore_errors=True)
