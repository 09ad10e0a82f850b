"""What verify, apply and rollback say is true on the host (issue 5), on the real stand-in package.

- probes that hang or crash are failed probes with a reason, never a vpatch crash or hang;
- drift says what the file is now, in `verify` and in `status`;
- the .pyc matches the new source after a same-size edit in the same second (CPython #75953);
- processes of the environment that started before a write are listed as restart_required;
- `--metrics` input errors are exit 2 before any host is contacted, fetch errors fail the probe.
The metrics numbers themselves are checked against vLLM's own exporter in test_vllm_verify.py.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import prometheus_client
import pytest

from patcher.transports.pipe import LocalTransport
from tests import envs
from tests import sshd as harness
from tests.conftest import Env, fingerprint, vpatch
from tests.support.specs import Table, Value, edit, probe, spec_toml
from tests.support.standin_specs import REL, SPEC_A, SPEC_B, spec_a, write


# Already true in the pristine stand-in ("llama" is listed): verify is `satisfied_upstream`, so
# these tests need no write and the probes alone decide the outcome.
def satisfied(*probes: Table) -> str:
    return spec_toml(
        id="servekit-llama",
        summary="llama is supported",
        package="servekit",
        versions=">=1.0",
        file=REL,
        edits=[
            edit("ensure_elements", scope="SpecConfig.verify", target="supported", values=["llama"])
        ],
        probes=probes,
    )


def _probe(name: str, code: str, timeout: float = 120) -> dict[str, Value]:
    return probe(name, "servekit.config", code + "\n", timeout=timeout)


def _gone(pid: int) -> bool:
    """Dead or a zombie (an orphan may wait for a reaper that never comes in a container)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_hanging_and_crashing_probes_are_failed_probes(tmp_path: Path, standin_env: Env) -> None:
    pidfile = tmp_path / "grandchild.pid"
    hang = (
        "import subprocess, time\n"
        # A grandchild holding the probe's stdout/stderr open: killing only the probe would
        # leave the agent waiting for EOF until `sleep` ends.
        "p = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(300)"
    )
    crash = "import os, sys\nprint('about to abort', file=sys.stderr, flush=True)\nos.abort()"
    exits = "import sys\nsys.exit('probe says no')"
    spec = write(
        tmp_path,
        "s.toml",
        satisfied(
            _probe("hangs", hang, timeout=1), _probe("crashes", crash), _probe("exits", exits)
        ),
    )
    started = time.monotonic()
    res = vpatch("verify", spec, "--python", standin_env.python, "--json")
    elapsed = time.monotonic() - started
    assert res.code == 1, res.out + res.err
    assert "Traceback" not in res.err
    p = res.patch()
    assert p["outcome"] == "failed"
    hung, crashed, exited = p["probes"]
    assert not hung["ok"] and hung["detail"].startswith("timed out after 1s (killed)")
    assert not crashed["ok"]
    assert crashed["detail"] == "killed by signal 6 (SIGABRT); about to abort"
    assert not exited["ok"] and exited["detail"] == "probe says no"
    assert p["message"] == f"hangs: {hung['detail']}"
    # the hung probe sleeps 300 s: a run that ends before that did not wait for it
    assert elapsed < 300, f"a 1 s probe timeout took {elapsed:.1f}s"
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 60
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild), "the probe's grandchild outlived the timeout"


def test_drift_says_what_the_file_is_now(tmp_path: Path, standin_env: Env) -> None:
    a = write(tmp_path, "a.toml", SPEC_A)
    target, py = standin_env.file(REL), ["--python", str(standin_env.python)]
    pristine = target.read_bytes()
    assert vpatch("apply", a, *py).code == 0
    target.write_text(target.read_text().replace('"qwen"', '"qwen2"'))  # a hand edit
    ver = vpatch("verify", a, *py, "--json")
    assert ver.code == 1 and ver.patch()["outcome"] == "drifted"
    assert "it is now unknown content" in ver.patch()["message"]
    st = vpatch("status", *py, "--json")
    assert st.code == 1 and st.patch()["outcome"] == "drifted"
    assert "now unknown content" in st.patch()["message"]
    snap = fingerprint(standin_env.root)
    again = vpatch("apply", a, *py, "--json")
    assert again.code == 1 and again.patch()["outcome"] == "drifted"
    assert fingerprint(standin_env.root) == snap  # drift is reported, never silently patched

    target.write_bytes(pristine)  # what `pip install --force-reinstall` does
    st = vpatch("status", *py, "--json")
    assert st.code == 1 and st.patch()["outcome"] == "drifted"
    assert "now pristine per pip's RECORD" in st.patch()["message"]


# ---------------------------------------------------------------------------------------------
# Stale bytecode (CPython #75953)

# Runs in the target interpreter: is the .pyc on disk valid for the source now, and is its code
# the code of the source now? (A timestamp .pyc records the source's mtime in whole seconds and
# its size: a same-size edit within the same second leaves a header that still matches.)
_PYC_STATE = r"""
import importlib.util, json, marshal, os, sys
src = sys.argv[1]
data = open(importlib.util.cache_from_source(src), "rb").read()
source = open(src, "rb").read()
st = os.stat(src)
if int.from_bytes(data[4:8], "little") & 1:
    header = data[8:16] == importlib.util.source_hash(source)
else:
    header = (int.from_bytes(data[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
              and int.from_bytes(data[12:16], "little") == st.st_size & 0xFFFFFFFF)
code = marshal.loads(data[16:]) == compile(source, src, "exec", dont_inherit=True)
print(json.dumps({"header": header, "code": code}))
"""
_COMPILE = (
    "import py_compile, sys\n"
    "py_compile.compile(sys.argv[1], doraise=True,"
    " invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)"
)


def _py(env: Env, code: str, *args: str) -> str:
    return subprocess.run(
        [str(env.python), "-c", code, *args], capture_output=True, text=True, check=True
    ).stdout


def _pyc_state(env: Env, target: Path) -> dict[str, bool]:
    state: dict[str, bool] = json.loads(_py(env, _PYC_STATE, str(target)))
    return state


def _limit(env: Env) -> str:
    return _py(env, "import servekit.config as c; print(c.LIMITS['max_batch'])").strip()


def _pin(env: Env, target: Path, second: int) -> None:
    """Source mtime := `second`, and a timestamp .pyc that is valid for exactly that."""
    os.utime(target, (second, second))
    _py(env, _COMPILE, str(target))


def test_stale_bytecode_same_size_same_second(tmp_path: Path, standin_env: Env) -> None:
    """After vpatch writes a same-size edit within the second of the old mtime, the .pyc on
    disk is valid for the new source and holds the new code.

    Deterministic in what it checks: the .pyc's code object must equal compile(new source), so
    a missing refresh fails whatever the timing (same second: header matches, code is old;
    later second: header is old). The negative control shows the hazard is real: a hand-made
    same-size edit without a refresh, in the same second, makes Python import the OLD code.
    vpatch's write is aimed at the pinned second (the old mtime is set to the second the write
    is predicted to land in, from the measured latency) and retried until it lands there.
    """
    spec = SPEC_B.replace("value = 64", "value = 9").replace("== 64", "== 9")  # 8 -> 9
    path = write(tmp_path, "b.toml", spec)
    target, env = standin_env.file(REL), standin_env
    pristine, size = target.read_bytes(), target.stat().st_size

    # Negative control: same size, same second, no refresh -> CPython trusts the stale .pyc.
    second = int(time.time())
    _pin(env, target, second)
    assert _pyc_state(env, target) == {"header": True, "code": True}
    edited = pristine.replace(b'"max_batch": 8', b'"max_batch": 9')
    assert len(edited) == size and edited != pristine
    target.write_bytes(edited)
    os.utime(target, (second, second))
    assert _pyc_state(env, target) == {"header": True, "code": False}  # the checker can fail
    assert _limit(env) == "8"  # and Python really runs the old code
    target.write_bytes(pristine)

    latency, landed = 1.0, []
    for _attempt in range(12):  # a loaded machine's latency wanders: aim again until it lands
        # Launch so that (launch + latency) is mid-second; pin the old mtime to that second.
        now = time.time()
        launch = now + ((0.5 - (now + latency)) % 1.0)
        second = int(launch + latency)
        _pin(env, target, second)
        time.sleep(max(0.0, launch - time.time()))
        t0 = time.time()
        res = vpatch("apply", path, "--python", env.python, "--json")
        assert res.code == 0, res.out + res.err
        st = target.stat()
        latency = st.st_mtime - t0
        assert st.st_size == size
        assert _pyc_state(env, target) == {"header": True, "code": True}
        assert _limit(env) == "9"
        landed.append(int(st.st_mtime) == second)
        print(f"attempt: latency {latency:.2f}s, landed in pinned second: {landed[-1]}")
        if landed[-1]:
            break
        assert vpatch("rollback", "--python", env.python).code == 0
    assert any(landed), f"no write landed in the pinned second in {len(landed)} tries"


# ---------------------------------------------------------------------------------------------
# Restart required

# A long-running "server" of the environment: imports the module, then answers on request
# whether kimi_k2 is accepted BY THE CODE IT HAS LOADED (the file on disk may say otherwise).
_HOLDER = """
import sys
from types import SimpleNamespace as NS
import servekit.config as c
import os
print("ready", os.getpid(), flush=True)
for _line in sys.stdin:
    try:
        c.SpecConfig.verify(NS(model_type="kimi_k2"))
        print("accepts", flush=True)
    except ValueError:
        print("refuses", flush=True)
"""


# What setproctitle does (vLLM names its engine processes `VLLM::EngineCore`): overwrite the
# argv area in place, so /proc/PID/cmdline no longer names the interpreter. Then map a file
# from site-packages, as loading an extension module from there does.
_RETITLE = """
f = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
start, end = int(f[45]), int(f[46])  # fields 48/49: arg_start, arg_end
with open("/proc/self/mem", "r+b", buffering=0) as mem:
    mem.seek(start)
    mem.write(b"VLLM::EngineCore".ljust(end - start, b"\\0"))
import mmap
mapped = open({file!r}, "rb")
m = mmap.mmap(mapped.fileno(), 0, prot=mmap.PROT_READ)
"""


class Holder:
    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.started = time.time()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        ready, pid = self.proc.stdout.readline().split()
        assert ready == "ready"
        self.pid = int(pid)  # the process's own pid (behind ssh it is not our child's)

    def ask(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("?\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for h in started:
        h.stop()


def _pids(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["pid"]: p for p in doc["hosts"][0]["restart_required"]}


def test_restart_required_lists_processes_started_before_the_write(
    tmp_path: Path, standin_env: Env, holders: list[Holder]
) -> None:
    env = standin_env
    a = write(tmp_path, "a.toml", SPEC_A)
    py = ["--python", str(env.python)]

    # Of this environment, started before the apply: by path, and through a console script
    # (the kernel runs the shebang interpreter, so argv[0] is ENV/bin/python).
    direct = Holder([str(env.python), "-c", _HOLDER])
    script = env.python.parent / "servekit-serve"
    script.write_text(f"#!{env.python}\n{_HOLDER}")
    script.chmod(0o755)
    console = Holder([str(script)])
    # Title rewritten like vLLM's engine processes (setproctitle): argv[0] says nothing, but
    # the process maps a file from the environment's site-packages, as an extension module is.
    mapper = Holder([str(env.python), "-c", _RETITLE.format(file=str(env.file(REL))) + _HOLDER])
    # Same base interpreter, NOT this environment: another venv, and the base python itself.
    other_venv = tmp_path / "other"
    subprocess.run([envs.HOST_PYTHON, "-m", "venv", "--without-pip", str(other_venv)], check=True)
    idle = "import os, sys; print('ready', os.getpid(), flush=True); sys.stdin.read()"
    other = Holder([str(other_venv / "bin" / "python"), "-c", idle])
    base = Holder([os.path.realpath(envs.HOST_PYTHON), "-c", idle])
    holders.extend([direct, console, mapper, other, base])
    assert direct.ask() == "refuses"

    applied_at = time.time()
    res = vpatch("apply", a, *py, "--json")
    assert res.code == 0, res.out + res.err
    listed = _pids(res.doc)
    assert {direct.pid, console.pid, mapper.pid} <= set(listed)
    assert not {other.pid, base.pid} & set(listed)
    entry = listed[direct.pid]
    assert entry["cmdline"].startswith(f"{env.python} -c ")
    assert listed[mapper.pid]["cmdline"] == "VLLM::EngineCore"
    started = datetime.fromisoformat(entry["started"].replace("Z", "+00:00")).timestamp()
    assert direct.started - 1 <= started <= applied_at
    # The truth behind the warning: the file is patched, the running process is not.
    assert direct.ask() == "refuses"

    # Started after the write: it has the patch; verify (human output) lists only the old ones.
    fresh = Holder([str(env.python), "-c", _HOLDER])
    holders.append(fresh)
    assert fresh.ask() == "accepts"
    human = vpatch("verify", a, *py, "--level", "static")
    assert human.code == 0
    for old in (direct, console, mapper):
        assert f"restart required: pid {old.pid} (started " in human.out
    assert f"pid {fresh.pid} " not in human.out

    # Rollback writes again: now every process of the env started before it runs stale code,
    # including the one that had the patch.
    back = vpatch("rollback", *py, "--json")
    assert back.code == 0
    assert {direct.pid, console.pid, mapper.pid, fresh.pid} <= set(_pids(back.doc))
    assert not {other.pid, base.pid} & set(_pids(back.doc))


def test_no_restart_required_when_nothing_was_written(
    tmp_path: Path, standin_env: Env, holders: list[Holder]
) -> None:
    """A failed verify restores the old bytes: running processes match the disk again."""
    holders.append(Holder([str(standin_env.python), "-c", _HOLDER]))
    bad = write(tmp_path, "bad.toml", spec_a(values=["x"]))
    res = vpatch("apply", bad, "--python", standin_env.python, "--json")
    assert res.code == 1 and "previous bytes restored" in res.patch()["message"]
    assert res.doc["hosts"][0]["restart_required"] == []


# ---------------------------------------------------------------------------------------------
# --metrics input and fetch errors (numbers: test_vllm_verify.py)


class _Metrics(http.server.BaseHTTPRequestHandler):
    """vLLM-named counters made with prometheus_client (vLLM's own class: test_vllm_verify)."""

    def counts(self) -> tuple[int, int, int]:
        return 100, 300, 45  # drafts, draft tokens, accepted tokens: 15 %

    def body(self) -> bytes:
        reg = prometheus_client.CollectorRegistry()
        names = ("drafts", "draft_tokens", "accepted_tokens")
        for name, value in zip(names, self.counts(), strict=True):
            counter = prometheus_client.Counter(f"vllm:spec_decode_num_{name}", name, registry=reg)
            counter.inc(value)
        return prometheus_client.generate_latest(reg)

    def do_GET(self) -> None:
        body = self.body()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_metrics_message_follows_the_patch_state(tmp_path: Path, standin_env: Env) -> None:
    """Only a patch that verified may be called loaded; the numbers show in human output."""
    spec = write(tmp_path, "a.toml", SPEC_A)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    py = ["--python", str(standin_env.python), "--metrics", url, "--min-acceptance", "40%"]
    try:
        absent = vpatch("verify", spec, *py, "--level", "static", "--json")
        assert absent.code == 1 and absent.patch()["outcome"] == "not_applied"
        [m] = [p for p in absent.patch()["probes"] if p["name"] == "metrics"]
        assert m["detail"].startswith("speculative decoding is not paying: acceptance 15 % < 40 %")
        assert vpatch("apply", spec, "--python", standin_env.python).code == 0
        loaded = vpatch("verify", spec, *py)
    finally:
        server.shutdown()
    assert loaded.code == 1
    assert any(ln.split()[:2] == ["failed", "servekit-kimi"] for ln in loaded.out.splitlines())
    assert "FAIL metrics" in loaded.out and "ok   kimi_k2 accepted" in loaded.out
    assert "patch is loaded but speculative decoding is not paying: acceptance 15 % < 40 %" in (
        loaded.out
    )


class _Growing(_Metrics):
    """A server that speculated well for a long time (90 %) and badly since (10 %): each scrape
    sees 100 more drafts of 3 tokens with 30 of them accepted."""

    scrapes = 0

    def counts(self) -> tuple[int, int, int]:
        n = type(self).scrapes
        type(self).scrapes += 1
        return 1000 + 100 * n, 3000 + 300 * n, 2700 + 30 * n


def test_metrics_window_judges_the_recent_traffic(tmp_path: Path, standin_env: Env) -> None:
    """Lifetime counters say 90 % (pass); the last second says 10 % (fail): --metrics-window
    scrapes twice, on the host, a second apart, and judges the increase."""
    spec = write(tmp_path, "a.toml", SPEC_A)
    assert vpatch("apply", spec, "--python", standin_env.python).code == 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Growing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    py = ["--python", str(standin_env.python), "--metrics", url, "--min-acceptance", "40%"]
    try:
        lifetime = vpatch("verify", spec, *py, "--level", "static", "--json")
        started = time.monotonic()
        recent = vpatch("verify", spec, *py, "--level", "static", "--metrics-window", "1", "--json")
        took = time.monotonic() - started
    finally:
        server.shutdown()
    assert lifetime.code == 0, lifetime.out + lifetime.err
    [m] = [p for p in lifetime.patch()["probes"] if p["name"] == "metrics"]
    assert m["ok"] and m["detail"].startswith("acceptance 90 % >= 40 %"), m
    assert recent.code == 1, recent.out + recent.err
    [m] = [p for p in recent.patch()["probes"] if p["name"] == "metrics"]
    assert not m["ok"] and "patch is loaded but speculative decoding is not paying" in m["detail"]
    assert "acceptance 10 % < 40 %" in m["detail"], m
    assert (
        "in the last 1" in m["detail"]
        and "100 drafts, 300 draft tokens, 30 accepted" in m["detail"]
    )
    assert _Growing.scrapes == 3 and took >= 1.0


def test_unreachable_metrics_url_fails_the_probe(tmp_path: Path, standin_env: Env) -> None:
    spec = write(tmp_path, "s.toml", satisfied())
    res = vpatch(
        "verify",
        spec,
        "--python",
        standin_env.python,
        "--metrics",
        "http://127.0.0.1:9/m",
        "--json",
    )
    assert res.code == 1
    p = res.patch()
    assert p["outcome"] == "failed"
    [m] = [pr for pr in p["probes"] if pr["name"] == "metrics"]
    assert not m["ok"] and m["detail"].startswith("cannot scrape http://127.0.0.1:9/m: ")
    assert "connection failed" in m["detail"]
    assert p["message"] == f"metrics: {m['detail']}"


def _python39() -> Path | None:
    for cand in (
        "/usr/bin/python3.9",
        *sorted(Path("/root/.pyenv/versions").glob("3.9*/bin/python3.9")),
    ):
        if Path(cand).exists():
            return Path(cand)
    return None


class _Text(_Metrics):
    def body(self) -> bytes:
        return b"# TYPE up gauge\nup 1.0\n"


def test_new_agent_ops_run_on_python_39(tmp_path: Path) -> None:
    """procs and fetch are stdlib-only and 3.9-clean: exercised on a real 3.9 when present."""
    exe = _python39()
    if exe is None:
        pytest.skip("no Python 3.9 on this machine")
    t = LocalTransport(str(exe))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Text)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    holder = subprocess.Popen(
        [str(exe), "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        got = t.call({"op": "fetch", "url": url, "timeout": 5})
        assert got["ok"] and got["status"] == 200 and got["text"] == "# TYPE up gauge\nup 1.0\n"
        refused = t.call({"op": "fetch", "url": "http://127.0.0.1:9/", "timeout": 2})
        assert refused["ok"] and "connection failed" in refused["error"]
        bad = t.call({"op": "fetch", "url": "ftp://example.invalid/"})
        assert not bad["ok"] and bad["kind"] == "input"
        time.sleep(0.05)
        written = tmp_path / "written.py"
        written.write_text("x = 1\n")  # "written" after the holder started
        found = t.call({"op": "procs", "paths": [str(written)]})
        assert holder.pid in [p["pid"] for p in found["restart_required"]]
    finally:
        server.shutdown()
        holder.kill()
        holder.wait()


def test_restart_required_over_ssh(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    """Computed by the agent on the host, so it is the same over SSH: a process started in
    another SSH session of that host, before the write, is listed with its remote pid.

    The two lab hosts share one PID namespace but not their mounts (like containers on a
    hostPID node): h2's server runs `/root/ml-env/bin/python` too, the same path string and
    (cp -al) the same inodes for every file, yet another environment. It is not h1's."""
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    h1, h2 = lab.hosts
    remote_py = "/root/ml-env/bin/python"
    holder = Holder(lab.ssh_argv(h1, remote_py, "-c", _HOLDER))
    other = Holder(lab.ssh_argv(h2, remote_py, "-c", _HOLDER))
    try:
        spec = write(tmp_path, "a.toml", SPEC_A)
        args = ["--host", h1.name, "--ssh-config", str(lab.ssh_config), "--python", remote_py]
        res = vpatch("apply", spec, *args, "--json")
        assert res.code == 0, res.out + res.err
        listed = _pids(res.doc)
        assert listed[holder.pid]["cmdline"].startswith(f"{remote_py} -c ")
        assert other.pid not in listed, listed
        assert holder.ask() == "refuses"  # the remote process still runs the old code
        back = vpatch("rollback", *args, "--json")
        assert back.code == 0 and holder.pid in _pids(back.doc)
        assert other.pid not in _pids(back.doc)
    finally:
        holder.stop()
        other.stop()
