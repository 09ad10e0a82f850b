"""`vpatch ensure`, `vpatch exec` and `vpatch hook systemd` on a real pip-installed stand-in env.

A second probe appends to a marker file each time it runs, so "no import probe on the fast
path" is observed, not assumed; `fingerprint` shows that nothing in the env was rewritten.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import standin
from tests.conftest import REPO, VPATCH, Env, fingerprint, vpatch
from tests.support.hooklab import PIP, REINSTALL, SERVE, counting_spec, systemd_unquote
from tests.support.standin_specs import REL


def runs(marker: Path) -> int:
    return len(marker.read_text()) if marker.exists() else 0


def reinstall(env: Env, tmp_path: Path) -> None:
    """What an image rebuild or `pip install --force-reinstall` does: pristine files again."""
    whl = standin.build_wheel(tmp_path)
    subprocess.run(
        [*PIP, "--python", str(env.python), *REINSTALL, str(whl)],
        check=True,
        capture_output=True,
    )


def test_ensure_applies_is_a_fast_noop_and_reapplies_after_reinstall(
    tmp_path: Path, standin_env: Env
) -> None:
    spec, marker = counting_spec(tmp_path)
    py = ["--python", str(standin_env.python)]
    first = vpatch("ensure", spec, *py, "--json")
    assert first.code == 0, first.out + first.err
    p = first.patch()
    assert p["outcome"] == "applied" and [x["ok"] for x in p["probes"]] == [True, True]
    assert runs(marker) == 1  # after a write: full verify (import + probes)

    snap = fingerprint(standin_env.root)
    started = time.monotonic()
    again = vpatch("ensure", spec, *py, "--json")
    wall = time.monotonic() - started
    assert again.code == 0 and again.patch()["outcome"] == "already_applied"
    assert again.patch()["probes"] == [] and runs(marker) == 1  # no import, no probe
    assert again.doc["stats"]["libcst_parses"] == 0  # no rewrite attempted
    assert fingerprint(standin_env.root) == snap
    print(f"\nensure no-op, local: {again.doc['hosts'][0]['seconds']:.3f}s in vpatch, {wall:.2f}s")

    human = vpatch("ensure", spec, *py)
    assert human.code == 0 and human.err == ""
    assert human.out.startswith("ensure: ok, 1 host(s) [1 already_applied] in ")

    checked = vpatch("ensure", spec, *py, "--level", "full", "--json")
    assert checked.code == 0 and checked.patch()["outcome"] == "already_applied"
    assert len(checked.patch()["probes"]) == 2 and runs(marker) == 2  # asked for: probes ran
    assert fingerprint(standin_env.root) == snap

    reinstall(standin_env, tmp_path)
    assert "kimi_k2" not in standin_env.file(REL).read_text()
    back = vpatch("ensure", spec, *py)
    assert back.code == 0, back.out + back.err
    assert back.out.splitlines()[0] == (
        "applied: local: servekit-kimi (servekit 1.0.0), 2/2 checks passed"
    )
    assert '"kimi_k2",' in standin_env.file(REL).read_text() and runs(marker) == 3


def test_ensure_fails_with_one_line_when_no_variant_matches(
    tmp_path: Path, standin_env: Env
) -> None:
    spec, _ = counting_spec(tmp_path, ">=2.0")
    snap = fingerprint(standin_env.root)
    res = vpatch("ensure", spec, "--python", standin_env.python)
    assert res.code == 1 and res.out == ""
    assert res.err.splitlines() == [
        "error: local: servekit-kimi: not_applicable: "
        "servekit 1.0.0 is in no variant's range (>=2.0)",
        "hint: add a [[variant]] for this version (`vpatch matrix SPEC` shows fits)",
        "ensure: 1 problem(s) on 1 host(s) [1 not_applicable]",
    ]
    as_json = vpatch("ensure", spec, "--python", standin_env.python, "--json")
    assert as_json.code == 1 and as_json.doc["ok"] is False  # still one document, and on
    assert as_json.err.splitlines() == res.err.splitlines()[:2]  # stderr what went wrong
    assert fingerprint(standin_env.root) == snap
    bad = vpatch("ensure", tmp_path / "missing.toml", "--python", standin_env.python)
    assert bad.code == 2 and len(bad.err.splitlines()) == 2 and bad.out == ""


def exec_argv(spec: Path, env: Env, *cmd: str, python: bool = True) -> list[str]:
    py = ["--python", str(env.python)] if python else []
    return [*VPATCH, "exec", str(spec), *py, "--", *cmd]


def test_exec_runs_the_command_as_the_same_process(tmp_path: Path, standin_env: Env) -> None:
    spec, _ = counting_spec(tmp_path)
    proc = subprocess.Popen(
        exec_argv(spec, standin_env, str(standin_env.python), "-c", SERVE),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.split() == [str(proc.pid), "8"]  # same PID: vpatch became the command
    assert err.splitlines()[0].startswith("applied: local: servekit-kimi")
    assert '"kimi_k2",' in standin_env.file(REL).read_text()


def test_exec_does_not_start_the_command_when_ensure_fails(
    tmp_path: Path, standin_env: Env
) -> None:
    spec, _ = counting_spec(tmp_path, ">=2.0")
    started = tmp_path / "started"
    res = subprocess.run(
        exec_argv(spec, standin_env, "touch", str(started)),
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 1 and res.stdout == ""
    assert not started.exists()
    assert res.stderr.splitlines()[-1] == "error: not starting touch: patches not in place"
    # A command that does not exist, or whose python cannot be told: exit 2, nothing touched.
    snap = fingerprint(standin_env.root)
    ok_spec, _ = counting_spec(tmp_path / "ok")
    missing = subprocess.run(exec_argv(ok_spec, standin_env, "no-such-cmd"), capture_output=True)
    unknown = subprocess.run(
        exec_argv(ok_spec, standin_env, "/bin/sh", "-c", "true", python=False),
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and unknown.returncode == 2
    assert "cannot tell which python" in unknown.stderr
    assert fingerprint(standin_env.root) == snap


SIGNALLED = """
import signal, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
print("serving", input(), flush=True)
signal.pause()
"""


def test_exec_hands_over_stdin_signals_and_exit_status(tmp_path: Path, standin_env: Env) -> None:
    spec, _ = counting_spec(tmp_path)
    proc = subprocess.Popen(
        exec_argv(spec, standin_env, str(standin_env.python), "-c", SIGNALLED),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("hello\n")
    proc.stdin.close()
    assert proc.stdout.readline() == "serving hello\n"
    proc.send_signal(signal.SIGTERM)  # what systemd / docker stop send to the service PID
    assert proc.wait(timeout=30) == 42


def test_exec_restores_default_signal_dispositions(tmp_path: Path, standin_env: Env) -> None:
    """Python ignores SIGPIPE and SIGXFSZ; an ignored signal survives exec. `cat` shows the mask
    the command starts with."""
    spec, _ = counting_spec(tmp_path)
    res = subprocess.run(
        exec_argv(spec, standin_env, "cat", "/proc/self/status"),
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    ignored = int(
        next(ln for ln in res.stdout.splitlines() if ln.startswith("SigIgn:")).split()[1], 16
    )
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), f"{sig.name} still ignored"


def test_exec_patches_the_python_of_a_console_script(tmp_path: Path, standin_env: Env) -> None:
    """`vpatch exec SPEC -- serve`: `serve` is a console script of the env (shebang = its
    python), so that env is the one patched, without --python."""
    spec, _ = counting_spec(tmp_path)
    script = standin_env.python.parent / "serve-standin"
    script.write_text(f"#!{standin_env.python}\n{SERVE}\n")
    script.chmod(0o755)
    path = f"{script.parent}:{os.environ['PATH']}"
    proc = subprocess.Popen(
        exec_argv(spec, standin_env, "serve-standin", python=False),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PATH": path},
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.split()[0] == str(proc.pid)
    assert standin_env.journal.exists() and '"kimi_k2",' in standin_env.file(REL).read_text()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_hook_systemd_dropin_verifies_and_its_command_ensures(
    tmp_path: Path, standin_env: Env
) -> None:
    spec, marker = counting_spec(tmp_path)
    rel_spec = os.path.relpath(spec, REPO)  # printed by absolute path: a unit runs in /
    res = vpatch(
        "hook", "systemd", "--service", "vpatch-test.service", rel_spec,
        "--python", standin_env.python, "--level", "import",
    )  # fmt: skip
    assert res.code == 0, res.err
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(res.out)
    assert parser.sections() == ["Service"] and list(parser["Service"]) == ["execstartpre"]
    argv = systemd_unquote(parser["Service"]["ExecStartPre"])
    py = str(standin_env.python)
    assert argv[1:] == ["ensure", str(spec), "--python", py, "--level", "import"]
    assert os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK)

    if shutil.which("systemd-analyze"):
        units = tmp_path / "units"
        (units / "vpatch-test.service.d").mkdir(parents=True)
        (units / "vpatch-test.service").write_text("[Service]\nExecStart=/bin/true\n")
        (units / "vpatch-test.service.d" / "vpatch.conf").write_text(res.out)
        check = subprocess.run(
            ["systemd-analyze", "verify", str(units / "vpatch-test.service")],
            capture_output=True,
            text=True,
            env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"},
        )
        assert check.returncode == 0 and "vpatch.conf" not in check.stderr, check.stderr

    pristine = sha(standin_env.file(REL))
    ran = subprocess.run(argv, capture_output=True, text=True, cwd="/")
    assert ran.returncode == 0, ran.stderr
    assert sha(standin_env.file(REL)) != pristine and runs(marker) == 0  # import level: no probes
    assert json.loads(standin_env.journal.read_text().splitlines()[0])["spec"] == "servekit-kimi"

    for bad in (["--python", "venv/bin/python"], ["--service", "bad name"]):
        args = ["--service", "svc", "--python", str(standin_env.python), *bad]
        out = vpatch("hook", "systemd", spec, *args)
        assert out.code == 2 and out.out == "" and out.err.startswith("error: ")


@pytest.mark.parametrize("flag", ["--privileged"])
def test_hook_systemd_privileged_prefix(tmp_path: Path, standin_env: Env, flag: str) -> None:
    spec, _ = counting_spec(tmp_path)
    res = vpatch("hook", "systemd", "--service", "svc", spec, "--python", standin_env.python, flag)
    assert res.code == 0 and "\nExecStartPre=+/" in res.out


def test_ensure_applies_an_updated_spec(tmp_path: Path, standin_env: Env) -> None:
    spec, _ = counting_spec(tmp_path)
    py = ["--python", str(standin_env.python)]
    assert vpatch("ensure", spec, *py).code == 0
    spec.write_text(spec.read_text().replace('values = ["kimi_k2"]', 'values = ["kimi_k2", "x"]'))
    res = vpatch("ensure", spec, *py, "--json")
    assert res.code == 0 and res.patch()["outcome"] == "applied", res.out
    assert '"x",' in standin_env.file(REL).read_text()
