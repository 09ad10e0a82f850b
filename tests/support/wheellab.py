"""The wheel store's lab: a pip that logs every call, an index nobody answers, click specs.

`counting_pip` is $VPATCH_PIP: a script that appends its arguments to a log, then runs the dev
venv's real pip (the user's own pip configuration), so a test can count downloads exactly.
`offline_env` points pip at a closed port on 127.0.0.1 (nothing listens on port 9 here) with
the user's configuration off: an air-gapped controller, without touching any other address.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.specs import edit, probe, spec_toml

CLICK_SPEC = spec_toml(
    id="click-bool-name",
    summary="click's BOOL is named bool",
    package="click",
    versions=">=8.1,<8.2",
    file="click/types.py",
    edits=[edit("set_value", scope="BoolParamType", target="name", value="bool")],
    probes=[probe("bool-name", "click", "assert module.BOOL.name == 'bool', module.BOOL.name")],
)

CLICK_ADD_SPEC = spec_toml(
    id="click-extra-module",
    summary="click gains a module",
    package="click",
    versions=">=8.1,<8.2",
    edits=[edit("add_file", file="click/vpatch_extra.py", text="ANSWER = 42\n")],
    probes=[probe("extra", "click.vpatch_extra", "assert module.ANSWER == 42")],
)


def counting_pip(tmp: Path) -> tuple[Path, Path]:
    """(script, log): each pip call the store makes is one line of the log."""
    log = tmp / "pip-calls.log"
    script = tmp / "counting-pip"
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\nexec {sys.executable} -m pip "$@"\n', encoding="utf-8"
    )
    script.chmod(0o755)
    return script, log


def lab_env(tmp: Path) -> dict[str, str]:
    """A test's own empty store and matrix cache, no wheelhouse, and a counting pip; the log
    is at $VPATCH_TEST_PIP_LOG."""
    pip, log = counting_pip(tmp)
    return {
        "VPATCH_WHEEL_STORE": str(tmp / "store"),
        "VPATCH_MATRIX_CACHE": str(tmp / "matrix"),
        "VPATCH_MATRIX_WHEELS": "",
        "VPATCH_WHEELHOUSE": "",
        "VPATCH_PIP": str(pip),
        "VPATCH_TEST_PIP_LOG": str(log),  # where the test finds the count
    }


def downloads(log: Path) -> int:
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if line.startswith("download"))


def offline_env() -> dict[str, str]:
    return {
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
    }


def wheelhouse(dest: Path, *wheels: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for w in wheels:
        shutil.copy2(w, dest / w.name)
    return dest


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def rewrite_wheel(path: Path, member: str, data: bytes, fix_record: bool) -> None:
    """Replace one member of a wheel in place (a new inode, as an attacker's copy would be);
    with fix_record, RECORD is made to agree, so only the wheel's own hash can tell."""
    with zipfile.ZipFile(path) as zf:
        items = [(i, zf.read(i.filename)) for i in zf.infolist()]
    record_name = next(i.filename for i, _ in items if i.filename.endswith(".dist-info/RECORD"))
    out = path.with_name(path.name + ".new")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, old in items:
            new = data if info.filename == member else old
            if info.filename == record_name and fix_record:
                rows = []
                for row in old.decode().splitlines():
                    name = row.split(",", 1)[0]
                    rows.append(f"{name},sha256={b64(data)},{len(data)}" if name == member else row)
                new = ("\n".join(rows) + "\n").encode()
            zf.writestr(info, new)
    out.chmod(path.stat().st_mode & 0o777)
    out.replace(path)


def record_ok(wheel: Path) -> list[str]:
    """Members whose bytes are not what the wheel's RECORD says (empty: RECORD is right)."""
    bad: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        record_name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        listed = {}
        for name, digest, size in csv.reader(io.StringIO(zf.read(record_name).decode())):
            listed[name] = (digest, size)
        for name in zf.namelist():
            if name == record_name or name.endswith("/"):
                continue
            data = zf.read(name)
            if listed.get(name) != (f"sha256={b64(data)}", str(len(data))):
                bad.append(name)
        bad += [n for n in listed if n not in zf.namelist()]
    return bad


def fake_wheel(dest: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A small valid wheel (METADATA, WHEEL, RECORD with real hashes) for store unit tests."""
    info = f"{name}-{version}.dist-info"
    members = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},sha256={b64(d)},{len(d)}\n" for n, d in members.items())
    path = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in members.items():
            zf.writestr(n, d)
        zf.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    path.chmod(0o644)
    return path


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """`root` over HTTP on 127.0.0.1 (a free port), as a find-links page; yields the URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(root),
         "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # the port line, before any request
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://...)"
        port = int(line.split(" port ")[1].split()[0])
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
