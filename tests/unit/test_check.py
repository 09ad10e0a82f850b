"""`vpatch check`: every mistake in every file, as `error: FILE: FIELD: message`, exit 2.

Each case below is one distinct mistake an author can make in a patch repo, written to its own
file from a known-good spec; the check must name the file and the field and say what is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from patcher.errors import SpecError
from patcher.specs import check
from patcher.specs.model import load_spec
from tests.conftest import REPO, SPEC, vpatch

GOOD = """\
id = "{id}"
summary = "accept kimi_k2"
package = "servekit"

[[variant]]
versions = ">=1.0,<2.0"
file = "servekit/config.py"
  [[variant.edit]]
  op = "ensure_elements"
  scope = "SpecConfig.verify"
  target = "supported"
  values = ["kimi_k2"]

[[variant]]
versions = ">=2.0"
upstream = "2.0 accepts kimi_k2"

[[probe]]
name = "kimi_k2 accepted"
module = "servekit.config"
code = "assert module.SpecConfig"
"""

EDIT = """\
  [[variant.edit]]
  op = "ensure_elements"
  scope = "SpecConfig.verify"
  target = "supported"
  values = ["kimi_k2"]
"""


def good(sid: str = "servekit-kimi") -> str:
    return GOOD.format(id=sid)


def swap(old: str, new: str) -> str:
    text = good()
    assert old in text, old
    return text.replace(old, new, 1)


def edit(body: str) -> str:
    """The good spec with its first edit replaced by `body` (TOML lines of one edit)."""
    return swap(EDIT, "  [[variant.edit]]\n" + body)


# case -> (spec text, field the error must name, words the message must hold)
MISTAKES: dict[str, tuple[str, str, str]] = {
    "invalid_toml": ("id = \n", "(toml)", "invalid TOML"),
    "unknown_field": (swap('summary = "', 'colour = "red"\nsummary = "'), "colour", "Extra"),
    "missing_field": (swap('summary = "accept kimi_k2"\n', ""), "summary", "required"),
    "misspelled_field": (swap('summary = "', 'sumary = "'), "sumary", 'did you mean "summary"?'),
    "misspelled_edit_field": (
        swap('  scope = "SpecConfig', '  scop = "SpecConfig'),
        "variant[0].edit[0].scop",
        'Extra inputs are not permitted; did you mean "scope"?',
    ),
    "misspelled_threshold": (
        good() + "\n[metrics]\nmin_acceptence_rate = 0.4\n",
        "metrics.min_acceptence_rate",
        'did you mean "min_acceptance_rate"?',
    ),
    "bad_id": (swap('id = "servekit-kimi"', 'id = "Servekit Kimi"'), "id", "lowercase"),
    "unknown_op": (swap('op = "ensure_elements"', 'op = "frobnicate"'), "variant[0].edit[0]", "op"),
    "bad_range": (swap('">=1.0,<2.0"', '"~=banana"'), "variant[0].versions", "PEP 440"),
    "overlapping_ranges": (swap('">=2.0"', '">=1.5"'), "variant[1].versions", "both match"),
    "out_of_order": (
        swap('versions = ">=1.0,<2.0"', 'versions = ">=3.0"').replace('">=2.0"', '">=1.0,<3.0"'),
        "variant[1].versions",
        "starts before variant[0]",
    ),
    "probe_syntax": (
        swap("assert module.SpecConfig", "assert (module"),
        "probe[0].code",
        "compile",
    ),
    "match_syntax": (
        swap('op = "ensure_elements"', 'op = "remove_statement"\n  match = "if x"').replace(
            '  target = "supported"\n  values = ["kimi_k2"]\n', ""
        ),
        "variant[0].edit[0].match",
        "not valid Python",
    ),
    "value_and_expr": (
        swap(
            'op = "ensure_elements"',
            'op = "set_value"\n  value = 1\n  expr = "2"',
        ).replace('  values = ["kimi_k2"]\n', ""),
        "variant[0].edit[0]",
        "exactly one of 'value' or 'expr'",
    ),
    "path_escape": (
        swap('"servekit/config.py"', '"../../etc/passwd.py"'),
        "variant[0].file",
        "without '..'",
    ),
    "empty_values": (swap('values = ["kimi_k2"]', "values = []"), "variant[0].edit[0].values", ""),
    "variant_without_edit": (
        swap('file = "servekit/config.py"\n' + EDIT, ""),
        "variant[0]",
        "needs 'file'",
    ),
    "id_not_file_name": (swap('id = "servekit-kimi"', 'id = "servekit-other"'), "id", "file name"),
    "value_twice": (swap('values = ["kimi_k2"]', 'values = ["kimi_k2", "kimi_k2"]'), "", "twice"),
    "edit_repeated": (swap(EDIT, EDIT + EDIT), "variant[0].edit[1]", "repeats edit[0]"),
    "replace_with_itself": (
        swap(
            'op = "ensure_elements"', 'op = "replace_statement"\n  match = "x = 1"\n  code = "x=1"'
        ).replace('  target = "supported"\n  values = ["kimi_k2"]\n', ""),
        "variant[0].edit[0].code",
        "changes nothing",
    ),
    "ensure_and_remove": (
        swap(EDIT, EDIT + EDIT.replace("ensure_elements", "remove_elements")),
        "variant[0].edit[1].values",
        "ensured by edit[0]",
    ),
    "target_and_containing": (
        edit('op = "ensure_elements"\ntarget = "x"\ncontaining = ["a"]\nvalues = ["b"]\n'),
        "variant[0].edit[0]",
        "exactly one of 'target' or 'containing'",
    ),
    "containing_removed": (
        edit('op = "remove_elements"\ncontaining = ["a", "b"]\nvalues = ["b"]\n'),
        "variant[0].edit[0]",
        "which values removes",
    ),
    "base_without_scope": (
        edit('op = "ensure_base"\nvalue = "Mixin"\n'),
        "variant[0].edit[0]",
        "must name the class",
    ),
    "base_not_expression": (
        edit('op = "remove_base"\nscope = "A"\nvalue = "class B"\n'),
        "variant[0].edit[0].value",
        "not a Python expression",
    ),
    "def_not_one_def": (
        edit('op = "ensure_def"\ncode = "def a(): pass\\ndef b(): pass"\n'),
        "variant[0].edit[0].code",
        "exactly one def",
    ),
    "import_not_an_import": (
        edit('op = "ensure_import"\ncode = "x = 1"\n'),
        "variant[0].edit[0].code",
        "exactly one 'import",
    ),
    "import_with_scope": (
        edit('op = "ensure_import"\nscope = "A"\ncode = "import os"\n'),
        "variant[0].edit[0].scope",
        "leave scope empty",
    ),
    "import_star": (
        edit('op = "ensure_import"\ncode = "from os import *"\n'),
        "variant[0].edit[0].code",
        "star import",
    ),
    "argument_not_a_name": (
        edit('op = "set_argument"\ncall = "Field"\narg = "max-size"\nvalue = 1\n'),
        "variant[0].edit[0].arg",
        "keyword argument name",
    ),
    "argument_value_and_expr": (
        edit('op = "set_argument"\ncall = "Field"\narg = "default"\nvalue = 1\nexpr = "2"\n'),
        "variant[0].edit[0]",
        "exactly one of 'value' or 'expr'",
    ),
    "remove_by_occurrence": (
        edit('op = "remove_statement"\nmatch = "x = 1"\noccurrence = 2\n'),
        "variant[0].edit[0].occurrence",
        "widen match",
    ),
    "occurrence_zero": (
        edit('op = "replace_statement"\nmatch = "x = 1"\ncode = "x = 2"\noccurrence = 0\n'),
        "variant[0].edit[0].occurrence",
        "greater than or equal to 1",
    ),
    "probe_name_twice": (
        good() + '\n[[probe]]\nname = "kimi_k2 accepted"\nmodule = "servekit.config"\n',
        "probe[1].name",
        "also the name of probe[0]",
    ),
}


def write(d: Path, name: str, text: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_each_mistake_is_named_by_file_and_field(tmp_path: Path, case: str) -> None:
    text, where, words = MISTAKES[case]
    path = write(tmp_path, "servekit-kimi.toml", text)
    report = check.check([str(path)])
    assert not report.ok
    lines = [p.text() for p in report.problems]
    found = [p for p in report.problems if p.field.startswith(where) and words in p.message]
    assert found, lines
    p = found[0]
    assert p.text() == f"error: {path}:{p.line}:{p.col}: {p.field}: {p.message}"
    assert p.line is not None and p.col is not None
    # FILE:LINE:COL points at what the field names: its key, its table header, or for a field
    # that is not written (a required one) or a TOML syntax error, where the file says so.
    at = text.splitlines()[p.line - 1][p.col - 1 :]
    last = p.field.rsplit(".", 1)[-1]
    if case == "invalid_toml":
        assert (p.line, p.col) == (1, 6)
    elif case == "missing_field":
        assert (p.line, p.col) == (1, 1)
    elif last.endswith("]"):  # a table: its [[header]]
        assert at.startswith("[[" + re.sub(r"\[\d+\]", "", p.field).replace("[", "")), at
    else:
        assert at.startswith(f"{last} =") or at.startswith(f"{last}="), (p.field, at)


def test_a_misspelled_field_gets_the_closest_one_where_it_is_written(tmp_path: Path) -> None:
    """The suggestion is a field of the table the key was written in (a probe's `nme` ->
    name, not a spec's); a name like none of them gets none."""
    path = write(
        tmp_path,
        "servekit-kimi.toml",
        swap('name = "kimi_k2 accepted"', 'nme = "kimi_k2 accepted"').replace(
            'package = "servekit"', 'package = "servekit"\ncolour = "red"'
        ),
    )
    found = {p.field: p.message for p in check.check([str(path)]).problems}
    assert found["probe[0].nme"].endswith('; did you mean "name"?'), found
    assert found["colour"] == "Extra inputs are not permitted", found
    with pytest.raises(SpecError) as err:
        load_spec(write(tmp_path, "typo.toml", swap('summary = "', 'sumary = "')))
    # the missing summary is the other error; the misspelling is the one named
    assert err.value.message.endswith(
        'typo.toml: sumary: Extra inputs are not permitted; did you mean "summary"? (and 1 more)'
    ), err.value.message
    assert err.value.hint.startswith("rename or remove the field")


def test_good_spec_and_the_catalog_are_clean(tmp_path: Path) -> None:
    path = write(tmp_path, "servekit-kimi.toml", good())
    assert check.check([str(path)]).problems == []
    res = vpatch("check", REPO / "patches")
    assert res.code == 0 and res.err == "", res.err
    count = len(list((REPO / "patches").glob("*.toml")))
    assert res.out == f"check: {count} spec(s) ok\n"


def test_all_errors_of_all_files_then_one_hint_exit_2(tmp_path: Path) -> None:
    """One run lists every problem: several in one file (pydantic's full list, not the first)
    and those of other files, then exactly one hint; nothing on stdout."""
    many = swap('summary = "accept kimi_k2"', 'colour = 1\nsummary = ""').replace('"~=banana"', "")
    a = write(tmp_path, "servekit-kimi.toml", many.replace('">=1.0,<2.0"', '"~=banana"'))
    b = write(tmp_path / "more", "servekit-kimi.toml", good())  # same id, other dir
    c = write(tmp_path / "more", "broken.toml", "id = \n")
    res = vpatch("check", a, tmp_path / "more")
    assert res.code == 2 and res.out == ""
    lines = res.err.splitlines()
    assert lines[-1].startswith("hint: ") and all(ln.startswith("error: ") for ln in lines[:-1])
    assert f"error: {a}:2:1: colour: Extra inputs are not permitted" in lines
    assert any(ln.startswith(f"error: {a}:3:1: summary: ") for ln in lines)
    assert any(ln.startswith(f"error: {a}:7:1: variant[0].versions: ") for ln in lines)
    assert any(ln.startswith(f"error: {c}:1:6: (toml): invalid TOML") for ln in lines)
    assert not any(str(b) in ln for ln in lines)  # a's id is invalid: no duplicate to report
    assert "Traceback" not in res.err


def test_duplicate_ids_across_files_and_with_untouched_siblings(tmp_path: Path) -> None:
    """pre-commit passes only changed files: a new spec reusing the id of an unchanged one in
    the same directory is still caught."""
    old = write(tmp_path / "patches", "servekit-kimi.toml", good())
    new = write(tmp_path / "patches", "kimi-again.toml", good())
    lines = [p.text() for p in check.check([str(new)]).problems]
    assert f"error: {new}:1:1: id: 'servekit-kimi' is also the id of {old}" in lines
    new.unlink()
    other = write(tmp_path / "elsewhere", "servekit-kimi.toml", good())
    both = [p.text() for p in check.check([str(old), str(other)]).problems]
    assert both == [f"error: {other}:1:1: id: 'servekit-kimi' is also the id of {old}"]


def test_directories_skip_other_tools_toml_and_inventories(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "patches", "servekit-kimi.toml", good())
    write(repo, "pyproject.toml", "[project]\nname = 'x'\n")
    write(repo / "deploy", "hosts.toml", "[[host]]\nname = 'a'\naddress = 'a'\n")
    write(repo / ".venv" / "lib", "junk.toml", "not = [valid")
    report = check.check([str(repo)])
    assert report.ok and report.files == [repo / "patches" / "servekit-kimi.toml"]
    assert check.check([str(repo / "pyproject.toml")]).files == []
    empty = check.check([str(tmp_path / "repo" / "deploy")])
    assert [p.text() for p in empty.problems] == [
        f"error: {repo / 'deploy'}: (dir): holds no .toml spec"
    ]


def test_missing_path_and_unknown_id(tmp_path: Path) -> None:
    res = vpatch("check", tmp_path / "nope.toml", "no-such-id")
    assert res.code == 2
    assert f"error: {tmp_path / 'nope.toml'}: (file): cannot read spec" in res.err
    assert "error: no-such-id: (file): no spec file or catalog id 'no-such-id'" in res.err


def test_pre_commit_hook_definition(tmp_path: Path) -> None:
    """The manifest pre-commit reads from this repo: id, entry, and a file pattern that
    selects spec files."""
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    [hook] = hooks
    assert hook["id"] == "vpatch-check" and hook["entry"] == "vpatch check"
    assert hook["language"] == "python" and hook.get("pass_filenames", True)
    assert re.search(hook["files"], "patches/vllm-eagle3-mla-targets.toml")
    for other in ("README.md", "pyproject.toml", "deploy/hosts.toml", "patches/notes.md"):
        assert not re.search(hook["files"], other), other
    # What pre-commit runs: the entry plus the changed files; problems link FILE:LINE:COL.
    res = vpatch(*hook["entry"].split()[1:], SPEC)
    assert res.code == 0, res.err
    bad = write(tmp_path / "patches", "servekit-kimi.toml", swap('">=1.0,<2.0"', '"~=banana"'))
    res = vpatch(*hook["entry"].split()[1:], bad)
    assert res.code == 2
    assert res.err.startswith(f"error: {bad}:6:1: variant[0].versions: '~=banana' is not"), res.err


def test_check_is_linear_in_the_number_of_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted, not timed: the lines the position scan reads for a file with N unknown keys
    grow as N (each file is scanned once), not as N errors times N lines."""
    scanned = {"calls": 0, "lines": 0}
    real = check.tomlpos.positions

    def counting(text: str) -> dict[str, tuple[int, int]]:
        scanned["calls"] += 1
        scanned["lines"] += len(text.splitlines())
        return real(text)

    monkeypatch.setattr(check.tomlpos, "positions", counting)
    cost = {}
    for n in (1000, 8000):
        p = tmp_path / f"many-{n}.toml"
        unknown = "".join(f"unknown{i} = 1\n" for i in range(n))
        p.write_text(GOOD.format(id=f"many-{n}").replace("[[variant]]", unknown + "[[variant]]", 1))
        scanned.update(calls=0, lines=0)
        report = check.check([str(p)])
        assert len(report.problems) == n
        assert report.problems[-1].line == n + 4  # still located, each at its own line
        assert scanned["calls"] == 1
        cost[n] = scanned["lines"]
    assert cost[8000] / cost[1000] < 9  # linear: ~8; one scan per error would be ~64
