"""`vpatch status --format nagios|prometheus` (patcher/plan/feeds.py), pinned by data and
judged by the monitoring systems' own readers.

tests/cases/feeds/NAME.json is a fleet (hosts from the monitor's status cases, unreachable
hosts, hosts reached that gave no state) with the Nagios check's exit and output; NAME.prom
beside it is the textfile, byte for byte. Each textfile is read back with prometheus_client's
text parser (what a Python scraper reads) and linted with Prometheus' own `promtool check
metrics`; the Nagios code of every state of monitor.STATES, unreachable, a host error and bad
input is a table here, written apart from the code's.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from patcher import cli
from patcher.plan import feeds, monitor
from tests.support import debtools, feedcases

CASES = sorted(feedcases.FEEDS.glob("*.json"))

# What a Nagios/Icinga check says for a host in each state (docs/monitoring.md argues them).
OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
NAGIOS = {
    "applied": OK,
    "satisfied_upstream": OK,
    "superseded": OK,
    "baked": OK,
    "rollout_done": OK,
    "drifted": CRITICAL,
    "upgraded": WARNING,
    "baked_differs": CRITICAL,
    "unverified": WARNING,
    "rollout_attention": CRITICAL,
    "rollout_stopped": WARNING,
    "unreachable": UNKNOWN,
    "error": UNKNOWN,
}
WORST_FIRST = (CRITICAL, WARNING, UNKNOWN, OK)


def _worst(codes: set[int]) -> int:
    return next(c for c in WORST_FIRST if c in codes | {OK})


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_feed_case(path: Path) -> None:
    case = feedcases.feed_case(path)
    assert feeds.nagios(case.hosts) == (case.nagios_exit, case.nagios)
    assert feeds.prometheus(case.hosts, case.exit) == case.prom.read_text()
    states = {feeds.state(h) for h in case.hosts}
    assert case.nagios_exit == _worst({NAGIOS.get(s, OK) for s in states})


def test_every_state_has_its_nagios_code() -> None:
    """The table: every row of STATES, then unreachable and a host error, one host each."""
    assert set(NAGIOS) == {*monitor.BY_NAME, monitor.UNREACHABLE, monitor.ERROR}
    seen: set[str] = set()
    for path in sorted(feedcases.STATUS.glob("*.json")):
        host = feedcases.answered(path.stem)
        named = feedcases.status_raw(path.stem)["expect"]["states"]
        seen.update(named)
        code, line = feeds.nagios([host])
        assert code == _worst({NAGIOS[s] for s in named}), (path.stem, line)
        assert line.startswith(f"VPATCH {feeds.WORDS[code]} - 1 host: 1 {host.state}")
    assert seen == set(monitor.BY_NAME)
    for reached, word in ((False, "unreachable"), (True, "error")):
        host = feedcases.silent("h9", "h9: no answer", None, reached)
        assert host.state == word
        assert feeds.nagios([host])[0] == UNKNOWN


BAD = [
    ["status", "--format", "nagios", "--bogus"],  # argparse's own error
    ["status", "--format=nagios", "--inventory", "/nonexistent/hosts.toml"],  # a typo
    ["status", "--form", "nagios", "--host", "a", "--ssh-config", "/nonexistent/cfg"],
    ["status", "no-such-spec-file.toml", "--format", "nagios", "--host", "a"],
    ["status", "--format", "nagios", "--json"],  # contradicting options
    ["status", "--format", "nagios", "-o", "out.prom"],  # -o is the textfile's
]


@pytest.mark.parametrize("argv", BAD)
def test_bad_input_is_unknown_for_a_check(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input is UNKNOWN (3), never the 2 Nagios reads as CRITICAL: one plugin line on
    stdout, the `error:`/`hint:` pair on stderr. The same bad input without nagios: 2."""
    assert cli.main(argv) == UNKNOWN
    out, err = capsys.readouterr()
    assert re.fullmatch(r"VPATCH UNKNOWN - error: [^|\n]+\n", out), out
    assert err.startswith("error: ") and "\nhint: " in err, err
    if argv in BAD[:4]:  # the control: the same line as text
        plain = [a for a in argv if a not in ("nagios", "--format", "--form")]
        assert cli.main([a for a in plain if not a.startswith("--format=")]) == 2
        assert "VPATCH" not in capsys.readouterr().out


def _series(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every sample prometheus_client's parser reads, with its family's type and help."""
    out = []
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation, family
        for s in family.samples:
            assert s.name == family.name
            out.append((s.name, tuple(sorted(s.labels.items())), s.value))
    return out


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_textfile_reads_back(path: Path) -> None:
    """prometheus_client reads every line (labels unescaped to the hosts' own names and the
    spec ids made visible), no series twice, one host state per host, and the spec states
    are the monitor's."""
    case = feedcases.feed_case(path)
    text = case.prom.read_text()
    series = _series(text)
    keys = Counter((name, labels) for name, labels, _ in series)
    assert [k for k, n in keys.items() if n > 1] == []
    assert len(series) == sum(1 for line in text.splitlines() if not line.startswith("#"))
    values = {(n, labels): v for n, labels, v in series}
    for h in case.hosts:
        ones = [
            dict(labels)["state"]
            for (n, labels), v in values.items()
            if n == "vpatch_host_state" and dict(labels)["host"] == h.target and v == 1
        ]
        assert ones == [h.state], (h.target, ones)
        for spec, states in feeds.spec_states(h).items():
            shown = spec if spec.isprintable() else None
            got = {
                dict(labels)["state"]
                for (n, labels), v in values.items()
                if n == "vpatch_spec_state"
                and dict(labels)["host"] == h.target
                and (shown is None or dict(labels)["spec"] == shown)
                and v == 1
            }
            assert got == states, (h.target, spec)
    assert values[("vpatch_status_exit_code", ())] == case.exit
    for name, labels, _ in series:
        assert all(v.isprintable() or k == "host" for k, v in labels), (name, labels)


def test_rollout_verdict_and_time() -> None:
    """The last rollout's verdict (`unfinished` when it recorded none) and its time, read as
    Unix time from the host's UTC stamp; a stamp that is not one is left out, not guessed."""
    kept = feedcases.answered("rollout_kept", "h1")
    killed = feedcases.answered("rollout_killed", "h2")
    assert kept.rollout_step is not None and killed.rollout_step is not None
    killed.rollout_step.at = "yesterday"
    values = {(n, labels): v for n, labels, v in _series(feeds.prometheus([kept, killed], 1))}
    verdict = "vpatch_rollout_verdict"
    assert values[(verdict, (("host", "h1"), ("run", "r1a2b3"), ("verdict", "kept")))] == 1
    assert values[(verdict, (("host", "h2"), ("run", "r1a2b3"), ("verdict", "unfinished")))] == 1
    stamps = {k[1]: v for k, v in values.items() if k[0] == "vpatch_rollout_timestamp_seconds"}
    assert stamps == {(("host", "h1"),): 1796126400.0}  # 2026-12-01T12:00:00.000Z
    assert feeds.timestamp("2026-12-01T13:00:00+01:00") == 1796126400.0


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_promtool_lints_the_textfile(path: Path) -> None:
    """Prometheus' own linter of the exposition format finds nothing to say."""
    code, said = debtools.promtool("check", "metrics", text=path.with_suffix(".prom").read_text())
    assert (code, said.strip()) == (0, ""), said


def test_a_host_named_twice_is_one_series() -> None:
    one, again = feedcases.answered("applied", "h1"), feedcases.answered("drifted", "h1")
    series = _series(feeds.prometheus([one, again], 1))
    host_states = [s for s in series if s[0] == "vpatch_host_state"]
    assert len(host_states) == len(monitor.HOST_STATES)
    assert ("vpatch_host_state", (("host", "h1"), ("state", "ok")), 1.0) in host_states


def test_a_large_fleet_stays_inside_nagios_output_limit() -> None:
    """A thousand drifted hosts: the first line names five and counts the rest, the long
    output is capped (Nagios Core keeps 8 KiB of a plugin's output) and says so."""
    hosts = [feedcases.answered("drifted", f"gpu-{i:04d}") for i in range(1000)]
    code, out = feeds.nagios(hosts)
    lines = out.splitlines()
    assert code == CRITICAL and len(out.encode()) < 8192, len(out.encode())
    assert "1000 drifted (gpu-0000, gpu-0001, gpu-0002, gpu-0003, gpu-0004, +995)" in lines[0]
    assert " | hosts=1000;;;0 drifted=1000;;;0;1000 " in lines[0]
    told = len(lines) - 2  # the first line, then the long output's lines, then the count
    assert told > 10 and all(ln.startswith("gpu-") for ln in lines[1:-1])
    assert lines[-1].startswith(f"... {1000 - told} more: `vpatch status` on those hosts")


def test_format_json_is_json_even_for_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    """`--format json` is `--json`: bad input is the error document on stdout, exit 2."""
    import json

    assert cli.main(["status", "--format", "json", "--bogus"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert (doc["command"], doc["ok"]) == ("status", False) and "--bogus" in doc["error"]


def test_every_state_is_a_series_of_some_golden_textfile() -> None:
    """Every row of monitor.STATES is 1 in some case's textfile (a spec's as vpatch_spec_state,
    the last rollout's as vpatch_rollout_state), and so is every host state."""
    ones: dict[str, set[str]] = {}
    for path in CASES:
        for name, labels, value in _series(path.with_suffix(".prom").read_text()):
            if value == 1 and "state" in dict(labels):
                ones.setdefault(name, set()).add(dict(labels)["state"])
    assert ones["vpatch_spec_state"] == set(feeds.SPEC_STATES)
    assert ones["vpatch_rollout_state"] == set(feeds.ROLLOUT_STATES)
    assert set(feeds.SPEC_STATES) | set(feeds.ROLLOUT_STATES) == set(monitor.BY_NAME)
    assert ones["vpatch_host_state"] == set(monitor.HOST_STATES)


def test_status_with_specs_named_has_a_state_too() -> None:
    """`vpatch status SPEC` (no `attention`): a spec not applied is fine there, as its exit 0
    says; any outcome status does not call good, or a failed probe, is `drifted`."""
    from patcher.result import HostResult, PatchResult, ProbeResult

    def host(*patches: PatchResult) -> HostResult:
        return HostResult("h1", patches=list(patches))

    fine = PatchResult("a", "pkg", "1.0", "not_applied")
    edited = PatchResult("b", "pkg", "1.0", "modified", "differs from pip's RECORD")
    probed = PatchResult("c", "pkg", "1.0", "applied")
    probed.probes.append(ProbeResult("import pkg", False, "ImportError"))
    assert monitor.host_state(host(fine)) == "ok"
    assert monitor.host_state(host(fine, edited)) == "drifted"
    assert monitor.host_state(host(probed)) == "drifted"
    code, out = feeds.nagios([host(fine, edited)])
    assert code == CRITICAL and out.splitlines()[1:] == [
        "h1: drifted: b: differs from pip's RECORD"
    ], out
    spec = {(n, dict(k)["spec"], dict(k)["state"]) for n, k, v in _series(feeds.prometheus(
        [host(fine, edited, probed)], 1)) if v == 1 and n == "vpatch_spec_state"}  # fmt: skip
    assert spec == {("vpatch_spec_state", "b", "drifted"), ("vpatch_spec_state", "c", "drifted")}


def test_a_failing_disk_is_one_error_and_the_file_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o FILE on a disk that fails the write (here: this machine's interpreter as the one
    host, the write made to fail): exit 1 with one `error:` and a `hint:`, FILE as it was."""
    import errno
    import sys

    from patcher import safewrite

    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "vpatch.prom"
    out.write_text("# the last good file\n")
    monkeypatch.setattr(safewrite, "write", full)
    argv = ["status", "--python", sys.executable, "--format", "prometheus", "-o", str(out)]
    assert cli.main(argv) == 1
    said = capsys.readouterr()
    assert said.out == "" and said.err.startswith(f"error: -o {out}: cannot write it: No space")
    assert "\nhint: check the space" in said.err and "Traceback" not in said.err
    assert out.read_text() == "# the last good file\n"
