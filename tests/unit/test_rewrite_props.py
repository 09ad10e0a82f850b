"""Property tests for the element ops and literal rendering.

The golden cases pin specific layouts; these check the promises that must hold for any input:
ensure then remove of the same new values gives back the original text, ensure is idempotent,
the result always compiles and holds exactly the expected values, and rendered literals read
back as the value they came from.
"""

from __future__ import annotations

import ast
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from patcher.rewrite._scope import quote_string, render_literal
from patcher.rewrite.elements import ensure, remove
from patcher.specs.model import EnsureElements, RemoveElements

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

short_text = st.text(max_size=6)
kinds = st.sampled_from(["list", "tuple", "set"])
quotes = st.sampled_from(['"', "'"])


def _literal(kind: str, items: list[str], multiline: bool) -> str:
    """Source of a literal laid out the two ways the ops must preserve."""
    if not items:
        return {"list": "[]", "tuple": "()", "set": "set()"}[kind]
    opening, closing = {"list": ("[", "]"), "tuple": ("(", ")"), "set": ("{", "}")}[kind]
    if multiline:
        body = "".join(f"            {item},\n" for item in items)
        return f"{opening}\n{body}        {closing}"
    inner = ", ".join(items) + ("," if kind == "tuple" and len(items) == 1 else "")
    return f"{opening}{inner}{closing}"


def _source(kind: str, existing: list[str], multiline: bool, quote: str) -> str:
    literal = _literal(kind, [quote_string(s, quote) for s in existing], multiline)
    return (
        "class Holder:\n"
        "    def method(self):\n"
        f"        values = {literal}  # trailing comment\n"
        "        return values\n"
    )


def _assigned(source: str) -> Any:
    """The value assigned to `values` in `Holder.method`, evaluated."""
    tree = ast.parse(source)
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef)
    method = cls.body[0]
    assert isinstance(method, ast.FunctionDef)
    assign = method.body[0]
    assert isinstance(assign, ast.Assign)
    if isinstance(assign.value, ast.Call):  # set()
        return set()
    return ast.literal_eval(assign.value)


def _ensure(new: list[str]) -> EnsureElements:
    values: list[JsonValue] = list(new)
    return EnsureElements(
        op="ensure_elements", scope="Holder.method", target="values", values=values
    )


def _remove(doomed: list[str]) -> RemoveElements:
    values: list[JsonValue] = list(doomed)
    return RemoveElements(
        op="remove_elements", scope="Holder.method", target="values", values=values
    )


def _fresh(existing: list[str], new: list[str]) -> list[str]:
    out: list[str] = []
    for value in new:
        if value not in existing and value not in out:
            out.append(value)
    return out


layouts = st.tuples(
    kinds,
    st.lists(short_text, max_size=5, unique=True),
    st.booleans(),
    quotes,
    st.lists(short_text, min_size=1, max_size=4),
)


@FAST
@given(layouts)
def test_ensure_then_remove_restores_the_text(
    layout: tuple[str, list[str], bool, str, list[str]],
) -> None:
    kind, existing, multiline, quote, new = layout
    source = _source(kind, existing, multiline, quote)
    added = ensure(source, _ensure(new))
    fresh = _fresh(existing, new)
    if not fresh:
        assert (added.status, added.source) == ("unchanged", source)
        return
    assert added.status == "changed", added.message
    restored = remove(added.source, _remove(fresh))
    assert restored.status == "changed", restored.message
    assert restored.source == source


@FAST
@given(layouts)
def test_ensure_is_idempotent_and_compiles(
    layout: tuple[str, list[str], bool, str, list[str]],
) -> None:
    kind, existing, multiline, quote, new = layout
    source = _source(kind, existing, multiline, quote)
    first = ensure(source, _ensure(new))
    compile(first.source, "<ensure>", "exec")
    expected = [*existing, *_fresh(existing, new)]
    value = _assigned(first.source)
    assert value == ({*expected} if kind == "set" else type(value)(expected))
    again = ensure(first.source, _ensure(new))
    assert (again.status, again.source) == ("unchanged", first.source)
    assert "# trailing comment" in first.source


@FAST
@given(layouts)
def test_remove_is_idempotent_and_compiles(
    layout: tuple[str, list[str], bool, str, list[str]],
) -> None:
    kind, existing, multiline, quote, doomed = layout
    source = _source(kind, existing + doomed[:1], multiline, quote)
    first = remove(source, _remove(doomed))
    compile(first.source, "<remove>", "exec")
    left = [s for s in existing if s not in doomed]
    value = _assigned(first.source)
    assert value == ({*left} if kind == "set" else type(value)(left))
    again = remove(first.source, _remove(doomed))
    assert (again.status, again.source) == ("unchanged", first.source)


json_values: st.SearchStrategy[JsonValue] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | short_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=8,
)


@FAST
@given(json_values, quotes)
def test_rendered_literals_read_back(value: JsonValue, quote: str) -> None:
    assert ast.literal_eval(render_literal(value, quote)) == value


@FAST
@given(st.text(max_size=20), quotes)
def test_quoted_strings_read_back(text: str, quote: str) -> None:
    rendered = quote_string(text, quote)
    assert ast.literal_eval(rendered) == text
    assert "\n" not in rendered
