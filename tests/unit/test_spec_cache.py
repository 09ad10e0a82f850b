"""The spec cache (patcher/specs/cache.py): a kept spec is the validated spec, and a command that
meets it again imports no pydantic.

The corpus is every spec file of the repository that validates (the catalog's and the test
cases'), so every edit op and optional field a real spec uses goes through the round trip."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patcher.errors import SpecError
from patcher.plan.base import dump_edits
from patcher.specs import validate
from patcher.specs.cache import load
from patcher.specs.model import (
    PatchSpec,
    as_json,
    field_names,
    from_json,
    load_spec,
    parse_spec,
    toml_loads,
)
from tests.conftest import REPO
from tests.support.standin_specs import SPEC_A

# One spec with every edit op and every optional part (probe, metrics, references, upstream).
EVERY_OP = r"""
id = "every-op"
summary = "one of each edit"
package = "servekit"
references = ["docs/spec.md"]

[[variant]]
versions = ">=0.1,<0.2"
file = "servekit/config.py"

  [[variant.edit]]
  op = "ensure_elements"
  target = "MODELS"
  values = ["kimi_k2", 3, 1.5, true]

  [[variant.edit]]
  op = "remove_elements"
  containing = ["a"]
  values = ["b"]

  [[variant.edit]]
  op = "set_value"
  scope = "Config"
  target = "limit"
  value = {deep = [1, "two", {x = 3.5}]}

  [[variant.edit]]
  op = "set_value"
  target = "TABLE"
  key = 7
  expr = "len(MODELS)"

  [[variant.edit]]
  op = "replace_statement"
  scope = "Config.check"
  match = "if x:\n    pass"
  code = "if x:\n    return 1"
  occurrence = 2

  [[variant.edit]]
  op = "insert_statement"
  match = "import os"
  code = "import sys"
  position = "before"

  [[variant.edit]]
  op = "remove_statement"
  match = "x = 1"

  [[variant.edit]]
  op = "ensure_base"
  scope = "Config"
  value = "mod.Mixin"

  [[variant.edit]]
  op = "remove_base"
  scope = "Config"
  value = "Old"

  [[variant.edit]]
  op = "ensure_def"
  scope = "Config"
  code = "def f(self):\n    return 2"
  replace = true

  [[variant.edit]]
  op = "ensure_import"
  code = "from .interfaces import X"

  [[variant.edit]]
  op = "set_argument"
  scope = "Config"
  call = "Field"
  arg = "default"
  value = 1

  [[variant.edit]]
  op = "add_file"
  file = "servekit/extra.py"
  text = "X = 1\n"

[[variant]]
versions = ">=0.3"
upstream = "fixed upstream in 0.3"

[[variant]]
versions = ">=0.2,<0.3"

  [[variant.edit]]
  op = "ensure_elements"
  file = "servekit/config.py"
  containing = ["qwen"]
  values = ["kimi_k2"]

[[probe]]
name = "loads"
module = "servekit.config"
code = "assert module"
timeout = 30

[metrics]
min_acceptance_rate = 0.5
max_error_rate = 0.01
"""


def _corpus() -> list[Path]:
    out = []
    for path in sorted([*(REPO / "patches").glob("*.toml"), *(REPO / "tests").rglob("*.toml")]):
        try:
            load_spec(path)
        except SpecError:
            continue
        out.append(path)
    return out


CORPUS = _corpus()


@pytest.fixture(scope="module")
def every_op(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "every-op.toml"
    path.write_text(EVERY_OP)
    return path


def _same(a: object, b: object) -> None:
    """Equal objects all the way down, of the same types at every level (1 is not 1.0)."""
    assert type(a) is type(b)
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif hasattr(type(a), "_fields"):
        for name in field_names(type(a)):  # type: ignore[arg-type]
            _same(getattr(a, name), getattr(b, name))
    else:
        assert a == b


def test_every_edit_op_is_in_the_round_trip(every_op: Path) -> None:
    from patcher.specs.model import EDIT_OPS

    assert {e.op for v in load_spec(every_op).variant for e in v.edit} == set(EDIT_OPS)
    _round_trip(every_op)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_kept_spec_is_the_validated_spec(path: Path) -> None:
    _round_trip(path)


def _round_trip(path: Path) -> None:
    spec = load_spec(path)
    kept = from_json(json.loads(json.dumps(as_json(spec))))  # through JSON, as stored
    assert kept == spec
    _same(kept, spec)
    assert kept.digest == spec.digest
    for a, b in zip(kept.variant, spec.variant, strict=True):
        assert dump_edits(a.edit) == dump_edits(b.edit)
        assert a.specifier == b.specifier and a.modules == b.modules and a.files() == b.files()
    # What the validator's own models dump, key for key and in order: the digest journals
    # recorded before the models were plain classes, and each edit's journal form.
    model = validate.PatchSpec.model_validate(toml_loads(path.read_text("utf-8")))
    assert json.dumps(as_json(kept)) == json.dumps(model.model_dump(mode="json"))
    blob = json.dumps(model.model_dump(mode="json"), sort_keys=True).encode()
    assert kept.digest == hashlib.sha256(blob).hexdigest()[:16]
    for a, m in zip(kept.variant, model.variant, strict=True):
        want = [e.model_dump(mode="json", exclude_none=True) for e in m.edit]
        assert json.dumps(dump_edits(a.edit)) == json.dumps(want)


def _load_in_child(cache: Path, spec: Path) -> dict[str, object]:
    """speccache.load in a fresh interpreter: the spec's digest and journal forms, and which
    of pydantic's modules it imported."""
    code = (
        "import json, sys\n"
        "from patcher.plan.base import dump_edits\n"
        "from patcher.specs import cache as speccache\n"
        "got = speccache.load(sys.argv[1])\n"
        "out = {'digest': got.digest, 'edits': [dump_edits(v.edit) for v in got.variant],\n"
        "       'built': sorted(m for m in sys.modules if m.startswith('pydantic'))}\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "VPATCH_NO_CACHE"}
    env["VPATCH_CACHE_DIR"] = str(cache)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(spec)], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


def test_a_second_command_builds_no_validator(tmp_path: Path) -> None:
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    cache = tmp_path / "cache"
    first = _load_in_child(cache, spec)
    assert "pydantic" in str(first["built"])  # it validated
    entries = list((cache / "specs").glob("*.json"))
    assert len(entries) == 1 and (cache / "specs").stat().st_mode & 0o077 == 0
    second = _load_in_child(cache, spec)
    assert second["built"] == []
    assert second["digest"] == first["digest"] == load_spec(spec).digest
    assert second["edits"] == first["edits"]
    # Another text is another entry; a text that does not validate is refused, never kept.
    spec.write_text(SPEC_A.replace("kimi_k2", "kimi_k3"))
    assert _load_in_child(cache, spec)["built"] != []
    assert len(list((cache / "specs").glob("*.json"))) == 2
    spec.write_text(SPEC_A + "\nbogus = 1\n")
    with pytest.raises(SpecError, match="bogus"):
        load(spec)
    assert len(list((cache / "specs").glob("*.json"))) == 2


def test_an_entry_that_is_not_its_own_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Torn, renamed, or open to others: validated again (and the same spec comes out)."""
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    monkeypatch.delenv("VPATCH_NO_CACHE", raising=False)
    monkeypatch.setenv("VPATCH_CACHE_DIR", str(tmp_path / "cache"))
    want = load(spec)
    (entry,) = (tmp_path / "cache" / "specs").glob("*.json")
    good = entry.read_bytes()
    loaded: list[bytes] = []
    real = parse_spec

    def counted(raw: bytes, path: Path | str) -> PatchSpec:
        loaded.append(raw)
        return real(raw, path)

    monkeypatch.setattr("patcher.specs.model.parse_spec", counted)
    assert load(spec) == want and loaded == []  # the entry, as stored
    spoiled = {
        "torn": good[: len(good) // 2],
        "another text's": good.replace(entry.stem.encode(), b"0" * 40),
        "not JSON": b"\0\0\0",
    }
    for why, data in spoiled.items():
        entry.write_bytes(data)
        entry.chmod(0o600)
        assert load(spec) == want, why
        assert len(loaded) == 1, why
        loaded.clear()
    entry.write_bytes(good)
    entry.chmod(0o666)
    assert load(spec) == want and len(loaded) == 1
