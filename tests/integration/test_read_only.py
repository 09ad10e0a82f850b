"""Issue 25 case 1: a venv patched at build time and mounted read-only (`docker run
--read-only`, a read-only volume) must still start its server through `vpatch exec`, and
`status`, `verify` and `ensure` must answer from what is on disk. Only a command that would
have to write fails there, and its hint says why (no `--sudo`: no user can write a read-only
mount). The env is bind-mounted read-only in a private mount namespace
(tests/support/readonly.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Env, fingerprint, vpatch
from tests.support import readonly
from tests.support.hooklab import SERVE, counting_spec
from tests.support.standin_specs import REL


def test_read_only_patched_env_answers_and_starts_its_server(
    tmp_path: Path, standin_env: Env
) -> None:
    spec, marker = counting_spec(tmp_path)
    py = ["--python", str(standin_env.python)]
    built = vpatch("apply", spec, *py, "--json")  # the image build
    assert built.code == 0 and built.patch()["outcome"] == "applied", built.err
    snap = fingerprint(standin_env.root)
    root = standin_env.root

    bare = readonly.vpatch(root, "status", *py, "--json")
    assert bare.code == 0, bare.err
    assert bare.patch()["outcome"] == "applied" and bare.doc["hosts"][0]["error"] is None
    named = readonly.vpatch(root, "status", spec, *py, "--json")
    assert named.code == 0 and named.patch()["outcome"] == "applied", named.err
    checked = readonly.vpatch(root, "verify", spec, *py, "--level", "full", "--json")
    assert checked.code == 0, checked.err
    assert [p["ok"] for p in checked.patch()["probes"]] == [True, True]
    ensured = readonly.vpatch(root, "ensure", spec, *py)
    assert ensured.code == 0, ensured.err
    assert ensured.out.startswith("ensure: ok, 1 host(s) [1 already_applied]")

    served = readonly.vpatch(root, "exec", spec, "--", str(standin_env.python), "-c", SERVE)
    assert served.code == 0, served.err
    assert served.out.split()[1] == "8"  # the server ran, on the patched file's values
    assert "Read-only" not in served.err and "error" not in served.err
    assert fingerprint(standin_env.root) == snap  # nothing written, not even a lock file
    assert '"kimi_k2",' in standin_env.file(REL).read_text() and marker.exists()


def test_read_only_env_that_needs_a_write_refuses_and_says_why(
    tmp_path: Path, standin_env: Env
) -> None:
    spec, _ = counting_spec(tmp_path)
    py = ["--python", str(standin_env.python)]
    snap = fingerprint(standin_env.root)
    root = standin_env.root

    got = readonly.vpatch(root, "ensure", spec, *py)
    assert got.code == 1
    lines = got.err.splitlines()
    assert any("Read-only file system" in x and x.startswith("error: ") for x in lines), got.err
    hint = [x for x in lines if x.startswith("hint: ")]
    assert len(hint) == 1 and "read-only" in hint[0] and "--sudo" not in hint[0]

    as_json = readonly.vpatch(root, "ensure", spec, *py, "--json")
    assert as_json.code == 1 and as_json.doc["ok"] is False
    assert as_json.err.splitlines()[0].startswith("error: ") and "hint: " in as_json.err

    started = tmp_path / "started"
    refused = readonly.vpatch(root, "exec", spec, *py, "--", "touch", str(started))
    assert refused.code == 1 and not started.exists()
    assert "not starting touch" in refused.err
    assert fingerprint(standin_env.root) == snap
