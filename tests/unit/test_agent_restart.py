"""The agent's `restart` and `health` ops (patcher/agent/restart.py), through `handle`, with
real `sh -c` processes and a real HTTP server on loopback."""

from __future__ import annotations

import http.server
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from patcher.agent import handle, protocol, relay
from patcher.commands import build_parser
from tests.conftest import REPO


def test_restart_reports_exit_and_output_tails(tmp_path: Path) -> None:
    ok = handle(protocol.restart_request(f"echo hi; touch {tmp_path}/ran", 30))
    assert ok["ok"] and ok["exit"] == 0 and ok["stdout"] == "hi\n" and not ok["timed_out"]
    assert (tmp_path / "ran").exists()
    bad = handle(protocol.restart_request("echo 'ERROR (spawn error)' >&2; exit 7", 30))
    assert bad["ok"] and bad["exit"] == 7 and "spawn error" in bad["stderr"]


def test_restart_runs_as_the_agents_own_login_user_and_the_words_say_so() -> None:
    """An agent that does not drop runs the restart as itself: the SSH login user (root under
    --sudo); one that drops has its root side answer it (relay.OPERATOR_OPS). `rollout --help`
    and docs/rollout.md call that the operator, the SSH login user, and say it the same way."""
    got = handle(protocol.restart_request("id -u", 30))
    assert got["ok"] and got["stdout"] == f"{os.getuid()}\n", got
    assert "restart" in relay.OPERATOR_OPS
    parser = build_parser(["rollout"])
    sub = next(a for a in parser._actions if a.dest == "command").choices["rollout"]  # type: ignore[attr-defined]
    [restart] = [a for a in sub._actions if "--restart" in a.option_strings]
    row = next(
        ln
        for ln in (REPO / "docs/rollout.md").read_text().splitlines()
        if ln.startswith("| `restart` |")
    )
    for words in (restart.help or "", row):
        assert "as the operator" in words and "the SSH login user" in words, words
        assert "agent's user" not in words, words


def test_restart_that_leaves_a_daemon_holding_its_output_still_returns(tmp_path: Path) -> None:
    """`systemctl`-like commands may leave a process behind that inherited stdout: the answer
    must not wait for it (the output goes to files, not pipes)."""
    started = time.monotonic()
    res = handle(protocol.restart_request(f"sleep 30 & echo $! > {tmp_path}/pid; echo up", 30))
    try:
        assert res["exit"] == 0 and res["stdout"] == "up\n"
        assert time.monotonic() - started < 10
    finally:
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)


def test_restart_past_its_timeout_is_killed_with_its_group(tmp_path: Path) -> None:
    res = handle(protocol.restart_request(f"sh -c 'sleep 60; touch {tmp_path}/late' & wait", 1))
    assert res["ok"] and res["timed_out"] and res["exit"] is None
    time.sleep(0.2)
    assert not (tmp_path / "late").exists()


def test_restart_without_a_command_is_refused_as_input() -> None:
    res = handle({"op": protocol.RESTART, "command": "  ", "timeout": 5})
    assert not res["ok"] and res["kind"] == protocol.INPUT


class _Health(http.server.BaseHTTPRequestHandler):
    ready_at = 0.0

    def do_GET(self) -> None:
        up = time.monotonic() >= type(self).ready_at
        self.send_response(200 if up else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("H", (_Health,), {})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/health", handler
    finally:
        srv.shutdown()
        srv.server_close()


def test_health_polls_until_200(server: tuple[str, type[_Health]]) -> None:
    url, handler = server
    handler.ready_at = time.monotonic() + 0.6
    res = handle(protocol.health_request(url, 10, interval=0.1))
    assert res["ok"] and res["healthy"] and res["status"] == 200 and res["tries"] > 1


def test_health_gives_up_after_wait_with_the_last_answer(server: tuple[str, type[_Health]]) -> None:
    url, handler = server
    handler.ready_at = time.monotonic() + 3600
    res = handle(protocol.health_request(url, 0.5, interval=0.1))
    assert res["ok"] and not res["healthy"] and res["error"] == "HTTP 503 Service Unavailable"
    assert 0.4 <= res["seconds"] < 3


def test_health_of_a_closed_port_and_a_bad_scheme() -> None:
    res = handle(protocol.health_request("http://127.0.0.1:9/health", 0.3, interval=0.1))
    assert res["ok"] and not res["healthy"] and "connection failed" in res["error"]
    bad = handle(protocol.health_request("file:///etc/passwd", 1))
    assert not bad["ok"] and bad["kind"] == protocol.INPUT
