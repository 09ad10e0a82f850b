"""`vpatch schema`: the JSON Schemas of the spec format and of the `--json` result document.

Both are generated, never hand-written. The spec schema comes from the pydantic models, so
editor completion (taplo / Even Better TOML read a `#:schema ./vpatch-spec.schema.json` first
line) can never disagree with what `load_spec` accepts; it covers field names, types, enums and
required fields, while the rules that span fields (non-overlapping ranges, `target` xor `param`,
code that parses) stay in `vpatch check`. The result schema comes from the dataclasses of
`patcher.result`, whose `asdict()` IS the document, so a field added there is in the schema too.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from patcher import __version__, result
from patcher.catalog import ID as _ID
from patcher.spec import PatchSpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# URNs: stable names that claim no web address (a schema store or editor maps them to a file).
SPEC_ID = "urn:vpatch:schema:spec"
RESULT_ID = "urn:vpatch:schema:result"


def spec_schema() -> dict[str, Any]:
    schema = PatchSpec.model_json_schema()
    head: dict[str, Any] = {
        "$schema": DIALECT,
        "$id": SPEC_ID,
        "title": "vpatch patch spec",
        "description": (
            f"A vpatch patch spec (TOML), vpatch {__version__}. Cross-field rules are checked "
            "by `vpatch check`."
        ),
    }
    body = {k: v for k, v in schema.items() if k not in ("title", "description")}
    body["properties"]["id"]["pattern"] = _ID.pattern  # the same regex `vpatch check` applies
    return head | body


# ---------------------------------------------------------------------------------------------
# The result document


def _type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema of one annotation of a result dataclass (the types those use, no more)."""
    origin, args = get_origin(tp), get_args(tp)
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp in simple:
        return {"type": simple[tp]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_type_schema(a, defs) for a in args]}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placed first: a recursive reference finds it
            defs[name] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for {tp!r} (patcher.schema._type_schema)")


def _object_schema(cls: type[Any], defs: dict[str, Any]) -> dict[str, Any]:
    hints = get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.repr]
    out: dict[str, Any] = {"type": "object"}
    doc = " ".join((cls.__doc__ or "").split())
    if doc and not doc.startswith(f"{cls.__name__}("):  # not the generated signature
        out["description"] = doc
    out["properties"] = {f.name: _type_schema(hints[f.name], defs) for f in fields}
    # asdict() writes every field, so every one is required; an unknown key is a new contract.
    out["required"] = [f.name for f in fields]
    out["additionalProperties"] = False
    return out


def result_schema() -> dict[str, Any]:
    """`vpatch schema --result`: what `apply|verify|rollback|status|ensure --json` print, either
    the result (`RunResult`) or, when vpatch stopped on an error, the error document."""
    defs: dict[str, Any] = {}
    run = _type_schema(result.RunResult, defs)
    version = {"const": result.SCHEMA_VERSION, "description": "version of the document format"}
    top = defs["RunResult"]
    top["properties"] = {"schema_version": version, **top["properties"]}
    top["required"] = ["schema_version", *top["required"]]
    defs["Error"] = {
        "type": "object",
        "description": "Printed instead of a result when vpatch stops on an error (exit 2 for "
        "bad input or usage, 1 when e.g. a cluster cannot be listed); the same text is on "
        "stderr as `error:` and `hint:` lines. Commands may add keys (check: `problems`).",
        "properties": {
            "schema_version": version,
            "error": {"type": "string", "description": "what is wrong (the `error:` line)"},
            "hint": {"type": "string", "description": "what to try next (the `hint:` line)"},
        },
        "required": ["schema_version", "error", "hint"],
    }
    return {
        "$schema": DIALECT,
        "$id": RESULT_ID,
        "title": "vpatch result document",
        "description": f"The --json document of vpatch {__version__} "
        f"(schema_version {result.SCHEMA_VERSION}).",
        "anyOf": [run, {"$ref": "#/$defs/Error"}],
        "$defs": defs,
    }
