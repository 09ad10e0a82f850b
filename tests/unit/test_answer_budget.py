"""The fleet's answer memory is bounded, not per answer (issue 24): hosts each sending a line
just under base.MAX_ANSWER_BYTES at once made the controller hold all of them. Real agent
sessions (LocalTransport on fake interpreters), a budget scaled down so the test stays small."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from patcher.errors import AgentError
from patcher.transports import answers
from patcher.transports.pipe import LocalTransport

MIB = 1 << 20


def fake_host(tmp_path: Path, name: str, mib: int, go: Path) -> Path:
    """An "interpreter" that answers one JSON line of `mib` MiB, holding its last bytes back
    until `go` exists (so the answers are all in flight at once)."""
    script = tmp_path / f"{name}.py"
    script.write_text(
        "import os, sys, time\n"
        "w = sys.stdout.write\n"
        'w(\'{"ok": true, "pad": "\')\n'
        f"for _ in range({mib}):\n"
        "    w('x' * (1 << 20))\n"
        "sys.stdout.flush()\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.02)\n"
        "w('\"}\\n')\n"
        "sys.stdout.flush()\n"
        "sys.stdin.read()\n"
    )
    fake = tmp_path / name
    fake.write_text(f"#!/bin/sh\nexec python3 {script}\n")
    fake.chmod(0o755)
    return fake


def test_the_fleets_answers_in_flight_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = answers.Budget(limit=48 * MIB, small=4 * MIB)
    go = tmp_path / "go"
    got: dict[str, object] = {}

    def call(name: str, mib: int, wait: Path = go) -> None:
        t = LocalTransport(str(fake_host(tmp_path, name, mib, wait)))
        t.budget = budget  # one run's: what open_transport sets from Settings.budget
        try:
            got[name] = len(t.call({"op": "inspect"}, timeout=120)["pad"])
        except AgentError as exc:
            got[name] = exc
        finally:
            t.close()

    big = [threading.Thread(target=call, args=(f"big{i}", 20)) for i in range(4)]
    for th in big:
        th.start()
    deadline = time.monotonic() + 60
    while sum(isinstance(v, AgentError) for v in got.values()) < 2:
        assert time.monotonic() < deadline, got
        time.sleep(0.05)
    call("small", 0, tmp_path)  # while the big ones hold the budget: a small one gets through
    assert got["small"] == 0, got
    go.touch()
    for th in big:
        th.join(120)
    refused = [v for v in got.values() if isinstance(v, AgentError)]
    assert 2 <= len(refused) <= 4
    assert all("the fleet's answers in flight" in e.message for e in refused)
    assert all(v == 20 * MIB for v in got.values() if not isinstance(v, AgentError) and v)
    assert budget.peak <= budget.limit + 4 * budget.small
    assert budget.total == 0  # every call gave its bytes back, refused or not
