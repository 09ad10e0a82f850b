""" "did you mean" for a mistyped subcommand, option and spec id, in the `error:` / `hint:` form
(exit 2, nothing on stdout; with --json the error document): the real CLI, and the closest-name
rule, which suggests nothing rather than something unrelated."""

from __future__ import annotations

import json

import pytest

from patcher import suggest
from tests import jsondoc
from tests.conftest import vpatch


def test_closest_names() -> None:
    assert suggest.closest("aply", ["apply", "verify", "status"]) == ["apply"]
    assert suggest.closest("--dryrun", ["--dry-run", "--diff"]) == ["--dry-run"]
    assert suggest.closest("frobnicate", ["apply", "verify"]) == []
    assert (
        suggest.did_you_mean("statu", ["status"], "`vpatch {}`") == "did you mean `vpatch status`?"
    )
    assert suggest.did_you_mean("zzz", ["status"]) == ""


@pytest.mark.parametrize(
    ("argv", "error", "hint"),
    [
        (["aply", "x"], "unknown command 'aply'", "hint: did you mean `vpatch apply`?"),
        (["rolback"], "unknown command 'rolback'", "hint: did you mean `vpatch rollback`?"),
        (
            ["frobnicate"],
            "unknown command 'frobnicate'",
            "hint: the commands are apply, verify, rollback",
        ),
        (
            ["apply", "x", "--dryrun"],
            "unrecognized arguments: --dryrun",
            "hint: did you mean --dry-run? (see `vpatch apply --help`)",
        ),
        (
            ["status", "--invetory=hosts.toml"],
            "unrecognized arguments: --invetory=hosts.toml",
            "hint: did you mean --inventory?",
        ),
        (
            ["apply", "vllm-eagle3-mla-target"],
            "no spec file or catalog id 'vllm-eagle3-mla-target'",
            "hint: did you mean vllm-eagle3-mla-targets? known ids: ",
        ),
    ],
)
def test_a_mistyped_word_gets_the_closest_one(argv: list[str], error: str, hint: str) -> None:
    res = vpatch(*argv)
    assert res.code == 2 and res.out == "", res.err
    lines = res.err.splitlines()
    assert lines[0] == f"error: {error}", res.err
    assert lines[-1].startswith(hint), res.err
    assert "Traceback" not in res.err


def test_an_unrelated_word_gets_no_guess() -> None:
    """Nothing close: the hint lists what there is instead of guessing."""
    res = vpatch("apply", "x", "--zzzzzz")
    assert res.code == 2 and "did you mean" not in res.err, res.err
    assert res.err.splitlines()[-1] == "hint: see `vpatch apply --help`"
    res = vpatch("apply", "qqqqqqqqqqqq")
    assert res.code == 2 and "did you mean" not in res.err, res.err


def test_json_error_document_carries_the_suggestion() -> None:
    res = vpatch("--json", "verfy", "x")
    doc = jsondoc.check(json.loads(res.out))
    assert res.code == 2 and doc["command"] is None and doc["ok"] is False
    assert doc["hint"].startswith("did you mean `vpatch verify`?"), doc
