"""bench/project.py: the measured parts read from rows, and the projection's arithmetic."""

from __future__ import annotations

import math

from bench.project import Parts, parts, table, wall


def _row(name: str, hosts: int, rtt: float, wall_s: float, ctl: float, hosts_cpu: float) -> dict:
    return {
        "name": name,
        "hosts": hosts,
        "rtt_ms": rtt,
        "wall_s": {"median": wall_s},
        "controller_cpu_s": {"median": ctl},
        "hosts_cpu_s": {"median": hosts_cpu},
    }


def test_parts_take_latency_at_one_host_and_cpu_per_extra_host() -> None:
    rows = [
        _row("vpatch-apply", 1, 30.0, 0.8, 0.25, 0.05),
        _row("vpatch-apply", 8, 30.0, 1.5, 0.60, 0.40),
        _row("vpatch-rollback", 1, 30.0, 9.9, 9.9, 9.9),  # not a tool of the table
    ]
    got = parts(rows)
    assert list(got) == [("vpatch-apply", 30.0)]
    p = got[("vpatch-apply", 30.0)]
    assert p.latency == 0.8
    assert math.isclose(p.per_host, 0.05) and math.isclose(p.fixed, 0.20)
    assert math.isclose(p.host_cpu, 0.05)


def test_wall_is_the_larger_of_the_wait_and_the_controllers_cpu() -> None:
    p = Parts(latency=0.8, fixed=0.2, per_host=0.05, host_cpu=0.05)
    assert wall(p, 10, 2, None) == 0.8  # (0.2 + 0.5) / 2 < 0.8
    assert math.isclose(wall(p, 1000, 2, None), (0.2 + 50) / 2)
    assert math.isclose(wall(p, 1000, 16, None), (0.2 + 50) / 16)
    assert math.isclose(wall(p, 1000, 16, 1), 0.2 + 50)  # one process: one core


def test_table_has_a_line_per_tool_and_rtt() -> None:
    rows = [_row(n, h, 2.0, 0.5, 0.1 * h, 0.01 * h) for n in ("floor", "pyinfra") for h in (1, 8)]
    lines = table(parts(rows))
    assert len(lines) == 2 + 2
    assert lines[2].startswith("| floor (`ssh host sed -i`) | 2 | 0.50 | 100.0 | 10.0 |")
