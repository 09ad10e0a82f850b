"""Host CPU of the agent for one static apply, and where it goes.

    python -m bench.agentcpu             # 30 sessions, the hosts' interpreter
    python -m bench.agentcpu --reps 10 --python /usr/bin/python3.12

A stand-in venv (tests/standin.py) is patched once with `vpatch apply --level static` through
the local transport, recording the requests the engine sends (inspect, commit). Then each
session replays them on a fresh copy of pip's bytes: one agent process exactly as the
transports start it (`python -I -c BOOT`, bundle line, request lines, EOF), its CPU read from
wait4's rusage (user + sys, the whole process from exec to exit). What sshd adds on a real host
(key exchange, the shell, the channel) is not in these figures: bench/run.py's `hosts CPU`
column has it.

The breakdown comes from one more session in which BOOT is wrapped with process-time marks and
the agent's functions with timers (instrumentation cost is excluded from the parts, not from
that session's total). Parts nest: `locate.distribution` includes its hashing, `commit` every
commit step.
"""

from __future__ import annotations

import argparse
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
from patcher.transports import pipe as transport
from patcher.transports.bundle import BOOT, TRUSTED_PYTHON, agent_argv, agent_bundle, request_line
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
    real = transport.LocalTransport.call

    def call(
        self: transport.LocalTransport, req: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        sent.append(req)
        return real(self, req, timeout)

    transport.LocalTransport.call = call  # type: ignore[method-assign]
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
        transport.LocalTransport.call = real  # type: ignore[method-assign]
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


def over_ssh(reps: int) -> dict[str, float]:
    """Mean host CPU ms per run on one real sshd host (bench/lab.py, bench/hostcpu.py):
    `ssh h true` (sshd alone: key exchange, authentication, the shell), `ssh h sed -i` (the
    floor), a bare interpreter start, the agent's start (vpatch's remote command: the bundle,
    then EOF; and the SSH transports' command, which loads the bundle kept on the host) and
    `vpatch apply --level static`, each from pip's bytes. Figures from one
    invocation compare; across invocations the load of the machine moves them all."""
    from bench import lab as labs
    from bench.hostcpu import HostCpu
    from bench.run import SED
    from bench.timing import child_env
    from patcher.transports.ssh import remote_command

    with tempfile.TemporaryDirectory(prefix="vpatch-agentcpu-ssh-") as tmp:
        work = Path(tmp)
        stand = labs.start_standin(1, work)
        try:
            host, cfg = stand.hosts[0], str(stand.lab.ssh_config)
            cpu = HostCpu([stand.lab])
            spec = work / "a.toml"
            spec.write_text(SPEC_A)
            inv = labs.write_inventory(work / "hosts.toml", stand.hosts)
            floor = ["ssh", "-F", cfg, "-T", "-n", host.name, "--"]
            floor.append(f"sed -i {shlex.quote(SED)} {shlex.quote(stand.remote_target)}")
            apply = [sys.executable, "-m", "patcher.cli", "apply", str(spec), "--inventory"]
            apply += [str(inv), "--ssh-config", cfg, "--python", labs.PYTHON, "--level"]
            apply += ["static", "--json"]
            env = child_env({"VPATCH_CACHE_DIR": str(work / "cache")})
            out: dict[str, float] = {}
            ssh = ["ssh", "-F", cfg, "-T", host.name, "--"]
            bare = [*ssh, f"{labs.PYTHON} -I -c pass"]
            start = [*ssh, remote_command(labs.PYTHON)]
            kept = [*ssh, remote_command(labs.PYTHON, kept=True)]
            bundle = agent_bundle()
            for name, cmd, stdin, first in (
                ("ssh h true (sshd alone)", [*ssh, "true"], b"", b""),
                ("ssh h sed -i (floor)", floor, b"", b""),
                ("ssh h python -I -c pass", bare, b"", b""),
                ("agent start: bundle, EOF", start, bundle, bundle),
                # the bundle kept on the host (bundle.kept_boot): the warm-up's miss keeps it
                ("agent start: kept bundle, EOF", kept, b"", bundle),
                ("vpatch apply --level static", apply, b"", b""),
            ):
                spent = []
                for i in range(reps + 1):  # the first is a warm-up (rewrite cache, .pyc)
                    stand.reset([host])
                    before = cpu.read()
                    given = stdin if i else first
                    subprocess.run(cmd, env=env, check=True, capture_output=True, input=given)
                    if i:
                        spent.append((cpu.read() - before) * 1000)
                out[name] = sum(spent) / len(spent)  # a mean: HostCpu counts 10 ms ticks
            return out
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
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vpatch-agentcpu-") as tmp:
        stand = Stand(Path(tmp), args.python)
        py = str(stand.python)
        totals = [session(stand)[0] for _ in range(args.reps)]
        figures = {
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
            if os.geteuid() == 0
            else 0.0,
            "min": min(totals),
            "breakdown": breakdown(stand, args.reps),
        }
    if args.ssh:
        figures["over ssh (host CPU ms, median)"] = over_ssh(args.ssh)
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    print(f"agent host CPU, python {figures['python']}, bundle {figures['bundle_bytes']} bytes")
    for key in ("python -I -c pass", "python -I -S -c pass"):
        print(f"{key:<48}{figures[key]:8.1f} ms")
    total = figures["static apply (inspect + commit)"]
    print(f"{'static apply, one session (median)':<48}{total:8.1f} ms  (min {figures['min']:.1f})")
    if figures["as root, through stage 0"]:
        root = figures["as root, through stage 0"]
        print(f"{'the same as root, through stage 0':<48}{root:8.1f} ms")
    print("\nbreakdown (one instrumented session, ms of process CPU):")
    for label, ms in figures["breakdown"]:
        print(f"  {label:<58}{ms:7.2f}")
    for label, ms in figures.get("over ssh (host CPU ms, median)", {}).items():
        print(f"over ssh, host CPU per run: {label:<32}{ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
