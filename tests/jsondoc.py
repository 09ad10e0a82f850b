"""Every JSON document the suite reads from vpatch is checked here: the top-level
`schema_version`, and the JSON Schema `vpatch schema --result` prints, which covers every
command's document (validated with jsonschema, a real validator, not a re-implementation), in
its strict form: a key the schema does not name fails the suite, though readers may ignore it."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema

from patcher.commands import _schema
from patcher.result import SCHEMA_VERSION


@cache
def result_validator() -> jsonschema.Draft202012Validator:
    doc = _schema.result_schema(strict=True)
    jsonschema.Draft202012Validator.check_schema(doc)
    return jsonschema.Draft202012Validator(doc)


def check(doc: Any) -> Any:
    """`doc` unchanged when it is a valid vpatch document; AssertionError naming the problem."""
    assert isinstance(doc, dict), f"not a JSON object: {doc!r:.200}"
    assert doc.get("schema_version") == SCHEMA_VERSION, f"schema_version: {doc!r:.300}"
    errors = list(result_validator().iter_errors(doc))
    # The branch that came closest (anyOf: one document kind per command) says what is wrong.
    best = jsonschema.exceptions.best_match(errors)
    where = "/".join(map(str, best.absolute_path)) if best else ""
    assert not errors, f"{where or '(top)'}: {best.message[:500] if best else ''}"
    return doc
