"""The structural anchors beyond assignments: class bases, defs, imports, call arguments.

The golden cases pin layouts; these check what must hold for any input: an ensure followed by
the matching remove gives back the original bytes, every op applied twice equals applied once,
the result compiles and says what the edit asked, and two specs editing different members of
one class never undo or block each other.
"""

from __future__ import annotations

import ast
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from patcher.rewrite import apply_edit, apply_edits
from patcher.rewrite._scope import render_literal
from tests.support.cases import EDIT

PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.sampled_from(["Base", "mod.Mixin", "SupportsPP", "Generic[T]", "nn.Module"])
BASE_LAYOUTS = ("none", "inline", "inline_comma", "exploded", "exploded_no_comma")


def class_source(bases: list[str], keywords: list[str], layout: str) -> str:
    args = [*bases, *keywords]
    if not args or layout == "none":
        head = "class Model:" if not args else f"class Model({', '.join(args)}):"
    elif layout.startswith("inline"):
        head = f"class Model({', '.join(args)}{',' if layout == 'inline_comma' else ''}):"
    else:
        lines = [f"    {a}," for a in args]
        if layout == "exploded_no_comma":
            lines[-1] = lines[-1][:-1]
        head = "class Model(\n" + "\n".join(lines) + "\n):"
    return f"# before\n{head}  # the class\n    x = 1\n\n\ndef after():\n    return Model\n"


def base_codes(source: str) -> list[str]:
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    return [ast.unparse(b) for b in cls.bases]


@PROPS
@given(
    st.lists(names, max_size=3, unique=True),
    st.booleans(),
    st.sampled_from(BASE_LAYOUTS),
    names,
)
def test_ensure_then_remove_base_restores_bytes(
    bases: list[str], metaclass: bool, layout: str, new: str
) -> None:
    source = class_source(bases, ["metaclass=Meta"] if metaclass else [], layout)
    ensure = EDIT.validate_python({"op": "ensure_base", "scope": "Model", "value": new})
    added = apply_edit(source, ensure)
    if new in bases:
        assert (added.status, added.source) == ("unchanged", source)
        return
    assert added.status == "changed", added.message
    assert base_codes(added.source) == [*bases, new]  # after the positional bases
    assert ("metaclass=Meta" in added.source) == metaclass
    again = apply_edit(added.source, ensure)
    assert (again.status, again.source) == ("unchanged", added.source)
    remove = EDIT.validate_python({"op": "remove_base", "scope": "Model", "value": new})
    restored = apply_edit(added.source, remove)
    assert restored.status == "changed", restored.message
    assert restored.source == source
    gone = apply_edit(restored.source, remove)
    assert (gone.status, gone.source) == ("unchanged", source)


call_layouts = st.sampled_from(
    ["cached()", "cached(1)", "cached(1, typed=True)", "cached(\n    1,\n    typed=True,\n)"]
)
scalars: st.SearchStrategy[JsonValue] = st.one_of(
    st.text(max_size=8),
    st.integers(-(10**6), 10**6),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)


@PROPS
@given(call_layouts, st.sampled_from(["typed", "maxsize"]), scalars)
def test_set_argument_twice_equals_once_and_reads_back(
    call: str, arg: str, value: JsonValue
) -> None:
    source = f"@{call}\ndef f(x):\n    return x\n"
    spec: dict[str, Any] = {"op": "set_argument", "scope": "f", "call": "cached", "arg": arg}
    edit = EDIT.validate_python({**spec, "value": value})
    once = apply_edit(source, edit)
    assert once.status in ("changed", "unchanged"), once.message
    func = ast.parse(once.source).body[0]
    assert isinstance(func, ast.FunctionDef) and isinstance(func.decorator_list[0], ast.Call)
    [kw] = [k for k in func.decorator_list[0].keywords if k.arg == arg]
    assert ast.literal_eval(kw.value) == value
    assert once.source.endswith("def f(x):\n    return x\n")
    twice = apply_edit(once.source, edit)
    assert (twice.status, twice.source) == ("unchanged", once.source)


heads = st.sampled_from(
    [
        "",
        '"""Doc."""\n',
        '"""Doc."""\n\nfrom __future__ import annotations\n',
        "import os\n",
        "from .interfaces import A, B\n",
        "from .interfaces import (\n    A,\n    B,\n)\n",
        "try:\n    import json\nexcept ImportError:\n    json = None\n",
    ]
)
imports = st.sampled_from(
    [
        "import json",
        "import os.path",
        "import numpy as np",
        "from .interfaces import C",
        "from .interfaces import A, C as D",
        "from ..interfaces import C",
        "from __future__ import annotations",
    ]
)


@PROPS
@given(heads, imports)
def test_ensure_import_twice_equals_once_and_binds_the_names(head: str, code: str) -> None:
    source = f"{head}\n\ndef f():\n    return 1\n"
    edit = EDIT.validate_python({"op": "ensure_import", "code": code})
    once = apply_edit(source, edit)
    assert once.status in ("changed", "unchanged"), once.message
    compile(once.source, "<imports>", "exec")
    wanted = ast.parse(code).body[0]
    assert isinstance(wanted, ast.Import | ast.ImportFrom)
    found = [
        (getattr(n, "module", None), getattr(n, "level", 0), a.name, a.asname)
        for n in ast.walk(ast.parse(once.source))
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    ]
    for alias in wanted.names:
        key = (getattr(wanted, "module", None), getattr(wanted, "level", 0), alias.name)
        assert (*key, alias.asname) in found
    assert once.source.endswith("def f():\n    return 1\n")
    twice = apply_edit(once.source, edit)
    assert (twice.status, twice.source) == ("unchanged", once.source)


@PROPS
@given(
    st.sampled_from(["", "Holder"]),
    st.sampled_from(
        ["def extra(self, n=2):\n    return n\n", "async def extra(self):\n    pass\n"]
    ),
    st.lists(scalars, max_size=3),
)
def test_ensure_def_twice_equals_once(scope: str, code: str, values: list[JsonValue]) -> None:
    items = render_literal(values)
    source = f"class Holder:\n    items = {items}\n\n    def get(self):\n        return 1\n"
    edit = EDIT.validate_python({"op": "ensure_def", "scope": scope, "code": code})
    once = apply_edit(source, edit)
    assert once.status == "changed", once.message
    compile(once.source, "<defs>", "exec")
    twice = apply_edit(once.source, edit)
    assert (twice.status, twice.source) == ("unchanged", once.source)


MODEL = """\
class LlamaForCausalLM(nn.Module, SupportsPP):
    max_draft: int = Field(default=1)

    def __init__(self, config):
        self.archs = ["llama", "mistral"]

    def get_layers(self):
        return (2,)
"""

SPEC_A = [
    {"op": "ensure_base", "scope": "LlamaForCausalLM", "value": "SupportsEagle3"},
    {
        "op": "ensure_def",
        "scope": "LlamaForCausalLM",
        "code": "def get_eagle3_layers(self):\n    return (2, 4)\n",
    },
]
SPEC_B = [
    {
        "op": "set_argument",
        "scope": "LlamaForCausalLM",
        "call": "Field",
        "arg": "default",
        "value": 4,
    },
    {
        "op": "ensure_elements",
        "scope": "LlamaForCausalLM.__init__",
        "containing": ["llama"],
        "values": ["qwen3"],
    },
    {
        "op": "replace_statement",
        "scope": "LlamaForCausalLM.get_layers",
        "match": "return (2,)",
        "code": "return (2, 3)",
    },
]


def test_two_specs_on_one_class_both_hold_in_either_order() -> None:
    """Two specs touching different members of one class: each anchors on its own member,
    so whichever runs first, the second still finds its anchors and both stay applied."""
    a = [EDIT.validate_python(e) for e in SPEC_A]
    b = [EDIT.validate_python(e) for e in SPEC_B]
    for first, second in ((a, b), (b, a)):
        one = apply_edits(MODEL, first)
        assert one.status == "changed", one.message
        both = apply_edits(one.source, second)
        assert both.status == "changed", both.message
        for spec in (a, b):  # a re-run of either spec finds everything in place
            again = apply_edits(both.source, spec)
            assert (again.status, again.source) == ("unchanged", both.source), again.message
        text = both.source
        assert "class LlamaForCausalLM(nn.Module, SupportsPP, SupportsEagle3):" in text
        assert "Field(default=4)" in text and '["llama", "mistral", "qwen3"]' in text
        assert "def get_eagle3_layers(self):" in text and "return (2, 3)" in text
        compile(text, "<model>", "exec")


def guard_source(kind: str, items: list[str], exploded: bool, wrapper: str) -> str:
    """`if arch in <literal>:` (or a frozenset(...) of it) holding `items`, as strings."""
    o, c = {"list": "[]", "tuple": "()", "set": "{}"}[kind]
    quoted = [render_literal(i) for i in items]
    if exploded:
        lit = o + "\n" + "".join(f"        {q},\n" for q in quoted) + "    " + c
    else:
        lit = o + ", ".join(quoted) + ("," if kind == "tuple" and len(items) == 1 else "") + c
    if wrapper:
        lit = f"{wrapper}({lit})"
    return f"def route(arch):\n    if arch in {lit}:  # guard\n        return 1\n    return 0\n"


@PROPS
@given(
    st.sampled_from(["list", "tuple", "set"]),
    st.lists(st.text(max_size=5), min_size=1, max_size=4, unique=True),
    st.booleans(),
    st.sampled_from(["", "frozenset"]),
    st.lists(st.text(max_size=5), min_size=1, max_size=3, unique=True),
)
def test_containing_ensure_then_remove_restores_bytes(
    kind: str, existing: list[str], exploded: bool, wrapper: str, new: list[str]
) -> None:
    source = guard_source(kind, existing, exploded, wrapper)
    anchor: dict[str, Any] = {"scope": "route", "containing": [existing[0]]}
    fresh = [v for v in new if v not in existing]
    added = apply_edit(
        source, EDIT.validate_python({"op": "ensure_elements", **anchor, "values": new})
    )
    if not fresh:
        assert (added.status, added.source) == ("unchanged", source)
        return
    assert added.status == "changed", added.message
    compile(added.source, "<guard>", "exec")
    doomed: list[JsonValue] = list(fresh)
    remove = EDIT.validate_python({"op": "remove_elements", **anchor, "values": doomed})
    restored = apply_edit(added.source, remove)
    assert (restored.status, restored.source) == ("changed", source), restored.message
