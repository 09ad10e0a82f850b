"""tests/support/specs.py: what the builder writes is TOML that reads back as exactly the values
it was given (any text, multi-line code included), and a spec the model accepts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from patcher._compat import tomllib
from patcher.specs.model import from_data
from tests.support.specs import edit, probe, spec_toml, variant

SCALARS = st.one_of(st.text(), st.integers(), st.booleans(), st.floats(allow_nan=False))


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), SCALARS, max_size=4))
def test_every_value_reads_back_as_given(fields: dict[str, object]) -> None:
    fields.pop("op", None)
    text = spec_toml(id="x", package="p", edits=[edit("set_value", **fields)])
    [one] = tomllib.loads(text)["variant"][0]["edit"]
    assert one == {"op": "set_value", **fields}


@given(st.lists(st.text(), max_size=4), st.text())
def test_lists_and_code_read_back_as_given(values: list[str], code: str) -> None:
    text = spec_toml(
        id="x",
        package="p",
        edits=[edit("ensure_elements", values=values)],
        probes=[probe("p", "m", code)] if code else [],
    )
    data = tomllib.loads(text)
    assert data["variant"][0]["edit"][0]["values"] == values
    assert data.get("probe", [{"code": ""}])[0]["code"] == code


def test_a_built_spec_is_one_the_model_accepts() -> None:
    text = spec_toml(
        id="servekit-two",
        package="servekit",
        references=["docs/spec.md"],
        variants=[
            variant(
                ">=1.0,<2.0",
                [edit("set_value", target="LIMITS", key="max_batch", value=64)],
                file="servekit/config.py",
            ),
            variant(">=2.0", [], upstream="2.0 has it"),
        ],
        probes=[probe("loads", "servekit.config", "import os\nassert module\n", timeout=30)],
        metrics={"max_error_rate": 0.01},
    )
    spec = from_data(tomllib.loads(text))
    assert [v.versions for v in spec.variant] == [">=1.0,<2.0", ">=2.0"]
    assert spec.variant[1].upstream == "2.0 has it" and spec.variant[1].file is None
    assert spec.probe[0].code == "import os\nassert module\n" and spec.probe[0].timeout == 30
    assert spec.summary == "spec servekit-two" and spec.references == ["docs/spec.md"]
