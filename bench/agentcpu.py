"""Host CPU of the agent for one static apply, and where it goes.

    python -m bench.agentcpu             # 30 sessions, the hosts' interpreter
    python -m bench.agentcpu --reps 10 --python /usr/bin/python3.12
    python -m bench.agentcpu --against /work/main   # this tree's agent and another's, paired

A stand-in venv (tests/standin.py) is patched once with `vpatch apply --level static` through
the local transport, recording the requests the engine sends (inspect, commit). Then each
session replays them on a fresh copy of pip's bytes: one agent process exactly as the
transports start it (`python -I -c BOOT`, bundle line, request lines, EOF), its CPU read from
wait4's rusage (user + sys, the whole process from exec to exit). What sshd adds on a real host
(key exchange, the shell, the channel) is not in these figures: bench/run.py's `hosts CPU`
column has it.

The agent's code is the tree's the bench is run from (`patcher/agent`, the `patcher` imported:
run it from the tree to measure); `--against DIR` also starts DIR's agent (its loader and
bundle, built by DIR's own `patcher`) on the same requests, the two alternating session by
session, and prints both medians and the median of per-session differences.

The SSH transports start the agent with the bundle kept on the host (`bundle.kept_boot`,
patcher/agent/kept.py): its loader reads `~/.cache/vpatch/agent/KEY.bundle`, checks it and
its hash, and asks for the bundle only on a miss. The `kept` rows start it that way (a first,
untimed session keeps the bundle), as root through privsep's stage 0 as a root login does; as
root the bench runs in a mount namespace of its own with an empty tmpfs on
`/root/.cache/vpatch` (this machine's own cache is not touched). `kept breakdown` splits one
such session the way the plain one below is split, with stage 0's checks and every module's
load (decode: base64, zlib, marshal; exec: its body, its own imports included).

The breakdown comes from one more session in which BOOT is wrapped with process-time marks and
the agent's functions with timers (instrumentation cost is excluded from the parts, not from
that session's total). Parts nest: `locate.distribution` includes its hashing, `commit` every
commit step.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from patcher import cli
from patcher.transports import pipe
from patcher.transports.bundle import (
    BOOT,
    MISS,
    TRUSTED_PYTHON,
    agent_argv,
    agent_bundle,
    request_line,
)
from tests import envs, standin
from tests.support.standin_specs import SPEC_A

# Functions timed in the instrumented session: (module, attribute path, label).
TIMED = (
    ("vpatch_agent.locate", "distribution", "inspect: locate.distribution (dist-info)"),
    ("vpatch_agent.locate", "file_info", "inspect: locate.file_info (read+hash)"),
    ("vpatch_agent.facts", "_journal_state", "inspect: journal state"),
    ("vpatch_agent.facts", "_locked", "inspect: lock probe"),
    ("vpatch_agent.facts", "_state_facts", "inspect: state dir facts"),
    ("vpatch_agent.confine", "roots", "confine.roots (site-packages list)"),
    ("vpatch_agent.commit", "_ensure_state_dir", "commit: open/create state dir"),
    ("vpatch_agent.commit", "_repair", "commit: repair check"),
    ("vpatch_agent.commit", "_planned", "commit: plan (confine, hash, compile check)"),
    ("vpatch_agent.fsops", "sweep", "commit: sweep temp files"),
    ("vpatch_agent.fsops", "stage", "commit: stage temp file (incl. fsync)"),
    ("vpatch_agent.statedir", "State.write_backup", "commit: backup (incl. fsyncs)"),
    ("vpatch_agent.commit", "_append", "commit: journal appends (incl. fsync)"),
    ("vpatch_agent.fsops", "Staged.publish", "commit: rename + dir fsync"),
    ("vpatch_agent.fsops", "refresh_bytecode", "commit: .pyc refresh"),
    ("vpatch_agent.commit", "_user", "commit: user name"),
    ("vpatch_agent.procs", "scan", "commit: restart-required scan (/proc)"),
    ("vpatch_agent.fsops", "sha256_bytes", "sha256 (all)"),
    ("os", "fsync", "os.fsync (all)"),
)

_PRELUDE = """\
import time as _t
_pt=_t.process_time
T=[('interpreter start',_pt())]
import builtins as _b
_C=[0.0]
_bc=_b.compile
def _comp(*a,**k):
    s=_pt()
    try: return _bc(*a,**k)
    finally: _C[0]+=_pt()-s
_b.compile=_comp
"""

_LOOP = """\
T.append(('load agent modules',_pt()))
J=getattr(vpatch_agent,'wire',None) or __import__('json')
ACC={}
def _wrap(modname,attr,label):
    try:
        __import__(modname)
        owner=sys.modules[modname]
        *path,name=attr.split('.')
        for p in path: owner=getattr(owner,p)
        f=getattr(owner,name)
    except (ImportError,AttributeError):
        return
    def w(*a,**k):
        s=_pt()
        try: return f(*a,**k)
        finally: ACC[label]=ACC.get(label,0.0)+_pt()-s
    setattr(owner,name,w)
for _m,_a,_l in J.loads(sys.argv[1]): _wrap(_m,_a,_l)
_b.compile=_bc
T.append(('(instrumentation)',_pt()))
REQ=[]
while True:
    line=sys.stdin.readline()
    if not line: break
    ACC.clear(); s=_pt()
    res=vpatch_agent.answer(line)
    mid=_pt()
    sys.stdout.write(J.dumps(res)+'\\n'); sys.stdout.flush()
    REQ.append({'total':_pt()-s,'answer json':_pt()-mid,'parts':dict(ACC)})
    T.append(('request',_pt()))
T.append(('end',_pt()))
sys.stderr.write('\\n@@'+J.dumps({'marks':T,'compile':_C[0],'requests':REQ})+'\\n')
getattr(vpatch_agent,'_done',lambda: None)()
"""


def instrumented_boot() -> str:
    """BOOT with process-time marks around its phases and a timed request loop."""
    tail = "import vpatch_agent\nvpatch_agent.main()\n"
    assert BOOT.endswith(tail), "BOOT changed: update bench/agentcpu.py"
    body = BOOT[: -len(tail)]
    marked = "T.append(('read + parse bundle line',_pt()))\nimport vpatch_agent\n"
    return _PRELUDE + body + marked + _LOOP


class Stand:
    """The stand-in env, pip's bytes of its package, and the requests of one static apply."""

    def __init__(self, root: Path, python: str) -> None:
        self.python = standin.make_env(root / "h") if not python else Path(python)
        venv = self.python.parent.parent
        self.venv = venv
        self.site = envs.site_packages(venv)
        self.pristine = root / "pristine"
        shutil.copytree(self.site / standin.PACKAGE, self.pristine)
        spec = root / "a.toml"
        spec.write_text(SPEC_A)
        self.requests = capture(["apply", str(spec), "--python", str(self.python)])
        ops = [r["op"] for r in self.requests]
        assert ops == ["inspect", "commit"], ops

    def reset(self) -> None:
        shutil.rmtree(self.site / standin.PACKAGE)
        shutil.copytree(self.pristine, self.site / standin.PACKAGE)
        shutil.rmtree(self.venv / ".vpatch", ignore_errors=True)


def capture(args: Sequence[str]) -> list[dict[str, Any]]:
    """The requests `vpatch ARGS --level static` sends through the local transport."""
    sent: list[dict[str, Any]] = []
    real = pipe.LocalTransport.call

    def call(
        self: pipe.LocalTransport, req: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        sent.append(req)
        return real(self, req, timeout)

    pipe.LocalTransport.call = call  # type: ignore[method-assign,assignment]
    try:
        sys.stdout.flush()
        saved = os.dup(1)  # the CLI prints its report: not into this one
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        try:
            code = cli.main([*args, "--level", "static", "--json"])
            sys.stdout.flush()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(null)
    finally:
        pipe.LocalTransport.call = real  # type: ignore[method-assign]
    assert code == 0, f"vpatch {' '.join(args)}: exit {code}"
    return sent


def session(
    stand: Stand, boot: str = BOOT, argv: Sequence[str] = (), stage0: bool = False
) -> tuple[float, list[dict[str, Any]], str]:
    """(CPU ms, answers, stderr) of one agent session replaying the recorded requests;
    `stage0`: started as root is (privsep's stage 0 under the trusted interpreter; its
    worker's CPU is in wait4's figure: stage 0 waits for it, or became it)."""
    stand.reset()
    cmd = [str(stand.python), "-I", "-c", boot, *argv]
    if stage0:
        cmd = agent_argv(str(stand.python), True, TRUSTED_PYTHON)
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    answers = []
    for i, req in enumerate(stand.requests):
        proc.stdin.write((agent_bundle() if i == 0 else b"") + request_line(req))
        proc.stdin.flush()
        answers.append(json.loads(proc.stdout.readline()))
        assert answers[-1].get("ok"), answers[-1]
    proc.stdin.close()
    err = proc.stderr.read().decode()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err
    return (usage.ru_utime + usage.ru_stime) * 1000, answers, err


def bare(python: str, flags: Sequence[str], reps: int) -> float:
    """Median CPU ms of `python FLAGS -c pass`."""
    out = []
    for _ in range(reps):
        proc = subprocess.Popen([python, *flags, "-c", "pass"])
        _pid, _status, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
        out.append((usage.ru_utime + usage.ru_stime) * 1000)
    return median(out)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def breakdown(stand: Stand, reps: int) -> list[tuple[str, float]]:
    """(part, ms) of the median-total instrumented session."""
    runs = []
    for _ in range(max(3, reps // 5)):
        total, _answers, err = session(stand, instrumented_boot(), [json.dumps(TIMED)])
        runs.append((total, json.loads(err.rsplit("\n@@", 1)[1])))
    runs.sort(key=lambda r: r[0])
    total, data = runs[len(runs) // 2]
    marks = data["marks"]
    rows: list[tuple[str, float]] = []
    prev = 0.0
    ops = iter(r["op"] for r in stand.requests)
    reqs = iter(data["requests"])
    for label, at in marks:
        spent = (at - prev) * 1000
        prev = at
        if label == "request":
            op, req = next(ops), next(reqs)
            rows.append((f"{op} (whole request)", spent))
            for part, secs in req["parts"].items():
                rows.append((f"  {part}", secs * 1000))
            rows.append(("  answer to JSON", req["answer json"] * 1000))
            continue
        rows.append((label, spent))
        if label == "load agent modules":
            rows.append(("  of which compile()", data["compile"] * 1000))
    rows.append(("exit (after the last request)", total - prev * 1000))
    rows.append(("instrumented session total", total))
    return rows


# One tree's agent as the SSH transports start it (the kept loader), built by that tree's own
# `patcher` (run with the tree as the working directory: `-c` puts it first on sys.path).
_TREE = """\
import json, sys
from patcher.transports.bundle import TRUSTED_PYTHON, agent_argv, agent_bundle
argv = agent_argv(sys.argv[1], sys.argv[2] == "1", TRUSTED_PYTHON, kept=True)
json.dump({"argv": argv, "bundle": agent_bundle().decode("latin-1")}, sys.stdout)
"""


class Agent:
    """The argv that starts one tree's agent with its bundle kept on the host, and the bundle
    its loader asks for on a miss."""

    def __init__(self, name: str, argv: list[str], bundle: bytes) -> None:
        self.name, self.argv, self.bundle = name, argv, bundle


def agent_of(tree: str, python: str, root: bool) -> Agent:
    """This tree's agent (`tree` empty), or the one of the tree at `tree`."""
    if not tree:
        argv = agent_argv(python, root, TRUSTED_PYTHON, kept=True)
        return Agent("this tree", argv, agent_bundle())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", _TREE, python, "1" if root else "0"],
        cwd=tree,
        env=env,
        capture_output=True,
        check=True,
    ).stdout
    got = json.loads(out)
    return Agent(tree, list(got["argv"]), got["bundle"].encode("latin-1"))


def kept_session(stand: Stand, agent: Agent, boot: str = "") -> tuple[float, bool, str]:
    """(CPU ms, whether the host had no usable kept bundle, stderr) of one session started as
    the SSH transports start it: the first request right behind the exec, the bundle only
    after a miss line (then that request again), the rest one by one; `boot`: this loader
    text instead of the agent's own."""
    stand.reset()
    argv = list(agent.argv)
    if boot:
        argv[argv.index("-c") + 1] = boot
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    first = request_line(stand.requests[0])
    proc.stdin.write(first)
    proc.stdin.flush()
    line = proc.stdout.readline()
    missed = line.startswith(MISS)
    if missed:
        proc.stdin.write(agent.bundle + first)
        proc.stdin.flush()
        line = proc.stdout.readline()
    for req in stand.requests[1:]:
        assert json.loads(line).get("ok"), line
        proc.stdin.write(request_line(req))
        proc.stdin.flush()
        line = proc.stdout.readline()
    assert json.loads(line).get("ok"), line
    proc.stdin.close()
    err = proc.stderr.read().decode()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err
    return (usage.ru_utime + usage.ru_stime) * 1000, missed, err


def kept_paired(stand: Stand, agents: list[Agent], reps: int) -> dict[str, float]:
    """Median CPU ms of each agent's kept sessions, the agents alternating (the order turned
    every round), and for two the median of per-round differences (second - first)."""
    spent: list[list[float]] = [[] for _ in agents]
    for agent in agents:
        kept_session(stand, agent)  # keeps the bundle (a miss the first time)
    for i in range(reps):
        order = list(range(len(agents)))
        for k in order if i % 2 == 0 else order[::-1]:
            ms, missed, _err = kept_session(stand, agents[k])
            assert not missed, f"{agents[k].name}: its kept bundle was not used"
            spent[k].append(ms)
    out = {a.name: median(x) for a, x in zip(agents, spent, strict=True)}
    if len(agents) == 2:
        out["difference, per round"] = median([b - a for a, b in zip(*spent, strict=True)])
    return out


# Instrumentation of the kept loader (stage 0's, or the plain one): process-time marks at its
# phases, every module's load split into decode and exec, and the functions of KEPT_TIMED
# timed (inclusive) in whichever import of their module runs them (stage 0 going on as the
# worker imports the package afresh). The marks and figures are written to stderr by a
# wrapped os._exit, which ends every agent session.
KEPT_TIMED = (
    ("vpatch_agent.privsep", "_trusted_facts", "stage 0: the trusted interpreter's facts"),
    ("vpatch_agent.privsep", "trusted_problem", "stage 0: trusted_problem"),
    ("vpatch_agent.privsep", "env_facts", "stage 0: the environment's facts"),
    ("vpatch_agent.privsep", "decide", "stage 0/worker: decide"),
    ("vpatch_agent.privsep", "_same_interpreter", "stage 0: same interpreter?"),
    ("vpatch_agent.privsep", "_child_boot", "stage 0: the worker's loader"),
    ("vpatch_agent.privsep", "worker", "worker: start facts, decide, site.main"),
    ("vpatch_agent.closurefacts", "start_facts", "worker: start facts"),
    ("vpatch_agent", "answer", "requests (all, their imports included)"),
    ("vpatch_agent.facts", "op_inspect", "inspect (both)"),
    ("vpatch_agent.commit", "op_commit", "commit"),
    *((m, a, "  " + label) for m, a, label in TIMED if m != "os"),
    ("vpatch_agent.fsops", "compile_check", "  commit: compile check"),
    ("vpatch_agent.lease", "check_commit", "  commit: lease check"),
    ("vpatch_agent.commit", "_compact", "  commit: compaction check"),
)
_KEPT_PRE = """\
import time as _t
_pt=_t.process_time
T=[('interpreter start + loader compile',_pt())];ACC={};DEC={};EXE={}
import os as _os
T.append(('import os',_pt()))
_oe=_os._exit
def _end(c):
    T.append(('exit',_pt()))
    _os.write(2,('\\n@@'+repr({'T':T,'ACC':ACC,'DEC':DEC,'EXE':EXE})+'\\n').encode())
    _oe(c)
_os._exit=_end
_TW=%r
def _wrap(mod):
    for mn,attr,label in _TW:
        if mn!=mod.__name__: continue
        owner=mod;*path,name=attr.split('.')
        for p in path: owner=getattr(owner,p)
        f=getattr(owner,name)
        def w(*a,_f=f,_l=label,**k):
            s=_pt()
            try: return _f(*a,**k)
            finally: ACC[_l]=ACC.get(_l,0.0)+_pt()-s
        setattr(owner,name,w)
"""


def kept_instrumented(boot: str) -> str:
    """The kept loader `boot` with _KEPT_PRE's marks and wrappers."""
    edits = (
        ("import sys\n", "import sys\n" + _KEPT_PRE % (KEPT_TIMED,)),
        (
            "l=G()\n",
            "T.append(('loader defs',_pt()))\nl=G()\nT.append(('kept bundle: "
            "lookup, read, hash',_pt()))\n",
        ),
        (
            "try:\n    import _frozen_importlib as B",
            "T.append(('bundle: parse',_pt()))\ntry:\n    import _frozen_importlib as B",
        ),
        ("        n=mod.__name__;x=m.get(c+n)\n", "        _s=_pt();n=mod.__name__;x=m.get(c+n)\n"),
        (
            "        exec(x,mod.__dict__)\n",
            "        _e=_pt();DEC[n]=DEC.get(n,0)+_e-_s\n"
            "        exec(x,mod.__dict__)\n        EXE[n]=EXE.get(n,0)+_pt()-_e;_wrap(mod)\n",
        ),
        (
            "sys.meta_path.insert(0,F())\n",
            "sys.meta_path.insert(0,F())\nT.append(('importer',_pt()))\n",
        ),
    )
    for old, new in edits:
        assert boot.count(old) == 1, f"the kept loader changed ({old!r}): update bench/agentcpu.py"
        boot = boot.replace(old, new)
    return boot


def kept_breakdown(stand: Stand, agent: Agent, reps: int) -> list[tuple[str, float]]:
    """(part, ms) of the median-total instrumented kept session (`agent` started as is, its
    loader instrumented)."""
    boot = kept_instrumented(agent.argv[agent.argv.index("-c") + 1])
    runs = []
    for _ in range(max(3, reps // 5)):
        total, missed, err = kept_session(stand, agent, boot)
        assert not missed
        runs.append((total, ast.literal_eval(err.rsplit("\n@@", 1)[1])))
    runs.sort(key=lambda r: r[0])
    total, data = runs[len(runs) // 2]
    rows: list[tuple[str, float]] = []
    prev = 0.0
    for label, at in data["T"]:
        label = "stage 0, the worker, the requests" if label == "exit" else label
        rows.append((label, (at - prev) * 1000))
        prev = at
    rows.append(("exit (os._exit)", total - prev * 1000))
    rows += [(label, secs * 1000) for label, secs in data["ACC"].items()]
    dec, exe = data["DEC"], data["EXE"]
    rows.append((f"modules loaded ({len(dec)}): decode", sum(dec.values()) * 1000))
    for name in sorted(dec, key=lambda n: -dec[n]):
        rows.append((f"  {name}: decode", dec[name] * 1000))
        rows.append((f"  {name}: exec (its imports included)", exe[name] * 1000))
    rows.append(("instrumented session total", total))
    return rows


_NS = "VPATCH_AGENTCPU_NS"  # set in the bench's own mount namespace (main)


def _own_cache() -> None:
    """As root, in the mount namespace main re-executed into: an empty tmpfs (0700) on
    root's ~/.cache/vpatch, where the kept loaders keep the agent's bundle."""
    import pwd

    where = Path(pwd.getpwuid(0).pw_dir) / ".cache" / "vpatch"
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "mode=0700,size=64m", "vpatch-agentcpu", str(where)],
        check=True,
    )


def over_ssh(reps: int, against: str = "") -> dict[str, float]:
    """Mean host CPU ms per run on one real sshd host (bench/lab.py, bench/hostcpu.py):
    `ssh h true` (sshd alone: key exchange, authentication, the shell; with the lab's
    curve25519 and with OpenSSH's default post-quantum exchange), `ssh h sed -i` (the floor), a
    bare interpreter start, the agent's start (vpatch's remote command: the bundle, then EOF;
    and the SSH transports' command, which loads the bundle kept on the host) and `vpatch
    apply --level static` (and `against`'s, the tree at that directory), each from pip's
    bytes. Every row runs once a round, the order turned every round. Figures from one
    invocation compare; across invocations the load of the machine moves them all."""
    from bench import lab
    from bench.hostcpu import HostCpu
    from bench.run import SED
    from bench.timing import child_env
    from patcher.transports.ssh import remote_command

    with tempfile.TemporaryDirectory(prefix="vpatch-agentcpu-ssh-") as tmp:
        work = Path(tmp)
        stand = lab.start_standin(1, work)
        try:
            host, cfg = stand.hosts[0], str(stand.lab.ssh_config)
            cpu = HostCpu([stand.lab])
            spec = work / "a.toml"
            spec.write_text(SPEC_A)
            inv = lab.write_inventory(work / "hosts.toml", stand.hosts)
            floor = ["ssh", "-F", cfg, "-T", "-n", host.name, "--"]
            floor.append(f"sed -i {shlex.quote(SED)} {shlex.quote(stand.remote_target)}")
            apply = [sys.executable, "-m", "patcher.cli", "apply", str(spec), "--inventory"]
            apply += [str(inv), "--ssh-config", cfg, "--python", lab.PYTHON, "--level"]
            apply += ["static", "--json"]
            ssh = ["ssh", "-F", cfg, "-T", host.name, "--"]
            pq = ["ssh", "-F", cfg, "-o", "KexAlgorithms=sntrup761x25519-sha512@openssh.com"]
            bare = [*ssh, f"{lab.PYTHON} -I -c pass"]
            start = [*ssh, remote_command(lab.PYTHON)]
            kept = [*ssh, remote_command(lab.PYTHON, kept=True)]
            bundle = agent_bundle()
            # (name, argv, stdin, the warm-up's stdin, working directory)
            rows: list[tuple[str, list[str], bytes, bytes, str | None]] = [
                ("ssh h true (sshd alone)", [*ssh, "true"], b"", b"", None),
                (
                    "ssh h true, OpenSSH's default kex",
                    [*pq, "-T", host.name, "true"],
                    b"",
                    b"",
                    None,
                ),
                ("ssh h sed -i (floor)", floor, b"", b"", None),
                ("ssh h python -I -c pass", bare, b"", b"", None),
                ("agent start: bundle, EOF", start, bundle, bundle, None),
                # the bundle kept on the host (bundle.kept_boot): the warm-up's miss keeps it
                ("agent start: kept bundle, EOF", kept, b"", bundle, None),
                ("vpatch apply --level static", apply, b"", b"", None),
            ]
            if against:
                rows.append((f"vpatch apply --level static, {against}", apply, b"", b"", against))
            spent: dict[str, list[float]] = {row[0]: [] for row in rows}
            for i in range(reps + 1):  # the first is a warm-up (rewrite cache, .pyc, kept)
                for name, cmd, stdin, first, cwd in rows if i % 2 else rows[::-1]:
                    cache = work / ("cache" if cwd is None else "cache-against")
                    env = child_env({"VPATCH_CACHE_DIR": str(cache)})
                    stand.reset([host])
                    before = cpu.read()
                    given = stdin if i else first
                    subprocess.run(
                        cmd, env=env, check=True, capture_output=True, input=given, cwd=cwd
                    )
                    if i:
                        spent[name].append((cpu.read() - before) * 1000)
            # means: HostCpu counts 10 ms ticks
            return {name: sum(x) / len(x) for name, x in spent.items()}
        finally:
            stand.lab.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.agentcpu", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--reps", type=int, default=30, help="agent sessions to time (median)")
    ap.add_argument("--python", default="", help="an env's python with servekit installed")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument(
        "--ssh", type=int, default=0, metavar="N", help="also N runs over a real sshd host"
    )
    ap.add_argument(
        "--against",
        default="",
        metavar="DIR",
        help="also the agent of the source tree at DIR (its kept sessions, paired with ours)",
    )
    args = ap.parse_args(argv)
    if os.geteuid() == 0 and argv is None and os.environ.get(_NS) != "1":
        # root's own ~/.cache/vpatch stays as it is: the kept bundles go to a tmpfs of our own
        unshare = ["unshare", "--mount", "--propagation", "private", sys.executable, "-m"]
        env = dict(os.environ, **{_NS: "1"})
        try:
            os.execvpe("unshare", [*unshare, "bench.agentcpu", *sys.argv[1:]], env)
        except OSError as exc:
            sys.exit(f"bench.agentcpu: cannot make a mount namespace of its own: {exc}")
    if os.environ.get(_NS) == "1":
        _own_cache()
    root = os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="vpatch-agentcpu-") as tmp:
        stand = Stand(Path(tmp), args.python)
        py = str(stand.python)
        totals = [session(stand)[0] for _ in range(args.reps)]
        agents = [agent_of("", py, root)] + (
            [agent_of(args.against, py, root)] * bool(args.against)
        )
        plain = [agent_of("", py, False)] + (
            [agent_of(args.against, py, False)] * bool(args.against)
        )
        figures: dict[str, Any] = {
            "python": subprocess.run(
                [py, "-I", "-c", "import sys; print(sys.version.split()[0])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip(),
            "bundle_bytes": len(agent_bundle()),
            "python -I -c pass": bare(py, ["-I"], args.reps),
            "python -I -S -c pass": bare(py, ["-I", "-S"], args.reps),
            "static apply (inspect + commit)": median(totals),
            "as root, through stage 0": median(
                [session(stand, stage0=True)[0] for _ in range(args.reps)]
            )
            if root
            else 0.0,
            "min": min(totals),
            "kept, as root through stage 0 (SSH as root)" if root else "kept (SSH)": kept_paired(
                stand, agents, args.reps
            ),
            "kept, plain start (python -I)": kept_paired(stand, plain, args.reps) if root else {},
            "breakdown": breakdown(stand, args.reps),
            "kept breakdown": kept_breakdown(stand, agents[0], args.reps),
        }
    if args.ssh:
        figures["over ssh (host CPU ms, mean)"] = over_ssh(args.ssh, args.against)
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    print(f"agent host CPU, python {figures['python']}, bundle {figures['bundle_bytes']} bytes")
    for key in ("python -I -c pass", "python -I -S -c pass"):
        print(f"{key:<48}{figures[key]:8.1f} ms")
    total = figures["static apply (inspect + commit)"]
    print(f"{'static apply, one session (median)':<48}{total:8.1f} ms  (min {figures['min']:.1f})")
    if figures["as root, through stage 0"]:
        root_ms = figures["as root, through stage 0"]
        print(f"{'the same as root, through stage 0':<48}{root_ms:8.1f} ms")
    for key in (
        "kept, as root through stage 0 (SSH as root)",
        "kept (SSH)",
        "kept, plain start (python -I)",
    ):
        for name, ms in figures.get(key, {}).items():
            print(f"{key + ', ' + name:<72}{ms:8.2f} ms")
    for key in ("breakdown", "kept breakdown"):
        print(f"\n{key} (one instrumented session, ms of process CPU):")
        for label, ms in figures[key]:
            print(f"  {label:<64}{ms:7.2f}")
    for label, ms in figures.get("over ssh (host CPU ms, mean)", {}).items():
        print(f"over ssh, host CPU per run: {label:<56}{ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
