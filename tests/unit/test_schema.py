"""`vpatch schema`: the JSON Schema editors complete from must accept what vpatch accepts.

Validated with jsonschema (a real Draft 2020-12 validator): the catalog spec passes, mistakes
fail where `vpatch check` would fail them too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema

from patcher._compat import tomllib
from patcher.specs import check
from patcher.specs.model import EDIT_OPS
from tests.conftest import SPEC, vpatch


def errors(value: Any, schema: dict[str, Any]) -> list[str]:
    """Every violation as `.path.to[0].field: message` (`.` alone for the top level)."""
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for e in validator.iter_errors(value):
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        out.append(f"{where or '.'}: {e.message}")
    return out


def schema_doc() -> dict[str, Any]:
    res = vpatch("schema")
    assert res.code == 0 and res.err == ""
    doc: dict[str, Any] = json.loads(res.out)
    return doc


def test_catalog_spec_validates_and_mistakes_do_not() -> None:
    schema = schema_doc()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["required"]) >= {"id", "summary", "package", "variant"}
    jsonschema.Draft202012Validator.check_schema(schema)
    spec = tomllib.loads(SPEC.read_text())
    assert errors(spec, schema) == []

    bad = json.loads(json.dumps(spec))
    bad["colour"] = "red"
    bad["variant"][0]["edit"][0]["op"] = "frobnicate"
    del bad["summary"]
    found = errors(bad, schema)
    assert any(e.startswith(".: ") and "'colour' was unexpected" in e for e in found), found
    assert any(e.startswith(".: ") and "'summary' is a required" in e for e in found), found
    assert any(e.startswith(".variant[0].edit[0]: ") for e in found), found


def test_edit_ops_are_a_tagged_union_for_completion() -> None:
    """Editors offer the fields of the op being written: the union is keyed by `op`."""
    schema = schema_doc()
    edit = schema["$defs"]["Variant"]["properties"]["edit"]["items"]
    assert edit["discriminator"]["propertyName"] == "op"
    assert set(edit["discriminator"]["mapping"]) == set(EDIT_OPS)
    described = schema["$defs"]["Variant"]["properties"]["versions"]["description"]
    assert "PEP 440" in described


def test_id_description_and_pattern_agree_with_check(tmp_path: Path) -> None:
    """`$id` names the schema; every property says what it is (editors show it on hover); the
    `id` pattern accepts exactly the ids `vpatch check` accepts."""
    schema = schema_doc()
    assert schema["$id"] == "urn:vpatch:schema:spec"
    models = {"PatchSpec": schema, **schema["$defs"]}
    missing = [
        f"{name}.{field}"
        for name, model in models.items()
        for field, prop in model.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert missing == []
    pattern = re.compile(schema["properties"]["id"]["pattern"])
    spec = SPEC.read_text()
    for sid in ("a", "vllm-fix.2_b", "x" * 100, "x" * 101, "Servekit", "-a", "a b", "é", ""):
        path = tmp_path / f"{sid or 'empty'}.toml"
        path.write_text(spec.replace('id = "vllm-eagle3-mla-targets"', f"id = {json.dumps(sid)}"))
        by_check = not any(p.field == "id" for p in check.check([str(path)]).problems)
        assert bool(pattern.search(sid)) == by_check, sid
