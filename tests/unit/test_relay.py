"""The root side's request relay (patcher/agent/relay.py): every line the controller sends
reaches the worker byte for byte, but the operator's own ops, which are answered here."""

from __future__ import annotations

import json
import os
import tempfile

from patcher.agent import relay


def test_lines_pass_through_and_operator_ops_are_answered_here() -> None:
    big = b'{"op": "commit", "text": "' + b"x" * 300_000 + b'"}'
    op = b'{"op": "fetch", "url": "ftp://127.0.0.1/x"}'  # refused as input: no traffic
    stream = b"".join(
        [b'{"op": "inspect"}\n', big, b"\n", op, b"\n", b"\n", b'{"op": "then", "then": 1}']
    )
    with tempfile.TemporaryFile() as worker, tempfile.TemporaryFile() as out:
        lines = relay._Lines(worker.fileno(), out.fileno())
        for i in range(0, len(stream), 7_777):  # chunks that cut lines anywhere
            lines.feed(stream[i : i + 7_777])
        lines.feed(b"")  # EOF: the last line, without its newline, goes as it is
        worker.seek(0)
        out.seek(0)
        passed, answered = worker.read(), out.read()
    assert passed == stream.replace(op + b"\n", b"")
    (answer,) = [json.loads(x) for x in answered.splitlines()]
    assert answer["ok"] is False and answer["kind"] == "input", answer
    assert answer["uid"] == os.geteuid()


def test_only_small_lines_of_an_operator_op_are_the_operators() -> None:
    assert relay.operator_line(b'{"op": "restart", "command": "id"}') == {
        "op": "restart",
        "command": "id",
    }
    for line in (
        b'{"op": "commit"}',
        b'{"op": "restart", "command": "id", "then": {"op": "commit"}}',  # a chain: the worker's
        b"not json",
        b'{"op": "restart", "pad": "' + b"x" * 70_000 + b'"}',
    ):
        assert relay.operator_line(line) is None
