"""A PEP 503 simple index on disk whose releases carry wheels of chosen tags (and sdists), for
the `vpatch matrix --platform` tests: releases with and without a wheel for a platform."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(dest: Path, project: str, version: str, tag: str, members: Mapping[str, str]) -> Path:
    """A valid wheel of `project` tagged `tag` (e.g. "py3-none-any"): METADATA, WHEEL and a
    RECORD with real hashes."""
    dist = project.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
    about = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"
    files = {
        **{k: v.encode() for k, v in members.items()},
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": about.encode(),
    }
    record = "".join(f"{n},sha256={_b64(d)},{len(d)}\n" for n, d in files.items())
    record += f"{info}/RECORD,,\n"
    path = dest / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


def sdist(dest: Path, project: str, version: str) -> Path:
    """An sdist's file (PKG-INFO only: nothing here builds it)."""
    base = f"{project.replace('-', '_')}-{version}"
    path = dest / f"{base}.tar.gz"
    data = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n".encode()
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return path


def index(
    root: Path, project: str, releases: Mapping[str, Sequence[str]], members: Mapping[str, str]
) -> Path:
    """`root/simple/<project>/` with, per version, a wheel for each tag listed ("sdist": an
    sdist); the simple index's URL root (a directory) is returned."""
    page = root / "simple" / project
    page.mkdir(parents=True)
    links = []
    for version, kinds in releases.items():
        for kind in kinds:
            made = (
                sdist(page, project, version)
                if kind == "sdist"
                else wheel(page, project, version, kind, members)
            )
            digest = hashlib.sha256(made.read_bytes()).hexdigest()
            links.append(f'<a href="{made.name}#sha256={digest}">{made.name}</a>')
    (page / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
    return root / "simple"
