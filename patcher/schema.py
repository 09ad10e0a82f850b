"""`vpatch schema`: the JSON Schema of the spec format, generated from the pydantic models.

Generated, never hand-written, so editor completion (taplo / Even Better TOML read a
`#:schema ./vpatch-spec.schema.json` first line) can never disagree with what `load_spec`
accepts. The schema covers field names, types, enums and required fields; the rules that span
fields (non-overlapping ranges, `target` xor `param`, code that parses) stay in `vpatch check`.
"""

from __future__ import annotations

from typing import Any

from patcher import __version__
from patcher.spec import PatchSpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def spec_schema() -> dict[str, Any]:
    schema = PatchSpec.model_json_schema()
    head: dict[str, Any] = {
        "$schema": DIALECT,
        "title": "vpatch patch spec",
        "description": (
            f"A vpatch patch spec (TOML), vpatch {__version__}. Cross-field rules are checked "
            "by `vpatch check`."
        ),
    }
    return head | {k: v for k, v in schema.items() if k not in ("title", "description")}
