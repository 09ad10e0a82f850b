"""Issue 25 case 11, `vpatch status`: a spec is one result with its files (counted once, however
many files it has), each file shown as the journal's base -> the bytes vpatch last wrote (not a
stale hash after a partial rollback), and a bare `status` names the processes that still run
the code from before the last write, as apply does."""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path

from tests.conftest import Env, vpatch
from tests.support.standin_specs import REL, SPEC_A, SPEC_B


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_status_after_a_partial_rollback_shows_the_bytes_on_disk(
    tmp_path: Path, standin_env: Env
) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(SPEC_A)
    b.write_text(SPEC_B)
    py = ["--python", str(standin_env.python)]
    target = standin_env.file(REL)
    pristine = _sha(target)
    assert vpatch("apply", a, b, *py, "--level", "static").code == 0
    assert vpatch("rollback", a, *py, "--level", "static").code == 0
    st = vpatch("status", *py, "--json")
    assert st.code == 0, st.err
    [p] = st.doc["hosts"][0]["patches"]
    assert p["id"] == "servekit-batch" and p["outcome"] == "applied"
    [f] = p["files"]
    assert (f["before_sha256"], f["after_sha256"]) == (pristine, _sha(target))
    human = vpatch("status", *py)
    assert f"{pristine[:12]} -> {_sha(target)[:12]}" in human.out
    assert human.out.rstrip().endswith("[1 applied]")


def test_bare_status_names_processes_running_old_code(tmp_path: Path, standin_env: Env) -> None:
    a = tmp_path / "a.toml"
    a.write_text(SPEC_A)
    py = ["--python", str(standin_env.python)]
    server = subprocess.Popen(
        [
            str(standin_env.python),
            "-c",
            "import servekit.config, time; print('up', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "up\n"
        time.sleep(1.1)  # the write is in a later second than the server's start
        assert vpatch("apply", a, *py, "--level", "static").code == 0
        st = vpatch("status", *py, "--json")
        assert st.code == 0, st.err
        pids = [p["pid"] for p in st.doc["hosts"][0]["restart_required"]]
        assert server.pid in pids
        assert f"restart required: pid {server.pid}" in vpatch("status", *py).out
    finally:
        server.kill()
        server.wait()
