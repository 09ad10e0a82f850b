"""The k8s lab's serving image with vpatch installed at /opt/vpatch, as docs/hooks.md's
initContainer recipe expects of the serving image, built with no index reachable from inside.

- The wheels, on this machine: this checkout's own vpatch wheel (`pip wheel --no-deps .`)
  and the wheels it needs at runtime for the image's Python (CPython 3.11, manylinux x86_64:
  Debian bookworm's), fetched by `pip download` with pip's own configuration.
- The venv: `podman build --pull=never` from the lab's local base image (Debian's python3)
  with the wheels copied in and `pip install --no-index --find-links`; its /opt/vpatch is
  kept as a tarball under $VPATCH_TEST_CACHE/vpatch-image, named by a digest of the wheels'
  contents, so it is built again only when a wheel changes (this checkout's vpatch, a
  dependency's release). The digest reads each wheel's members, not its zip bytes: a wheel
  built twice from the same tree differs in its zip timestamps, not in its files.
- The image: the lab's stand-in image (containerlab.STANDIN: user `app`, the stand-in in
  /srv/venv) plus that tarball at /opt/vpatch, one `ADD` layer.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from tests import envs
from tests.conftest import REPO
from tests.support import containerlab

CACHE = envs.CACHE / "vpatch-image"
OPT = "/opt/vpatch"
IMAGE = "localhost/vpatch-standin-vpatch:1"
# Wheels the image's interpreter can install: Debian bookworm's CPython 3.11 on glibc 2.36.
TARGET = [
    "--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11",
    "--abi", "cp311", "--abi", "abi3", "--abi", "none",
    "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64",
    "--platform", "manylinux_2_34_x86_64", "--platform", "any",
]  # fmt: skip
# How long the last build() took, and whether /opt/vpatch came from the cache.
TIMINGS: dict[str, float] = {}


def wheels(dest: Path) -> list[Path]:
    """vpatch's wheel from this checkout and its runtime dependencies' wheels, in `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(dest), str(REPO)],
                   check=True, capture_output=True)  # fmt: skip
    [own] = dest.glob("vpatch-*.whl")
    subprocess.run([*pip, "download", *TARGET, "-d", str(dest), str(own)],
                   check=True, capture_output=True)  # fmt: skip
    return sorted(dest.glob("*.whl"))


def digest(found: list[Path]) -> str:
    """A digest of the wheels' names and their members' names and bytes."""
    h = hashlib.sha256()
    for whl in sorted(found, key=lambda p: p.name):
        h.update(whl.name.encode() + b"\0")
        with zipfile.ZipFile(whl) as z:
            for name in sorted(z.namelist()):
                h.update(name.encode() + b"\0" + hashlib.sha256(z.read(name)).digest())
    return h.hexdigest()[:16]


def _opt_tar(lab: containerlab.Lab, work: Path) -> Path:
    """The cached tarball of /opt/vpatch for these wheels, built when missing (under the
    cache's lock)."""
    house = work / "wheels"
    key = digest(wheels(house))
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"opt-vpatch-{key}.tar"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        TIMINGS["cached"] = float(out.is_file())
        if out.is_file():
            return out
        (work / "Containerfile.opt").write_text(
            f"FROM {containerlab.BASE}\n"
            "COPY wheels /tmp/wheels\n"
            f"RUN python3 -m venv {OPT} && {OPT}/bin/pip install -q --no-cache-dir --no-index "
            "--find-links /tmp/wheels vpatch && rm -rf /tmp/wheels\n"
        )
        tag = "localhost/vpatch-opt:build"
        lab.cli("build", "-q", "--pull=never", "--network", "none", "-t", tag,
                "-f", str(work / "Containerfile.opt"), str(work))  # fmt: skip
        box = lab.cli("create", "--pull=never", tag, "true")
        part = out.with_name(f".{out.name}.part")
        with open(part, "wb") as fh:
            subprocess.run([lab.engine, "cp", f"{box}:{OPT}", "-"], env=lab.env, stdout=fh,
                           check=True)  # fmt: skip
        lab.cli("rm", box)
        lab.cli("rmi", tag)
        part.rename(out)
        for old in CACHE.glob("opt-vpatch-*.tar"):
            if old != out:  # an earlier checkout's: this one is built again only if it returns
                old.unlink()
    return out


def build(lab: containerlab.Lab, work: Path) -> str:
    """IMAGE in the lab's store: the stand-in image with vpatch's venv at /opt/vpatch."""
    t = time.monotonic()
    tar = _opt_tar(lab, work)
    shutil.copyfile(tar, work / "opt-vpatch.tar")
    (work / "Containerfile").write_text(f"FROM {containerlab.STANDIN}\nADD opt-vpatch.tar /opt/\n")
    lab.cli("build", "-q", "--pull=never", "--network", "none", "-t", IMAGE,
            "-f", str(work / "Containerfile"), str(work))  # fmt: skip
    TIMINGS["seconds"] = time.monotonic() - t
    return IMAGE
