"""The on-host agent: stdlib only, Python 3.9+, JSON requests on stdin, JSON answers on stdout.

It is shipped as source over the transport (see `patcher.transports.bundle.agent_bundle`) and run as
`python -I -c BOOT`, so the host needs nothing installed but Python. After the bundle line, each
stdin line is one request and gets exactly one answer line; EOF ends the process. A transport
keeps one such process per host for a whole run (an "agent session"); a one-shot caller (Ray,
Ansible) sends the bundle line, one request (no newline needed) and EOF. Ops, each in its room:
    inspect  package versions, target files (bytes, sha256, RECORD hash), journal state and,
             for verify, the procs answer for the files of the given spec ids (facts.py)
    commit   under the lock: re-check hashes, back up, write atomically, refresh .pyc, journal
             (commit.py)
    repair   under the lock: settle a transaction a crash cut short (commit.py)
    verify   import checks and probes in fresh interpreters (probe.py)
    procs    processes of this environment that hold the given files as they were before they
             last changed (procs.py reads /proc, holders.py decides)
    fetch    GET an http(s) URL from the host (the live serving metrics probe; fetch.py)
    scan     files of a distribution that are not as its RECORD says (`vpatch diff`; scan.py)
    restart  run the restart command; health: poll a URL until 200 (`vpatch rollout`; restart.py)
    rollout_lease  take, beat or park the environment's rollout lease (lease.py)
Every answer is {"ok": true, ...} or {"ok": false, "error": str, "kind": str}, with the agent's
"pid" (so a caller can tell sessions apart). This module only dispatches: an op's module is
imported when a request asks for it, so a host pays for the code of the ops it is asked.

Nothing a request sets may outlive it: `handle` re-arms the test fault point from each request
(or disarms it) and drops importlib.metadata's directory caches (a pip install between two
requests must be seen); every other module keeps no state between calls (locate reads
dist-info afresh, locks and temp files are closed by the op that opened them).
"""

from __future__ import annotations

import os
import sys

# Only what every op needs is imported here; each op imports the rest itself. The agent is a
# fresh interpreter per host and run (one-shot callers: per call), so its imports are paid that
# often (the lazy layout halved an inspect call's CPU; see bench/).
from . import faults, fsops, protocol, wire

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROTOCOL = protocol.PROTOCOL


def op_inspect(req: dict[str, Any]) -> dict[str, Any]:
    from . import facts

    return facts.op_inspect(req)


def op_procs(req: dict[str, Any]) -> dict[str, Any]:
    from . import facts

    return facts.op_procs(req)


def op_commit(req: dict[str, Any]) -> dict[str, Any]:
    from . import commit

    return dict(commit.op_commit(req))


def op_repair(req: dict[str, Any]) -> dict[str, Any]:
    from . import commit

    return commit.op_repair(req)


def op_verify(req: dict[str, Any]) -> dict[str, Any]:
    from . import probe

    checks = probe.run(req.get("checks") or [])
    out: dict[str, Any] = {"checks": checks}
    if isinstance(req.get("record"), dict) and all(c.get("ok") for c in checks):
        from . import verified  # the write these checks follow is journaled as verified

        try:
            verified.record(req["record"])
        except (OSError, protocol.Refused) as exc:  # the answer stands; the entry stays pending
            out["record_error"] = str(exc)
    return out


def op_fetch(req: dict[str, Any]) -> dict[str, Any]:
    from . import fetch

    try:
        return fetch.fetch(
            str(req.get("url", "")),
            float(req.get("timeout", 10)),
            int(req.get("max_bytes", fetch.DEFAULT_MAX_BYTES)),
        )
    except fetch.BadURL as exc:
        raise protocol.Refused(str(exc), protocol.INPUT) from None


def op_restart(req: dict[str, Any]) -> dict[str, Any]:
    from . import restart  # `vpatch rollout`: restart the server, wait for health (restart.py)

    try:
        return restart.OPS[str(req.get("op"))](req)
    except ValueError as exc:  # fetch.BadURL too
        raise protocol.Refused(str(exc), protocol.INPUT) from None


def op_lease(req: dict[str, Any]) -> dict[str, Any]:
    from . import lease  # `vpatch rollout`: one rollout per environment at a time (lease.py)

    return lease.op_lease(req)


def op_scan(req: dict[str, Any]) -> dict[str, Any]:
    from . import baked, facts, locate, scan  # `vpatch diff`: files that differ from RECORD

    out = scan.scan(req, facts.state_dir(req))
    dist = locate.distribution(str(req.get("package") or "")) if out.get("version") else None
    source = locate.editable(dist) if dist is not None else None
    if source is not None:  # its code is not RECORD's files: "every file is pip's" would lie
        out["editable"] = source
    if dist is not None and "vpatch" in dist.version.partition("+")[2].split("."):
        # a wheel `vpatch wheel` built: RECORD is its own, so "every file is pip's" would lie
        found = [d for d in baked.find([]) if d["version"] == dist.version]
        out["baked"] = [
            str(s.get("id"))
            for d in found
            for s in d["manifest"].get("specs") or []
            if isinstance(s, dict)
        ]
    return out


def op_wheel_members(req: dict[str, Any]) -> dict[str, Any]:
    from . import hostwheel  # `--host-wheel`: pip's bytes from a wheel file on the host

    return hostwheel.read(str(req.get("path") or ""), [str(r) for r in req.get("files") or []])


OPS = {
    "inspect": op_inspect,
    "scan": op_scan,
    "commit": op_commit,
    "repair": op_repair,
    "verify": op_verify,
    "procs": op_procs,
    "fetch": op_fetch,
    "wheel_members": op_wheel_members,
    protocol.RESTART: op_restart,
    protocol.HEALTH: op_restart,
    protocol.STEP: op_restart,
    protocol.LEASE: op_lease,
}


def handle(req: dict[str, Any]) -> dict[str, Any]:
    _fresh_request(req)
    op = OPS.get(req.get("op", ""))
    if op is None:
        return protocol.error(protocol.PROTOCOL_ERROR, "unknown op %r" % req.get("op"))
    try:
        out = op(req)
    except protocol.Refused as exc:  # statedir.StateError too
        return protocol.error(exc.kind, str(exc))
    except TimeoutError as exc:
        return protocol.error(protocol.LOCKED, str(exc))
    except OSError as exc:
        where = " (%s)" % exc.filename if exc.filename else ""
        return protocol.error(protocol.OS_ERROR, "%s%s" % (exc.strerror or exc, where))
    out["ok"] = True
    out["protocol"] = PROTOCOL
    if "then_if" in req or "then" in req:
        from . import chain  # requests that ride in the same exchange (agent/chain.py)

        chain.run(req, out, handle)
    return out


def _fresh_request(req: dict[str, Any]) -> None:
    """Forget what an earlier request of this session set: its fault point, the code objects
    compile_check kept for the .pyc, and what importlib.metadata cached about sys.path (3.10+
    caches directory listings by mtime)."""
    faults.arm(str(req.get("fault") or faults.ENV_SPEC))
    del faults.REACHED[:]
    fsops._COMPILED.clear()
    meta = sys.modules.get("importlib.metadata")  # never imported just for this
    finder = getattr(meta, "MetadataPathFinder", None)
    clear = getattr(finder, "invalidate_caches", None)
    if clear is not None and getattr(clear, "__self__", None) is finder:  # a classmethod: 3.10+
        clear()


def answer(line: str) -> dict[str, Any]:
    """The answer to one request line (a bad line is answered, never fatal)."""
    try:
        req = wire.loads(line)
    except ValueError as exc:
        res: dict[str, Any] = protocol.error(protocol.PROTOCOL_ERROR, "bad request: %s" % exc)
    else:
        if _REFUSED:
            from . import privsep

            res = protocol.error(privsep.KIND, _REFUSED)
        elif isinstance(req, dict):
            res = handle(req)
            if protocol.LAST in req or "then_if" in req or "then" in req:
                from . import chain  # the caller sends nothing more: end here? (chain.ends)

                if chain.ends(req, res):
                    res[protocol.ENDED] = True
        else:
            res = protocol.error(protocol.PROTOCOL_ERROR, "bad request: not a JSON object")
    res["pid"] = os.getpid()
    res["uid"] = os.geteuid()  # who did the work (privsep: the env's owner, dropped from root)
    if _DROPPED_FROM is not None:
        res["dropped_from"] = _DROPPED_FROM
    return res


_DROPPED_FROM: int | None = None  # root's uid when this worker dropped from it (privsep)
_REFUSED = ""  # why the worker does not go on (privsep); every request gets it


def _done() -> None:
    """EOF: the session is over. Run by BOOT (module name `vpatch_agent`), the process ends
    here without the interpreter's finalization (freeing every module and object: ~3 ms of
    host CPU per agent): every op has closed its files and reaped its processes before
    answering, and the answers are flushed. Imported in-process (`patcher.agent`), it returns."""
    if __name__ == "vpatch_agent":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _settle() -> None:
    global _DROPPED_FROM, _REFUSED
    from . import privsep

    privsep.worker(sys.argv[1:])
    _DROPPED_FROM = privsep.STATE.get("dropped_from")
    _REFUSED = privsep.STATE.get("refused") or ""


def _run_as_only(name: str) -> None:
    global _REFUSED
    from . import privsep

    _REFUSED = privsep.run_as_refusal(name)


# The agent process's first collector threshold (CPython's default is 700 allocations).
GC_THRESHOLD = 10000


def _collect_less() -> None:
    """The agent process's garbage collector at a first threshold of GC_THRESHOLD allocations:
    a session allocates some tens of thousands of objects that live as long as it does (every
    module's functions, classes and dicts, the `ast` classes of the compile check), and at
    the default a second-generation pass over all of them fell in every first commit, ~1 ms
    of host CPU per session (`bench.agentcpu`). Cyclic garbage is still collected, after more
    allocations; every op closes its files and reaps its processes itself. Only in the agent
    process (BOOT's module `vpatch_agent`): imported in-process, the collector is its host's."""
    if __name__ == "vpatch_agent":
        import gc

        gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


def main() -> None:
    """Answer each request line on stdin with one JSON line on stdout, until EOF, or until
    an answer that ends the session (protocol.LAST: the caller said it sends nothing more).

    The last request may lack its newline (one-shot callers send the bundle line, a request,
    EOF).
    Blank lines are ignored. If the caller is gone (stdout broken), the agent just exits: the
    request it was answering is complete on disk either way.

    Started by privsep's stage 0 (argv `privsep`), it first settles who it works as."""
    _collect_less()
    if sys.argv[1:2] == ["privsep"]:
        _settle()
    elif sys.argv[1:2] == ["run-as"]:  # --run-as without root: only as who it is already
        _run_as_only(sys.argv[2] if len(sys.argv) > 2 else "")
    while True:
        line = sys.stdin.readline()
        if not line:
            _done()
            return
        if not line.strip():
            continue
        res = answer(line)
        try:
            sys.stdout.write(wire.dumps(res) + "\n")
            sys.stdout.flush()
            if res.get(protocol.ENDED):  # the caller sends nothing more (protocol.LAST)
                _done()
                return
        except BrokenPipeError:
            # Python would complain again at exit while flushing stdout: point it at /dev/null.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)
