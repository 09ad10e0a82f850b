"""One way for tests to write a patch spec: `spec_toml(...)` builds the TOML text from keyword
arguments, `write_spec` puts it at a tmp path.

Why: the same `id = ... [[variant]] ... [[variant.edit]]` text was written out inline in many
test files, each with its own small formatter; a spec-format change then meant editing every
copy. The builder writes what the spec reference (docs/reference/spec.md) says, from data:
strings as TOML basic strings (json's escapes are TOML's), multi-line code as literal blocks,
so a test says only the fields it cares about. Golden-case data files (tests/cases/) stay as
they are: they are the format's examples, read as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeAlias

# A TOML value as the specs use them: scalars, and lists of them (`values`, `containing`).
Value: TypeAlias = "str | int | float | bool | Sequence[Value] | None"
Table = Mapping[str, Value]


def edit(op: str, **fields: Value) -> dict[str, Value]:
    """One `[[variant.edit]]` table: `op` first, then the fields in the order given."""
    return {"op": op, **fields}


def probe(name: str, module: str, code: str = "", **fields: Value) -> dict[str, Value]:
    """One `[[probe]]` table."""
    return {"name": name, "module": module, **({"code": code} if code else {}), **fields}


def variant(
    versions: str, edits: Sequence[Table], file: str | None = None, **fields: Value
) -> dict[str, object]:
    """One `[[variant]]` (for a spec of several; `spec_toml`'s own arguments make one)."""
    return {"versions": versions, "file": file, "edits": list(edits), **fields}


def spec_toml(
    *,
    id: str,
    package: str,
    edits: Sequence[Table] = (),
    versions: str = ">=0",
    file: str | None = None,
    summary: str | None = None,
    probes: Sequence[Table] = (),
    variants: Sequence[Mapping[str, object]] = (),
    metrics: Table | None = None,
    **top: Value,
) -> str:
    """The spec's TOML text. One variant from `versions`/`file`/`edits`, or `variants=[...]`
    (from `variant(...)`) for several; `top` adds top-level keys (e.g. `references`)."""
    lines = [f"id = {_value(id)}", f"summary = {_value(summary or f'spec {id}')}"]
    lines.append(f"package = {_value(package)}")
    lines += [f"{key} = {_value(value)}" for key, value in top.items() if value is not None]
    if metrics is not None:  # a table after the plain keys, before the arrays of tables
        lines.append("[metrics]")
        lines += [f"{key} = {_value(value)}" for key, value in metrics.items()]
    for var in variants or [variant(versions, edits, file)]:
        lines.append("[[variant]]")
        for key, value in var.items():
            if key != "edits" and value is not None:
                lines.append(f"{key} = {_value(value)}")  # type: ignore[arg-type]
        for one in var["edits"]:  # type: ignore[attr-defined]
            lines.append("  [[variant.edit]]")
            lines += [f"  {k} = {_value(v)}" for k, v in one.items() if v is not None]
    for one in probes:
        lines.append("[[probe]]")
        lines += [f"{k} = {_value(v)}" for k, v in one.items() if v is not None]
    return "\n".join(lines) + "\n"


def write_spec(dest: Path, name: str, text: str) -> Path:
    """`text` at dest/<name>.toml (the spec's id is its file name); the path."""
    path = dest / f"{name}.toml"
    path.write_text(text)
    return path


def _value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # Multi-line source reads best as a literal block (no escapes; TOML drops the newline
        # right after the opening quotes); anything else is a basic string, escaped as TOML says.
        if (
            "\n" in value
            and "'''" not in value
            and all(c.isprintable() or c in "\n\t" for c in value)
        ):
            return f"'''\n{value}'''"
        return '"' + "".join(_ESCAPES.get(c) or _char(c) for c in value) + '"'
    if value is None:
        raise ValueError("TOML has no null")
    return "[" + ", ".join(_value(v) for v in value) + "]"


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _char(c: str) -> str:
    """A character as a basic string may hold it: control characters as \\uXXXX."""
    return f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c


def demo_fix(file: str) -> str:
    """`demo-fix`: `X = "2"` in `file` of the fake `demo` 1.0 wheel (tests/support/wheellab.py's
    fake_wheel), as the wheel-building tests patch it."""
    return spec_toml(
        id="demo-fix",
        summary="demo",
        package="demo",
        versions=">=1.0",
        file=file,
        edits=[edit("set_value", target="X", value="2")],
    )
