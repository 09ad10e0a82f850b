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


def test_a_journal_over_the_cap_is_named_not_a_permissions_error(
    tmp_path: Path, standin_env: Env
) -> None:
    """Issue 39 item 11: a journal past the 64 MiB read cap (sparse here: its size is what is
    checked) was answered as an OSError, "check permissions ... try --sudo", by every command."""
    a = tmp_path / "a.toml"
    a.write_text(SPEC_A)
    py = ["--python", str(standin_env.python)]
    assert vpatch("apply", a, *py, "--level", "static").code == 0
    journal = standin_env.journal
    with open(journal, "r+b") as fh:
        fh.truncate((64 << 20) + 1)
    for args in (["status", "--json"], ["status", a, "--json"], ["rollback", a, "--json"]):
        res = vpatch(*args, *py)
        assert res.code != 0 and "Traceback" not in res.err, res.out + res.err
        text = res.out + res.err
        assert "over the 64 MiB a vpatch journal reaches" in text, text
        assert "--sudo" not in text and "permissions" not in text, text
    assert journal.stat().st_size == (64 << 20) + 1
