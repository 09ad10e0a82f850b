"""`--json` means one JSON document on stdout on EVERY exit: a result, or on an error (exit 2
for bad input and usage) `{"schema_version", "command", "ok": false, "error", "hint"}`, with
the `error:`/`hint:` lines still on stderr. Scripts then never parse an empty stdout. Also: the
result schema is valid and is what `vpatch schema --result` prints, and a closed stdout ends
vpatch quietly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from patcher.commands import _schema
from patcher.result import SCHEMA_VERSION
from tests import jsondoc
from tests.conftest import REPO, SPEC, VPATCH, Env, vpatch

BAD_SPEC = 'id = "x"\nsummary = "s"\npackage = "p"\ncolour = "red"\n[[variant]]\nversions = ">=1"\n'

# name -> argv ({bad} is a spec with an unknown field, {tmp} the test's temp dir)
EXIT_2: dict[str, list[str]] = {
    "unknown id": ["apply", "no-such-id"],
    "bad spec": ["verify", "{bad}"],
    "unknown flag": ["apply", str(SPEC), "--yes"],
    "missing argument": ["apply"],
    "no command": [],
    "unknown command": ["frobnicate"],
    "bad choice": ["verify", str(SPEC), "--level", "deep"],
    "usage": ["apply", str(SPEC), "--parallel", "0"],
    "bad count": ["apply", str(SPEC), "--canary", "many"],
    "group without inventory": ["status", "--group", "gpu"],
    "missing inventory": ["status", "--inventory", "{tmp}/nope.toml"],
    "bad host": ["status", "--host", "gpu 01"],
    "matrix range": ["matrix", str(SPEC), "--versions", "banana"],
    "check": ["check", "{bad}"],
    "exec has no --json": ["exec", str(SPEC), "--", "true"],
    "abbreviated --json": ["rollback", "--frob"],
}


@pytest.mark.parametrize("case", sorted(EXIT_2))
def test_every_exit_2_prints_one_error_document(case: str, tmp_path: Path) -> None:
    bad = tmp_path / "x.toml"
    bad.write_text(BAD_SPEC)
    argv = [a.format(bad=bad, tmp=tmp_path) for a in EXIT_2[case]]
    flag = "--js" if case == "abbreviated --json" else "--json"
    res = vpatch(*argv, flag) if "--" not in argv else vpatch(*argv[:2], flag, *argv[2:])
    assert res.code == 2, res.err
    doc = jsondoc.check(json.loads(res.out))  # exactly one document: json.loads takes one
    assert set(doc) >= {"schema_version", "command", "ok", "error", "hint"} and doc["hint"], doc
    assert doc["ok"] is False
    # `command` is the command word the line names, as in every other document; null where
    # it names none vpatch has
    named = argv[0] if argv and argv[0] != "frobnicate" else None
    assert doc["command"] == named, doc
    lines = res.err.splitlines()
    assert lines[-1] == f"hint: {doc['hint']}", res.err
    assert f"error: {doc['error']}" in lines, res.err
    assert "Traceback" not in res.err


def test_without_json_stdout_stays_empty_on_errors() -> None:
    res = vpatch("apply", "no-such-id")
    assert res.code == 2 and res.out == "" and res.err.startswith("error: ")


def test_check_json_lists_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "x.toml"
    bad.write_text(BAD_SPEC)
    res = vpatch("check", bad, SPEC, "--json")
    doc = jsondoc.check(json.loads(res.out))
    assert res.code == 2 and doc["command"] == "check" and not doc["ok"]
    assert doc["files"] == [str(bad), str(SPEC)]
    assert {p["field"] for p in doc["problems"]} >= {"colour", "variant[0]"}
    good = vpatch("check", SPEC, "--json")
    assert good.code == 0 and good.err == ""
    assert jsondoc.check(good.doc) | {} == {
        "schema_version": SCHEMA_VERSION,
        "command": "check",
        "ok": True,
        "files": [str(SPEC)],
        "problems": [],
    }


def test_result_schema_is_what_the_cli_prints_and_a_valid_schema() -> None:
    res = vpatch("schema", "--result")
    assert res.code == 0 and res.err == ""
    assert json.loads(res.out) == _schema.result_schema()
    jsondoc.result_validator()  # check_schema: a valid 2020-12 schema
    defs = _schema.result_schema()["$defs"]
    assert set(defs) == {
        "RunResult",
        "HostResult",
        "Attention",
        "PatchResult",
        "FileChange",
        "ProbeResult",
        "RolloutStep",
        "CatalogDocument",
        "CheckDocument",
        "Problem",
        "DiffDocument",
        "MatrixDocument",
        "Release",
        "CaptureDocument",
        "WheelDocument",
        "Error",
    }
    outcome = defs["PatchResult"]["properties"]["outcome"]["enum"]
    assert "applied" in outcome and "anchor_missing" in outcome


def test_every_document_has_ok() -> None:
    """docs/reference/json.md: every document has `schema_version`, `command` and `ok`; a
    document's schema that leaves one out lets a command print a document without it."""
    defs = _schema.result_schema()["$defs"]
    documents = {n: d for n, d in defs.items() if "schema_version" in d.get("properties", {})}
    assert {"RunResult", "CaptureDocument", "Error"} <= set(documents)
    for name, d in documents.items():
        assert {"schema_version", "command", "ok"} <= set(d["required"]), name


def test_schema_rejects_what_is_not_a_result() -> None:
    doc = {"schema_version": SCHEMA_VERSION, "command": "apply", "ok": True, "hosts": []}
    jsondoc.check(doc | {"stats": {}})
    for broken in (
        doc,  # stats missing
        doc | {"stats": {}, "schema_version": SCHEMA_VERSION + 1},
        doc | {"stats": {}, "hosts": [{"target": "a"}]},
        doc | {"stats": {}, "colour": 1},
    ):
        with pytest.raises(AssertionError):
            jsondoc.check(broken)


def test_new_keys_are_allowed_by_the_published_schema_only() -> None:
    """docs/reference/json.md: a key may be added without a schema_version bump, so the
    published schema lets readers' validators accept it; the suite's strict one does not."""
    doc = {"schema_version": SCHEMA_VERSION, "command": "apply", "ok": True, "hosts": []}
    doc |= {"stats": {}, "added_later": 1}
    published = jsonschema.Draft202012Validator(_schema.result_schema())
    assert published.is_valid(doc)
    with pytest.raises(AssertionError, match="added_later"):
        jsondoc.check(doc)


def test_every_command_document_validates(standin_env: Env, tmp_path: Path) -> None:
    """catalog, check, diff, status and matrix documents against `vpatch schema --result`
    (once valid against nothing: no branch described them, and matrix had no command/ok)."""
    catalog = vpatch("catalog", "--json")
    assert catalog.code == 0 and catalog.doc["command"] == "catalog" and catalog.doc["ok"]
    bad = tmp_path / "x.toml"
    bad.write_text(BAD_SPEC)
    assert vpatch("check", bad, "--json").doc["problems"]
    assert vpatch("check", SPEC, "--json").doc["ok"]
    diff = vpatch("diff", "servekit", "--python", standin_env.python, "--json")
    assert diff.code == 0, diff.err
    assert diff.doc["command"] == "diff" and diff.doc["groups"][0]["files"] == []
    gone = vpatch("diff", "no-such-dist", "--python", standin_env.python, "--json")
    assert gone.doc["errors"] and not gone.doc["ok"]
    status = vpatch("status", "--python", standin_env.python, "--json")
    assert status.doc["command"] == "status"
    from patcher.wheels.matrix import Matrix, Release

    table = Matrix(
        "s", "p", [Release("1.0", 0, "would_apply"), Release("2.0", None, "not_covered")]
    )
    assert not jsondoc.check(table.to_json())["ok"]  # what `vpatch matrix --json` prints


def test_a_real_run_document_validates(standin_env: Env) -> None:
    res = vpatch("status", "--python", standin_env.python, "--json")
    assert res.code == 0, res.err
    assert res.doc["command"] == "status" and res.doc["schema_version"] == SCHEMA_VERSION
    host = res.doc["hosts"][0]  # the interpreter in two keys, beside the string people read
    assert host["python_path"] == str(standin_env.python) and "(" not in host["python_version"]
    assert host["python_version"].count(".") == 2
    assert host["python"] == f"{host['python_path']} ({host['python_version']})"
    dry = vpatch("apply", REPO / "tests" / "cases" / "bad_inputs" / "spec_twice.toml",
                 "--python", standin_env.python, "--json", "--dry-run")  # fmt: skip
    assert dry.code == 0, dry.err
    assert dry.patch()["outcome"] == "would_apply"


@pytest.mark.parametrize("argv", [["schema"], ["schema", "--result"]])
def test_closed_stdout_ends_quietly(argv: list[str]) -> None:
    """`vpatch schema | head -2`: the reader leaves; vpatch stops without a traceback, with the
    status of a process killed by SIGPIPE (141), like `yes | head`."""
    proc = subprocess.Popen(
        [*VPATCH, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before vpatch writes a byte
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert err == "" and code == 141, (code, err)
