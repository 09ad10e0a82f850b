"""The host commands' table (patcher.commands.hosts.HOST_COMMANDS): apply, verify, rollback,
status and ensure are one `HostCommand` each, looked up once by their word; each says its own
options, run on one host, report and exit rule, and nothing on their path compares the word
again (issue 38: no string dispatch)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from patcher.commands import COMMANDS, build_parser
from patcher.commands.hosts import HOST_COMMANDS, HostCommand
from patcher.exitcodes import ExitCode
from patcher.result import GOOD, HostResult, Outcome, PatchResult, RunResult

FIVE = ("apply", "verify", "rollback", "status", "ensure")
OUTCOMES: tuple[str, ...] = typing.get_args(Outcome)
REPO = Path(__file__).resolve().parents[2]


def _host(outcome: str) -> HostResult:
    return HostResult(target="h", patches=[PatchResult("s", "pkg", "1.0", outcome)])  # type: ignore[arg-type]


def test_the_table_holds_exactly_the_five_host_commands() -> None:
    assert sorted(HOST_COMMANDS) == sorted(FIVE)
    assert sorted(n for n, c in COMMANDS.items() if c.module == "hosts") == sorted(FIVE)
    for name, command in HOST_COMMANDS.items():
        assert isinstance(command, HostCommand) and command.name == name
        assert type(command).on_host is not HostCommand.on_host, f"{name} runs on no host"
    assert len({type(c) for c in HOST_COMMANDS.values()}) == len(FIVE)  # one class each


@pytest.mark.parametrize("name", FIVE)
def test_each_command_exits_by_its_own_rule(name: str) -> None:
    """A host is ok (exit 0) exactly when its outcome is one the command asks for; a target
    vpatch cannot patch is exit 2 whatever the outcomes."""
    command = HOST_COMMANDS[name]
    for outcome in OUTCOMES:
        host = _host(outcome)
        ok = command.ok(host)
        assert ok == (outcome in GOOD[name]), (name, outcome)
        result = RunResult(name, ok, [host])
        assert command.exit_code(result, False) == (ExitCode.OK if ok else ExitCode.FAILED)
        assert command.exit_code(result, True) == ExitCode.UNSUPPORTED
    unreachable = HostResult(target="h", error="connection refused")
    assert not command.ok(unreachable)


def test_no_two_commands_share_an_exit_rule() -> None:
    rules = {
        name: frozenset(o for o in OUTCOMES if HOST_COMMANDS[name].ok(_host(o))) for name in FIVE
    }
    assert all(rules.values()) and len(set(rules.values())) == len(FIVE), rules


def test_each_command_has_its_own_options() -> None:
    parser = build_parser(FIVE)
    subs = next(a for a in parser._actions if a.dest == "command").choices
    assert subs is not None
    own = {
        name: {o for a in subs[name]._actions for o in a.option_strings if o.startswith("--")}
        for name in FIVE
    }
    assert "--adopt" in own["apply"] and "--wheelhouse" in own["apply"]
    assert "--metrics" in own["verify"] and "--dry-run" not in own["verify"]
    assert "--dry-run" in own["rollback"] and "--adopt" not in own["rollback"]
    assert "--level" not in own["status"] and "--force" not in own["status"]
    assert "--force" in own["ensure"] and "--dry-run" not in own["ensure"]
    # status has the targets' options, and its output formats (a monitoring feed's); status
    # and verify (they write nothing) also take their targets from a pod list
    pods = {"--kubectl", "--selector", "--kube-container", "--kube-context"}
    assert own["status"] - own["apply"] == {"--format", "--output", *pods}
    assert pods <= own["verify"] and not pods & (own["apply"] | own["rollback"] | own["ensure"])


def _word_comparisons(path: Path) -> list[str]:
    """Every comparison of a command word (`x == "apply"`, `x in ("rollback", "status")`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            words = [i.value for i in items if isinstance(i, ast.Constant) and i.value in FIVE]
            if words:
                found.append(f"{path.name}:{node.lineno} compares {words}")
    return found


def test_no_module_on_the_host_commands_path_compares_the_word() -> None:
    paths = ["patcher/commands/hosts.py", "patcher/run/engine.py", "patcher/run/ensure.py"]
    assert [w for p in paths for w in _word_comparisons(REPO / p)] == []


def test_rollback_of_an_id_no_target_has_fails_every_target() -> None:
    """`rollback ID` that every answering host reports `not_applied` is most likely a typo:
    failed on each (exit 1); an id one host had applied stays as it is."""
    rollback = HOST_COMMANDS["rollback"]
    hosts = [_host("not_applied"), _host("not_applied")]
    rollback.settle(hosts, ["s"])
    assert [p.outcome for h in hosts for p in h.patches] == ["failed", "failed"]
    assert "applied on none of the targets" in hosts[0].patches[0].message
    assert [h.ok for h in hosts] == [False, False]
    kept = [_host("not_applied"), _host("rolled_back")]
    rollback.settle(kept, ["s"])
    assert [p.outcome for h in kept for p in h.patches] == ["not_applied", "rolled_back"]
    assert [h.ok for h in kept] == [True, True]
    files = [_host("not_applied")]
    rollback.settle(files, [])  # a spec FILE with nothing to roll back is fine
    assert files[0].patches[0].outcome == "not_applied"
