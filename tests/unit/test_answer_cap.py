"""One host's answer is bounded per answer, not only fleet-wide (issue 37): a fake agent (a
real subprocess behind LocalTransport) that answers one well-formed JSON line of 100 MiB, under
the old 256 MiB line cap, was read whole and decoded (~4x its size in controller memory); now
the read stops past base.MAX_ANSWER_BYTES (64 MiB) with a clear error for that host, and the
bytes it held never went past the cap and one read."""

from __future__ import annotations

from pathlib import Path

import pytest

from patcher.errors import AgentError
from patcher.transports import answers, base
from patcher.transports.bundle import decode_answer
from patcher.transports.pipe import LocalTransport

MIB = 1 << 20


def flooding_agent(tmp_path: Path, mib: int) -> Path:
    script = tmp_path / "flood.py"
    script.write_text(
        "import sys\n"
        "w = sys.stdout.buffer.write\n"
        'w(b\'{"ok": true, "pad": "\')\n'
        f"for _ in range({mib}):\n"
        "    w(b'x' * (1 << 20))\n"
        "w(b'\"}\\n')\n"
        "sys.stdout.flush()\n"
        "sys.stdin.buffer.read()\n"
    )
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexec python3 {script}\n")
    fake.chmod(0o755)
    return fake


def test_one_flooding_host_is_refused_at_the_per_answer_cap(tmp_path: Path) -> None:
    t = LocalTransport(str(flooding_agent(tmp_path, 100)), target="flood-01")
    budget = t.budget = answers.Budget()
    try:
        with pytest.raises(AgentError) as exc:
            t.call({"op": "inspect"}, timeout=120)
    finally:
        t.close()
    assert exc.value.message == "flood-01: agent answer is larger than 64 MiB; refused"
    assert exc.value.hint
    assert base.MAX_ANSWER_BYTES < budget.peak <= base.MAX_ANSWER_BYTES + 4 * MIB
    assert budget.total == 0  # released when the call ended


def test_an_answer_handed_over_whole_is_refused_before_decoding() -> None:
    """Ray's transport gets the node's whole stdout: the cap holds there too."""
    big = b'{"pad": "' + b"x" * (base.MAX_ANSWER_BYTES) + b'"}'
    with pytest.raises(AgentError, match="larger than 64 MiB"):
        decode_answer("node-01", big, b"", 0)
    assert decode_answer("node-01", b'{"ok": true}', b"", 0) == {"ok": True}
