"""Restart the serving process and wait for it to be healthy, on the host (`vpatch rollout`).

Both run where the server runs, for the reason `fetch` does: `systemctl restart vllm` acts on
the host's own service manager, and `http://localhost:8000/health` means the host's server.

restart  `sh -c COMMAND` as the operator: the SSH login user (root under --sudo: the agent
         itself runs through sudo), never the environment's owner a root agent's worker drops
         to (relay.py answers it from the root side above that worker). Its own process
         group, stdin from /dev/null and its output into temporary files, never the agent's
         pipes: a command that leaves a daemon behind holding them
         would otherwise keep the answer from ever being read. Past `timeout` the whole group
         is killed. Only the tail of the output comes back (it is the host's text).
health   GET the URL until it answers 200 or `wait` seconds passed, `interval` apart. Each
         call waits a bounded time; the controller calls again until its own deadline, so a
         model that loads for 15 minutes never meets the per-call timeout.
rollout_step  append one step entry (protocol.step_entry) to the environment's journal, under
         its lock, stamped with the host's clock: where this host's rollout got to, for
         `vpatch rollout --resume` and `vpatch status`. Its shape is checked here first
         (journal._step_error), as it is again when the controller reads it back. The step
         that ends the walk carries "release": the rollout's lease is given up in the same
         locked step (agent/lease.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TAIL = 2000  # characters of each stream that come back


def run(req: dict[str, Any]) -> dict[str, Any]:
    """{"exit": code or None, "timed_out", "stdout", "stderr", "seconds"}."""
    command = req.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ValueError("restart: no command")
    timeout = float(req.get("timeout", 600))
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            cwd="/",
        )
        timed_out = False
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            code = None
        return {
            "exit": code,
            "timed_out": timed_out,
            "stdout": _tail(out),
            "stderr": _tail(err),
            "seconds": round(time.monotonic() - started, 3),
        }


def _tail(fh: Any) -> str:
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    fh.seek(max(0, size - TAIL * 4))
    data: bytes = fh.read()
    return data.decode("utf-8", "replace")[-TAIL:]


def health(req: dict[str, Any]) -> dict[str, Any]:
    """{"healthy", "status", "error" (the last try's), "tries", "seconds"}."""
    from . import fetch

    url = str(req.get("url", ""))
    fetch.check_url(url)  # BadURL: refused as input, before any request
    wait = max(0.0, float(req.get("wait", 60)))
    interval = max(0.05, float(req.get("interval", 1)))
    per_try = max(0.5, float(req.get("request_timeout", 5)))
    started = time.monotonic()
    deadline = started + wait
    tries = 0
    last: dict[str, Any] = {}
    while True:
        tries += 1
        last = fetch.fetch(url, min(per_try, max(0.5, deadline - time.monotonic())), 1 << 16)
        if last.get("status") == 200 and "error" not in last:
            break
        if time.monotonic() + interval > deadline:
            break
        time.sleep(interval)
    return {
        "healthy": last.get("status") == 200 and "error" not in last,
        "status": last.get("status"),
        "error": last.get("error"),
        "tries": tries,
        "seconds": round(time.monotonic() - started, 3),
    }


def record(req: dict[str, Any]) -> dict[str, Any]:
    """{} once the step entry is in the journal (appended and fsync'ed under the lock)."""
    from . import journal, lock, statedir
    from .commit import _adopt_state, _append, _ensure_state_dir
    from .facts import state_dir

    entry = req.get("entry")
    why = journal._step_error(entry) if journal.is_step(entry) else "not a rollout step entry"
    if why:
        raise ValueError("rollout_step: %s" % why)
    assert isinstance(entry, dict)
    entry = dict(entry, ts=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    state = _ensure_state_dir(state_dir(req))
    try:
        opener = lambda: state.open_file(statedir.LOCK, os.O_RDWR, create=True)  # noqa: E731
        with lock.Locked(state.sub(statedir.LOCK), 60.0, opener):
            from . import seen  # the host as this step left it, for --resume to compare
            from .facts import _journal_state

            server = seen.server_now() if entry["step"] in seen.SERVER_STEPS else None
            fold = _journal_state(state.path, {})[0]
            entry["seen"] = seen.snapshot(fold, list(entry["specs"]), server)
            _append(state, [entry])
            if req.get("release") is not None:  # the walk's last step: its lease goes with it
                from . import lease, leasing

                try:
                    held = lease.read(state)
                except statedir.StateError:  # not one vpatch wrote: left for a person
                    held = None
                if leasing.releases(held, req["release"]):
                    lease.remove(state)
    finally:
        _adopt_state(state)
        state.close()
    return {}


OPS = {"restart": run, "health": health, "rollout_step": record}
