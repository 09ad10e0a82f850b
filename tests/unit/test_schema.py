"""`vpatch schema`: the JSON Schema editors complete from must accept what vpatch accepts.

jsonschema is not a dependency, so a small validator for exactly the keywords the generated
schema uses checks the catalog spec against it; a keyword it does not know fails the test, so a
pydantic upgrade that changes the schema's shape cannot pass unnoticed.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

from tests.conftest import SPEC, vpatch

KNOWN = {
    "$schema", "$defs", "$ref", "title", "description", "default", "type", "properties",
    "required", "additionalProperties", "items", "minItems", "minLength", "minimum", "maximum",
    "exclusiveMinimum", "const", "enum", "anyOf", "oneOf", "discriminator",
}  # fmt: skip
TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "number": (int, float),
    "integer": int,
    "boolean": bool,
    "null": type(None),
}


def errors(value: Any, schema: dict[str, Any], root: dict[str, Any], at: str = "") -> list[str]:
    unknown = set(schema) - KNOWN
    assert not unknown, f"validator does not know {unknown} (at {at or 'top'})"
    if "$ref" in schema:
        return errors(value, root["$defs"][schema["$ref"].split("/")[-1]], root, at)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            ok = [s for s in schema[key] if not errors(value, s, root, at)]
            if not ok or (key == "oneOf" and len(ok) > 1):
                return [f"{at}: {len(ok)} of {key} match"]
    out: list[str] = []
    t = schema.get("type")
    if t and (not isinstance(value, TYPES[t]) or (isinstance(value, bool) and t != "boolean")):
        return [f"{at}: not {t}"]
    if "const" in schema and value != schema["const"]:
        out.append(f"{at}: != {schema['const']}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{at}: not in {schema['enum']}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        out.append(f"{at}: too short")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            out.append(f"{at}: too few items")
        for i, item in enumerate(value):
            out += errors(item, schema.get("items", {}), root, f"{at}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{at}.{k}: required" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                out += errors(v, props[k], root, f"{at}.{k}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{at}.{k}: not allowed")
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
    spec = tomllib.loads(SPEC.read_text())
    assert errors(spec, schema, schema) == []

    bad = json.loads(json.dumps(spec))
    bad["colour"] = "red"
    bad["variant"][0]["edit"][0]["op"] = "frobnicate"
    del bad["summary"]
    found = errors(bad, schema, schema)
    assert ".colour: not allowed" in found and ".summary: required" in found
    assert any(e.startswith(".variant[0].edit[0]: 0 of oneOf") for e in found), found


def test_edit_ops_are_a_tagged_union_for_completion() -> None:
    """Editors offer the fields of the op being written: the union is keyed by `op`."""
    schema = schema_doc()
    edit = schema["$defs"]["Variant"]["properties"]["edit"]["items"]
    assert edit["discriminator"]["propertyName"] == "op"
    assert set(edit["discriminator"]["mapping"]) == {
        "ensure_elements",
        "remove_elements",
        "set_value",
        "replace_statement",
        "insert_statement",
        "remove_statement",
        "ensure_base",
        "remove_base",
        "ensure_def",
        "ensure_import",
        "set_argument",
    }
    described = schema["$defs"]["Variant"]["properties"]["versions"]["description"]
    assert "PEP 440" in described
