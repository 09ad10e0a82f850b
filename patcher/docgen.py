"""Reference pages generated from the code itself, for the docs site (`make docs`).

A hand-written field table drifts the day someone adds a field; these cannot. The mkdocs hook
(`docs/_hooks.py`) replaces each `<!-- vpatch:NAME -->` line of a page with `render(NAME)`:

    spec-fields     every model of the spec format (from `PatchSpec.model_json_schema()`)
    cli             `--help` of every subcommand (from the argparse parser `vpatch` runs)
    result-json     the `--json` document of apply/verify/rollback/status (patcher.result)
    outcomes        outcomes and which ones count as success, per command
    matrix-json     the `vpatch matrix --json` document (patcher.matrix)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from typing import Any, get_args

from patcher import matrix, plan, result
from patcher.clidocs import subcommands
from patcher.spec import PatchSpec

MARKER = re.compile(r"^<!-- vpatch:([a-z-]+) -->$", re.MULTILINE)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type(prop: dict[str, Any]) -> str:
    """A JSON Schema property's type in words: `string`, `list of Probe`, `A | B`, ..."""
    if "$ref" in prop:
        name = str(prop["$ref"]).rsplit("/", 1)[-1]
        return "TOML value" if name == "JsonValue" else name
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " \\| ".join(_type(p) for p in prop[key])
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items", {})
        return f"list of {_type(items)}" if items else "list"
    if kind is None:
        return "any JSON value"
    return str(kind)


def _constraints(prop: dict[str, Any]) -> str:
    words = []
    for key, text in (
        ("minLength", "min length"),
        ("minItems", "at least"),
        ("minimum", ">="),
        ("maximum", "<="),
        ("exclusiveMinimum", ">"),
    ):
        if key in prop:
            words.append(f"{text} {prop[key]}")
    return ", ".join(words)


def _model_table(name: str, schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    lines = [f"### `{name}`", ""]
    if schema.get("description"):
        lines += [" ".join(str(schema["description"]).split()), ""]
    lines += ["| field | type | required | default | meaning |", "|---|---|---|---|---|"]
    for field, prop in schema.get("properties", {}).items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        meaning = " ".join(filter(None, [prop.get("description", ""), _constraints(prop)]))
        row = [
            f"`{field}`",
            _type(prop),
            "yes" if field in required else "",
            default,
            _cell(meaning),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return [*lines, ""]


def _refs(node: Any) -> list[str]:
    """Names of the models `node` refers to, in the order a reader meets them."""
    if isinstance(node, dict):
        own = [str(node["$ref"]).rsplit("/", 1)[-1]] if "$ref" in node else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def spec_fields() -> str:
    """The file's top level first, then each model where a reader first meets it (breadth
    first: Variant, its edit ops, Probe, ...). Aliases without fields (JsonValue) are types."""
    schema = PatchSpec.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    out = _model_table("PatchSpec (the file)", schema)
    queue, seen = _refs(schema.get("properties", {})), set()
    while queue:
        name = queue.pop(0)
        if name in seen or "properties" not in defs.get(name, {}):
            continue
        seen.add(name)
        out += _model_table(name, defs[name])
        queue += _refs(defs[name].get("properties", {}))
    return "\n".join(out)


def cli() -> str:
    """`vpatch --help`, then each subcommand's help, at a fixed width (stable across terminals)."""
    from patcher.commands import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parser = build_parser()
        parts = ["## `vpatch`", "", "```text", parser.format_help().rstrip(), "```", ""]
        for name, sub in subcommands(parser).items():
            parts += [f"## `vpatch {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(parts)


def _dataclass_table(cls: type[Any]) -> list[str]:
    lines = [f"### `{cls.__name__}`", ""]
    doc = (cls.__doc__ or "").strip()
    if doc and not doc.startswith(f"{cls.__name__}("):  # skip the auto-generated signature
        lines += [" ".join(doc.split()), ""]
    lines += ["| key | type | default |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        if not f.repr:
            continue
        if f.default is not dataclasses.MISSING:
            default = f"`{json.dumps(f.default)}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"`{json.dumps(f.default_factory())}`"
        else:
            default = ""
        lines.append(f"| `{f.name}` | `{_cell(str(f.type))}` | {default} |")
    return [*lines, ""]


def result_json() -> str:
    classes = [
        result.RunResult,
        result.HostResult,
        result.PatchResult,
        result.FileChange,
        result.ProbeResult,
    ]
    return "\n".join(line for cls in classes for line in _dataclass_table(cls))


def outcomes() -> str:
    names = get_args(result.Outcome)
    commands = list(result.GOOD)
    lines = [
        "| outcome | " + " | ".join(f"`{c}`" for c in commands) + " |",
        "|---|" + "---|" * len(commands),
    ]
    for name in names:
        marks = ["ok" if name in result.GOOD[c] else "" for c in commands]
        lines.append(f"| `{name}` | " + " | ".join(marks) + " |")
    return "\n".join(lines) + "\n"


def matrix_json() -> str:
    rows = ["| outcome | exit 1? |", "|---|---|"]
    for name in get_args(plan.MatrixOutcome):
        rows.append(f"| `{name}` | {'yes' if name in plan.MATRIX_FAILING else ''} |")
    return "\n".join(_dataclass_table(matrix.Release) + rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "spec-fields": spec_fields,
    "cli": cli,
    "result-json": result_json,
    "outcomes": outcomes,
    "matrix-json": matrix_json,
}


def expand(markdown: str) -> str:
    """Replace every `<!-- vpatch:NAME -->` line; an unknown NAME is an error (strict docs)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise KeyError(f"unknown docs marker vpatch:{name} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]()

    return MARKER.sub(one, markdown)
