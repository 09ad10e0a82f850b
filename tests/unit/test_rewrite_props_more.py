"""More rewrite properties, over layouts and values the golden cases cannot enumerate.

test_rewrite_props.py covers short strings in two layouts. Patched files are reviewed as diffs
and rolled back by replaying edits, so three promises must hold for ANY literal a release may
ship and ANY value a spec may carry:
- ensure_elements then remove_elements of the added values gives back the original BYTES
  (inline, exploded, trailing comma or not, comments, hanging indents; any scalar type; any
  text, control characters and quotes included);
- every op applied twice equals applied once (the second run reports "unchanged");
- bytes outside the edited node never change (a generated module around the target,
  with comments full of odd characters, comes back byte for byte around the edit).
"""

from __future__ import annotations

import ast
from typing import Any

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from patcher.rewrite import apply_edit
from patcher.rewrite._scope import render_literal
from patcher.specs.model import Edit
from tests.support.cases import EDIT

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Characters a comment may hold (no line breaks as Python's tokenizer sees them, no NUL).
comment_text = st.text(
    st.characters(
        blacklist_categories=("Cs",), blacklist_characters="\r\n\x00\x0b\x0c\x1c\x1d\x1e\x85"
    ),
    max_size=12,
)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)
scalars: st.SearchStrategy[JsonValue] = st.one_of(
    texts,
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
json_values: st.SearchStrategy[JsonValue] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
LAYOUTS = ("inline", "inline_comma", "exploded", "exploded_no_comma", "commented", "hanging")


def literal(kind: str, items: list[str], layout: str) -> str:
    """A collection literal in one of the layouts real files use."""
    if not items:
        return {"list": "[]", "tuple": "()", "set": "set()"}[kind]
    o, c = {"list": ("[", "]"), "tuple": ("(", ")"), "set": ("{", "}")}[kind]
    one = kind == "tuple" and len(items) == 1
    if layout in ("inline", "inline_comma"):
        comma = "," if layout == "inline_comma" or one else ""
        return f"{o}{', '.join(items)}{comma}{c}"
    if layout == "hanging":
        return o + (",\n    ").join(items) + ("," if one else "") + c
    lines = [f"    {item}," for item in items]
    if layout == "exploded_no_comma" and not one:
        lines[-1] = lines[-1][:-1]
    if layout == "commented":
        lines[0] += "  # the first one"
        lines.append("    # more below")
    return o + "\n" + "\n".join(lines) + "\n" + c


@st.composite
def modules(draw: Any) -> tuple[str, str, str, str, list[JsonValue]]:
    """(prefix, literal, suffix, kind, existing values): `values = <literal>` at module level,
    between generated statements and comments."""
    kind = draw(st.sampled_from(["list", "tuple", "set"]))
    elem = texts if kind == "set" else scalars
    existing = draw(st.lists(elem, max_size=4, unique_by=lambda v: (type(v), repr(v))))
    if kind == "set":  # a set literal of equal-but-different values is not what we test here
        existing = list(dict.fromkeys(existing))
    quote = draw(st.sampled_from(['"', "'"]))
    lit = literal(
        kind, [render_literal(v, quote) for v in existing], draw(st.sampled_from(LAYOUTS))
    )
    around = st.lists(
        st.one_of(
            comment_text.map(lambda t: f"# {t}\n"),
            json_values.map(lambda v: f"other = {render_literal(v)}\n"),
            st.just("\n"),
            st.just("def helper(a, b=2):\n    return [a,\n            b]\n"),
        ),
        max_size=4,
    )
    prefix = "".join(draw(around))
    suffix = draw(comment_text.map(lambda t: f"  # {t}\n" if t else "\n")) + "".join(draw(around))
    return prefix, lit, suffix, kind, existing


def elements(op: str, values: list[JsonValue]) -> Edit:
    return EDIT.validate_python({"op": op, "scope": "", "target": "values", "values": values})


def fresh(existing: list[JsonValue], new: list[JsonValue]) -> list[JsonValue]:
    """Values of `new` not in `existing`, compared as the ops do (1, 1.0 and True differ)."""

    def key(v: JsonValue) -> tuple[str, str]:
        # -0.0 == 0.0 by value: `+ 0.0` makes them one key, as the ops see them
        return (type(v).__name__, repr(v + 0.0 if isinstance(v, float) else v))

    seen = {key(v) for v in existing}
    out: list[JsonValue] = []
    for v in new:
        if key(v) not in seen:
            seen.add(key(v))
            out.append(v)
    return out


def assigned(source: str) -> Any:
    tree = ast.parse(source)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", "") == "values":
            if isinstance(stmt.value, ast.Call):
                return set()
            return ast.literal_eval(stmt.value)
    raise AssertionError("no `values`")


@PROPS
@given(modules(), st.lists(scalars, min_size=1, max_size=3))
def test_ensure_then_remove_restores_bytes_and_edits_only_the_literal(
    module: tuple[str, str, str, str, list[JsonValue]], new: list[JsonValue]
) -> None:
    prefix, lit, suffix, kind, existing = module
    if kind == "set":
        new = [v if isinstance(v, str) else repr(v) for v in new]
    source = f"{prefix}values = {lit}{suffix}"
    added = apply_edit(source, elements("ensure_elements", new))
    add = fresh(existing, new)
    assume(kind != "set" or all(isinstance(v, str) for v in add))
    if not add:
        assert (added.status, added.source) == ("unchanged", source)
        return
    assert added.status == "changed", added.message
    # Outside the literal, nothing moved.
    assert added.source.startswith(f"{prefix}values = ")
    assert added.source.endswith(suffix)
    value = assigned(added.source)
    want = [*existing, *add]
    assert value == (set(want) if kind == "set" else type(value)(want))
    restored = apply_edit(added.source, elements("remove_elements", add))
    assert restored.status == "changed", restored.message
    assert restored.source == source


@PROPS
@given(modules(), st.lists(scalars, min_size=1, max_size=3), st.sampled_from(["ensure", "remove"]))
def test_element_ops_twice_equal_once(
    module: tuple[str, str, str, str, list[JsonValue]], values: list[JsonValue], which: str
) -> None:
    prefix, lit, suffix, kind, existing = module
    if kind == "set":
        values = [v if isinstance(v, str) else repr(v) for v in values]
    if which == "remove":
        values = values + existing[:1]
    source = f"{prefix}values = {lit}{suffix}"
    edit = elements(f"{which}_elements", values)
    once = apply_edit(source, edit)
    assert once.status in ("changed", "unchanged"), once.message
    twice = apply_edit(once.source, edit)
    assert (twice.status, twice.source) == ("unchanged", once.source)


SETTABLE = """\
LIMITS = {{"max_batch": 8, 'name': "x"}}  # tuned

def budget(tokens, factor={default}, *, scale: float = 1.0):
    return tokens * factor
{suffix}"""


@PROPS
@given(
    json_values,
    st.sampled_from(["rhs", "entry", "new_entry", "default", "kwdefault"]),
    st.sampled_from(["2", "(2)", "[1,\n    2]"]),
    comment_text,
)
@example(value=[], form="rhs", default="2", tail="\\")  # found here: see test below
def test_set_value_twice_equals_once_and_reads_back(
    value: JsonValue, form: str, default: str, tail: str
) -> None:
    assume(value is not None)  # TOML has no null: "no value" means `expr` is set instead
    suffix = f"# {tail}\n"
    source = SETTABLE.format(default=default, suffix=suffix)
    spec: dict[str, Any] = {"op": "set_value", "value": value}
    if form in ("rhs", "entry", "new_entry"):
        spec["target"] = "LIMITS"
        if form != "rhs":
            spec["key"] = "max_batch" if form == "entry" else "extra"
    else:
        spec.update(scope="budget", param="factor" if form == "default" else "scale")
    edit = EDIT.validate_python(spec)
    once = apply_edit(source, edit)
    assert once.status in ("changed", "unchanged"), once.message
    assert once.source.endswith(suffix)  # bytes after the edited node never change
    tree = ast.parse(once.source)
    assign, func = tree.body[0], tree.body[1]
    assert isinstance(assign, ast.Assign) and isinstance(func, ast.FunctionDef)
    if form == "rhs":
        got = ast.literal_eval(assign.value)
    elif form in ("entry", "new_entry"):
        got = ast.literal_eval(assign.value)["max_batch" if form == "entry" else "extra"]
    elif form == "default":
        got = ast.literal_eval(func.args.defaults[0])
    else:
        got = ast.literal_eval(func.args.kw_defaults[0] or ast.Constant(None))
    assert got == value or (got != got and value != value)
    twice = apply_edit(once.source, edit)
    assert (twice.status, twice.source) == ("unchanged", once.source)


STATEMENTS = """\
class Server:
    def start(self):  # {comment}
        self.bind()
        self.listen()
        return True
"""


@PROPS
@given(
    st.sampled_from(["insert_before", "insert_after", "replace", "remove"]),
    json_values,
    comment_text,
)
def test_statement_ops_twice_equal_once(op: str, value: JsonValue, comment: str) -> None:
    source = STATEMENTS.format(comment=comment)
    code = f"self.limit = {render_literal(value)}"
    spec: dict[str, Any] = {"scope": "Server.start", "match": "self.listen()"}
    if op.startswith("insert"):
        spec.update(op="insert_statement", code=code, position=op.split("_")[1])
    elif op == "replace":
        spec.update(op="replace_statement", code=code)
    else:
        spec.update(op="remove_statement")
    edit = EDIT.validate_python(spec)
    once = apply_edit(source, edit)
    assert once.status == "changed", once.message
    head = source.split("        self.bind()\n")[0]
    assert once.source.startswith(head)  # the lines before the edit, byte for byte
    compile(once.source, "<statements>", "exec")
    if op != "remove":
        [stmt] = [
            s
            for s in ast.walk(ast.parse(once.source))
            if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "self.limit"
        ]
        got = ast.literal_eval(stmt.value)
        assert got == value or (got != got and value != value)
    twice = apply_edit(once.source, edit)
    assert (twice.status, twice.source) == ("unchanged", once.source)


def test_file_ending_in_a_backslash_comment_keeps_its_last_byte() -> None:
    """Found by the property above: libcst reads `# ...\\` + newline at the end of a file as
    "no final newline" and dropped that byte from every rewrite (patcher.rewrite._scope
    .parse_module restores it)."""
    source = "values = [1]\nx = {'k': 1}\n# see C:\\\n"
    for spec in (
        {"op": "ensure_elements", "target": "values", "values": [2]},
        {"op": "set_value", "target": "x", "key": "k", "value": 2},
        {"op": "insert_statement", "match": "values = [1]", "code": "y = 2"},
    ):
        res = apply_edit(source, EDIT.validate_python(spec))
        assert res.status == "changed" and res.source.endswith("# see C:\\\n"), res
