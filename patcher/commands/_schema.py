"""`vpatch schema`: the JSON Schemas of the spec format and of the `--json` result document.

Both are generated, never hand-written. The spec schema comes from the pydantic models, so
editor completion (taplo / Even Better TOML read a `#:schema ./vpatch-spec.schema.json` first
line) can never disagree with what `load_spec` accepts; it covers field names, types, enums and
required fields, while the rules that span fields (non-overlapping ranges, `target` xor `param`,
code that parses) stay in `vpatch check`. The result schema comes from the dataclasses of
`patcher.result`, whose `asdict()` IS the document, so a field added there is in the schema too.
The documents of the other commands (`catalog`, `check`, `diff`, `matrix`, `capture`,
`backport`) are one branch each of the same schema, told apart by `command`; where their rows
are dataclasses (`check.Problem`, `matrix.Release`) those are generated the same way.

Objects do not forbid unknown keys: a key may be added without a `schema_version` bump (the
promise docs/reference/json.md makes), so readers must ignore keys they do not know. The suite
validates against `result_schema(strict=True)`, which forbids them, so no key reaches a
document without reaching this schema first.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from patcher import __version__, result
from patcher.specs.names import ID
from patcher.specs.validate import PatchSpec

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
    body["properties"]["id"]["pattern"] = ID.pattern  # the same regex `vpatch check` applies
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
    raise TypeError(f"no JSON Schema for {tp!r} (patcher.commands._schema._type_schema)")


def _object_schema(cls: type[Any], defs: dict[str, Any]) -> dict[str, Any]:
    hints = get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.repr]
    out: dict[str, Any] = {"type": "object"}
    doc = " ".join((cls.__doc__ or "").split())
    if doc and not doc.startswith(f"{cls.__name__}("):  # not the generated signature
        out["description"] = doc
    out["properties"] = {f.name: _type_schema(hints[f.name], defs) for f in fields}
    # asdict() writes every field, so every one is required.
    out["required"] = [f.name for f in fields]
    return out


# The commands whose document is a RunResult: those with a notion of good outcomes, and
# rollout (patcher/rollout/walk.py), which reports per host through the same model.
RUN_COMMANDS = (*result.GOOD, "rollout")
_STR: dict[str, Any] = {"type": "string"}
_STR_OR_NULL: dict[str, Any] = {"type": ["string", "null"]}
_STRS: dict[str, Any] = {"type": "array", "items": _STR}


def _obj(props: dict[str, Any], optional: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    """An object with these properties, all required but the `optional` ones."""
    required = [k for k in props if k not in optional]
    return {"type": "object", **extra, "properties": props, "required": required}


def _documents(defs: dict[str, Any], version: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The documents of the commands that are not a `RunResult`, by $defs name."""
    from patcher.authoring import handedit
    from patcher.specs import check
    from patcher.wheels import matrix

    def doc(
        command: dict[str, Any],
        description: str,
        props: dict[str, Any],
        optional: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        head = {"schema_version": version, "command": command, "ok": {"type": "boolean"}}
        return _obj(head | props, optional, description=description)

    problem = _type_schema(check.Problem, defs)
    release = _type_schema(matrix.Release, defs)
    states = ["modified", "missing", "added"]
    pristine = [handedit.VPATCH, handedit.WHEEL, handedit.NONE, handedit.UNAVAILABLE]
    file_diff = _obj(
        {
            "file": _STR,
            "path": _STR,
            "state": {"enum": states},
            "sha256": _STR_OR_NULL,
            "record_sha256": _STR_OR_NULL,
            "pristine": {"enum": pristine, "description": "where the pristine side came from"},
            "note": _STR,
            "diff": {"type": "string", "description": "unified diff, pristine -> host"},
        }
    )
    matrix_doc = doc(
        {"const": "matrix"},
        "`vpatch matrix --json`: the spec against each release of its package.",
        {
            "spec": _STR,
            "package": _STR,
            "releases": {"type": "array", "items": release},
            "platforms": {**_STRS, "description": "--platform: the platforms asked for"},
            "no_wheel": {
                **_STRS,
                "description": "releases in range without a wheel for those platforms "
                "(not examined, no row)",
            },
        },
    )
    return {
        "CatalogDocument": doc(
            {"const": "catalog"},
            "`vpatch catalog --json`: every id SPEC can name, from the first catalog that has it.",
            {
                "sources": {"type": "array", "items": _obj({"source": _STR, "path": _STR})},
                "specs": {
                    "type": "array",
                    "items": _obj({"id": _STR, "source": _STR, "path": _STR, "shadows": _STRS}),
                },
            },
        ),
        "CheckDocument": doc(
            {"const": "check"},
            "`vpatch check --json`: every file checked and every problem; with problems also "
            "`error` (the first) and `hint`, as in every failed document.",
            {
                "files": _STRS,
                "problems": {"type": "array", "items": problem},
                "error": _STR,
                "hint": _STR,
            },
            optional=("error", "hint"),
        ),
        "DiffDocument": doc(
            {"const": "diff"},
            "`vpatch diff --json`: the files of a package that differ from pip's RECORD, hosts "
            "with the same answer grouped.",
            {
                "package": _STR,
                "groups": {
                    "type": "array",
                    "items": _obj(
                        {
                            "hosts": _STRS,
                            "version": _STR_OR_NULL,
                            "files": {"type": "array", "items": file_diff},
                            "skipped": _STRS,
                            "baked": {
                                "type": "array",
                                "items": _STR,
                                "description": "the ids of the specs `vpatch wheel` baked "
                                "into the installed wheel (its vpatch.json): its RECORD is "
                                "the patched wheel's, so their files are not pip's",
                            },
                        }
                    ),
                },
                "errors": {
                    "type": "array",
                    "items": _obj({"target": _STR, "error": _STR, "hint": _STR_OR_NULL}),
                },
            },
        ),
        "MatrixDocument": matrix_doc,
        "WheelDocument": doc(
            {"const": "wheel"},
            "`vpatch wheel --json`: the patched wheel written (patcher/wheels/build.py), its "
            "version with the `+vpatch.<digest>` label, and per spec what went into it.",
            {
                "wheel": {"type": "string", "description": "the wheel file written"},
                "sha256": _STR,
                "package": _STR,
                "version": {"type": "string", "description": "the release it was built from"},
                "baked_version": _STR,
                "specs": {
                    "type": "array",
                    "items": _obj(
                        {
                            "id": _STR,
                            "digest": _STR,
                            "variant": {"type": ["integer", "null"]},
                            "outcome": _STR,
                            "files": {
                                "type": "array",
                                "items": _obj(
                                    {
                                        "file": _STR,
                                        "pristine_sha256": _STR_OR_NULL,
                                        "sha256": _STR,
                                    }
                                ),
                            },
                        }
                    ),
                },
            },
        ),
        "CaptureDocument": doc(
            {"enum": ["capture", "backport"]},
            "`vpatch capture --json` / `vpatch backport --json`: the spec written, how each "
            "file's edits were captured, and the matrix over neighbouring releases.",
            {
                "package": _STR,
                "version": _STR,
                "targets": _STRS,
                "diff": _STR,
                "output": _STR_OR_NULL,
                "files": {
                    "type": "array",
                    "items": _obj(
                        {
                            "file": _STR,
                            "edits": {"type": "array", "items": {"type": "object"}},
                            "ops": _STRS,
                            "bytes_identical": {"type": "boolean"},
                        }
                    ),
                },
                "notes": _STRS,
                "spec": {"type": "string", "description": "the spec's TOML text"},
                "matrix": {"anyOf": [matrix_doc, {"type": "null"}]},
                "suggested_versions": _STR_OR_NULL,
            },
            optional=("targets", "diff"),  # capture: the hosts; backport: the diff file
        ),
    }


def _closed(node: Any) -> Any:
    """A copy where every object schema with properties forbids other keys (strict)."""
    if isinstance(node, list):
        return [_closed(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _closed(v) for k, v in node.items()}
    if "properties" in out and out.get("type") == "object":
        out["additionalProperties"] = False
    return out


def result_schema(strict: bool = False) -> dict[str, Any]:
    """`vpatch schema --result`: every `--json` document, told apart by `command`: the result
    of `apply|verify|rollback|status|ensure|rollout` (`RunResult`), `catalog`, `check`, `diff`,
    `matrix`, `wheel`, `capture`/`backport`, or, when vpatch stopped on an error, the error
    document. `strict` forbids keys the schema does not name (what the suite validates with)."""
    defs: dict[str, Any] = {}
    run = _type_schema(result.RunResult, defs)
    version = {"const": result.SCHEMA_VERSION, "description": "version of the document format"}
    top = defs["RunResult"]
    top["properties"] = {"schema_version": version, **top["properties"]}
    top["properties"]["command"] = {"enum": list(RUN_COMMANDS)}
    top["required"] = ["schema_version", *top["required"]]
    documents = _documents(defs, version)
    defs.update(documents)
    defs["Error"] = {
        "type": "object",
        "description": "Printed instead of a result when vpatch stops on an error (exit 2 for "
        "bad input or usage, 1 when e.g. a cluster cannot be listed); the same text is on "
        "stderr as `error:` and `hint:` lines. Commands may add keys (check: `problems`; capture "
        "and backport: `refused`).",
        "properties": {
            "schema_version": version,
            "command": {
                "type": ["string", "null"],
                "description": "the subcommand that stopped, or null when there was none "
                "(no command word, or one vpatch does not know)",
            },
            "ok": {"const": False, "description": "always false: nothing succeeded"},
            "error": {"type": "string", "description": "what is wrong (the `error:` line)"},
            "hint": {"type": "string", "description": "what to try next (the `hint:` line)"},
            "refused": {
                "type": "array",
                "description": "capture/backport: every hunk the spec cannot carry (`error` "
                "names them all too)",
                "items": _obj(
                    {
                        "file": _STR,
                        "hunk": {"type": "integer", "description": "its place in the file's diff"},
                        "header": _STR,
                        "lines": {"type": "array", "items": {"type": "integer"}},
                        "reason": _STR,
                    }
                ),
            },
        },
        "required": ["schema_version", "command", "ok", "error", "hint"],
    }
    out = {
        "$schema": DIALECT,
        "$id": RESULT_ID,
        "title": "vpatch result document",
        "description": f"The --json document of vpatch {__version__} "
        f"(schema_version {result.SCHEMA_VERSION}), by `command`; readers ignore keys they "
        "do not know (keys are added without a schema_version change).",
        "anyOf": [run, *({"$ref": f"#/$defs/{n}"} for n in documents), {"$ref": "#/$defs/Error"}],
        "$defs": defs,
    }
    return _closed(out) if strict else out
