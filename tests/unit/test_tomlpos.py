"""tomlpos finds where a field is written, so `vpatch check` can say FILE:LINE:COL."""

from __future__ import annotations

from patcher.specs import tomlpos

TEXT = '''\
id = "x"
"summary" = 'quoted key'
references = [
  "a = b",
]

[[variant]]
versions = ">=1"
  [[variant.edit]]
  op = "ensure_elements"
  [[variant.edit]]
  op = "remove_elements"

[[variant]]
versions = ">=2"
  [[ variant.edit ]]
    values.deep = 1

[[probe]]
code = """
name = "not a key: inside a string"
[[variant]]
"""
name = "real"
inline = """one line"""
after = 1

[metrics]
min_acceptance_rate = 0.4
'''


def line_of(field: str) -> tuple[int, int]:
    return tomlpos.locate(TEXT, field)


def test_keys_tables_and_counts_per_parent() -> None:
    assert line_of("id") == (1, 1)
    assert line_of("summary") == (2, 1)  # a quoted key
    assert line_of("variant[0]") == (7, 1)
    assert line_of("variant[0].edit[1].op") == (12, 3)
    assert line_of("variant[1].edit[0]") == (16, 3)  # edits count per variant
    assert line_of("variant[1].edit[0].values.deep") == (17, 5)  # dotted key
    assert line_of("metrics.min_acceptance_rate") == (29, 1)


def test_strings_are_not_keys_or_headers() -> None:
    assert line_of("probe[0].name") == (24, 1)  # not the `name =` inside the code string
    assert "variant[2]" not in tomlpos.positions(TEXT)
    assert line_of("probe[0].after") == (26, 1)  # a one-line """ string opens nothing
    assert line_of("references") == (3, 1)


def test_unwritten_fields_point_at_their_table() -> None:
    assert line_of("variant[0].file") == (7, 1)  # missing: its [[variant]]
    assert line_of("variant[0].edit[0].values[3]") == (9, 3)
    assert line_of("colour") == (1, 1) and line_of("(top level)") == (1, 1)
    assert tomlpos.error_position("Invalid value (at line 4, column 9)") == (4, 9)
    assert tomlpos.error_position("Invalid statement (at end of document)") is None
