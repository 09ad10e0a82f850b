"""bench.bigdiff's goal line: vpatch diff against its own floor + 3x `diff -u`, for the vpatch
measured and for the one it is measured `--against`."""

from __future__ import annotations

from bench.bigdiff import bound_check


def _med(value: float) -> dict[str, float]:
    return {"median": value, "min": value, "max": value}


def test_the_goal_line_says_met_or_missed_and_by_how_much() -> None:
    wall = {
        "vpatch": _med(0.135),
        "floor": _med(0.125),
        "diff_u": _med(0.005),
        "vpatch_against": _med(0.152),
        "floor_against": _med(0.125),
    }
    assert bound_check(wall) == (
        "vpatch diff 0.135 s vs floor + 3x diff -u = 0.125 + 3 x 0.005 = 0.140 s: met "
        "(+5.0 ms to spare)"
    )
    assert bound_check(wall, "_against").endswith("= 0.140 s: MISSED (-12.0 ms to spare)")
