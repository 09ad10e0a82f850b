"""A rollout you can watch, on the rollout lab (tests/support/rolloutlab.py: real sshd hosts,
real vLLM 0.16.0 files, real supervisord, load on every host): the live view typed through
tmux shows the host in its restart and in its window with the evidence so far, while it is
there; `vpatch rollout watch REPORT` in a second tmux pane shows the same; `--events -` piped
is JSON lines, one per event, ahead of the table, and stderr's plain lines say the phases.

Facts only: which phases were on screen while the rollout was in them (the restart is held
on a go file, so "while" is provable), never how long anything took."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, vpatch
from tests.support import rolloutlab, tmuxcap

pytestmark = pytest.mark.vllm
BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
# Full windows (no early end at --min-drafts): the window is on screen for seconds.
GATES = ["--window", "6", "--min-drafts", "0", "--min-acceptance", "0.4"]
CLI = [sys.executable, "-m", "patcher.cli"]
RESTART = re.compile(r"^\s+h\d\s+restart\s+\d+:\d\d of 10:00\s*$", re.M)
WINDOW = re.compile(r"^\s+h\d\s+window\s+\d+:\d\d of 0:06\s+so far (pass|fail|undecided)", re.M)
DONE = re.compile(r"^rollout [0-9a-f]{12}: 1 of 1 host\(s\) done, ok$", re.M)


@pytest.fixture(scope="module")
def lab2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rolloutlab.RolloutLab]:
    lab = rolloutlab.start(2, tmp_path_factory.mktemp("watchlab"))
    try:
        yield lab
    finally:
        lab.close()


def _argv(lab: rolloutlab.RolloutLab, inv: Path, report: Path, *more: str) -> list[str]:
    where = ["--inventory", str(inv), "--ssh-config", str(lab.ssh.ssh_config)]
    argv = [*CLI, "rollout", str(BACKPORT), *where, "--level", "static", *GATES, *more]
    return [*argv, "--report", str(report)]


def _until(what: Path, limit: float = 180) -> None:
    deadline = time.monotonic() + limit
    while not what.exists():
        assert time.monotonic() < deadline, f"{what} never appeared"
        time.sleep(0.1)


def test_the_live_view_and_watch_show_the_restart_and_the_window_in_tmux(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    lab = lab2.part(0, 1)
    began, go, held = lab.held_restart(0)
    inv = lab.inventory(tmp_path / "hosts.toml", h1=held)
    report = tmp_path / "r.json"
    (tmp_path / "run").mkdir()
    (tmp_path / "watch").mkdir()
    pane = tmuxcap.start(_argv(lab, inv, report), tmp_path / "run", REPO)
    watcher = None
    try:
        _until(began)  # the host is in its restart step, held there until `go`
        in_restart = pane.watch(lambda s: RESTART.search(s) is not None, limit=60)
        watcher = tmuxcap.start([*CLI, "rollout", "watch", str(report)], tmp_path / "watch", REPO)
        watched_restart = watcher.watch(lambda s: RESTART.search(s) is not None, limit=60)
        go.touch()
        in_window = pane.watch(lambda s: WINDOW.search(s) is not None, limit=120)
        watched_window = watcher.watch(lambda s: WINDOW.search(s) is not None, limit=120)
        code = pane.wait(180)
        watched = watcher.wait(60)
        last = watcher.history()
    finally:
        pane.close()
        if watcher is not None:
            watcher.close()
    shown = "\n----\n".join(s for _t, s in pane.screens[-3:])
    assert code == 0, shown
    assert in_restart is not None, f"no restart row while the restart ran\n{shown}"
    assert in_window is not None, f"no window row with its evidence while it ran\n{shown}"
    assert watched_restart is not None and watched_window is not None, watcher.screens[-1][1]
    # The live view was transient: the rollout's final table, as today, is what stays.
    final = pane.screens[-1][1]
    assert re.search(r"^h1\s+gates\s+.*\s+kept$", final, re.M), final
    assert "rollout: ok (1 host(s) patched, restarted and checked)" in final
    assert not RESTART.search(final) and not WINDOW.search(final)
    # The watcher ends with the run and keeps its last view: the host kept, the run ok.
    assert watched == 0
    assert DONE.search(last) and re.search(r"^\s+h1\s+kept\s*$", last, re.M), last
    phases = {
        p for _t, s in pane.screens for p in re.findall(r"^\s+h1\s+([a-z_]+)\s+\d+:\d\d", s, re.M)
    }
    assert {"restart", "window"} <= phases, phases


def test_events_to_stdout_are_json_lines_ahead_of_the_table(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    lab = lab2.part(1, 1)
    inv = lab.inventory(tmp_path / "hosts.toml")
    report = tmp_path / "r.json"
    res = vpatch(*_argv(lab, inv, report, "--events", "-")[3:])
    assert res.code == 0, res.out + res.err
    lines = res.out.splitlines()
    end = next(i for i, ln in enumerate(lines) if ln.startswith('{"v":1') and '"end"' in ln)
    stream = [json.loads(ln) for ln in lines[: end + 1]]
    assert lines[end + 1].split()[0] == "host"  # then the table, as without --events
    assert "rollout: ok" in res.out
    assert stream[0]["kind"] == "start" and (stream[-1]["kind"], stream[-1]["ok"]) == ("end", True)
    forward = ["baseline", "apply", "restart", "health", "window", "gates"]
    assert [e["phase"] for e in stream if e["kind"] == "phase"] == forward
    assert [e["phase"] for e in stream if e["kind"] == "ended"] == forward
    window = [e["evidence"] for e in stream if e["kind"] == "scrape" and e["phase"] == "window"]
    assert window and all(ev["decision"] in ("pass", "fail", "undecided") for ev in window)
    assert [e["verdict"] for e in stream if e["kind"] == "done"] == ["kept"]
    beside = (tmp_path / "r.json.events").read_text().splitlines()
    assert [json.loads(ln) for ln in beside] == stream  # the file watch follows: the same
    # stderr is no terminal: plain timestamped lines, one per phase begun and ended
    for step in forward:
        assert re.search(rf"^\d\d:\d\d:\d\d h2: {step}: began", res.err, re.M), res.err
    assert re.search(r"^\d\d:\d\d:\d\d h2: done: kept$", res.err, re.M), res.err
    assert "\x1b" not in res.err
