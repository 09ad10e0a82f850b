"""Ansible's host-range rule (patcher.inventory.hostrange), case by case; tests/unit/
test_ansible_inventory.py asserts the same expansion of ansible-inventory itself."""

from __future__ import annotations

import pytest

from patcher.inventory.hostrange import RangeError, expand, split_port


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("gpu-01", ["gpu-01"]),
        ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[1:3]", ["gpu1", "gpu2", "gpu3"]),
        ("gpu[08:10]", ["gpu08", "gpu09", "gpu10"]),
        ("[a:c].lab", ["a.lab", "b.lab", "c.lab"]),
        ("h[y:B]", ["hy", "hz", "hA", "hB"]),
        ("n[0:10:5]", ["n0", "n5", "n10"]),
        ("n[a:e:2]", ["na", "nc", "ne"]),
        ("n[:2]", ["n0", "n1", "n2"]),
        ("r[1:2]-g[1:2]", ["r1-g1", "r1-g2", "r2-g1", "r2-g2"]),
        ("10.0.0.[1:2]", ["10.0.0.1", "10.0.0.2"]),
        ("h[9:1]", []),  # counts up only: no host, as in Ansible
        ("h[1:9:-1]", []),
    ],
)
def test_expand(pattern: str, names: list[str]) -> None:
    assert expand(pattern) == names


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("h[01:100]", "equal-length"),
        ("h[abc]", "begin:end or begin:end:step"),
        ("h[1:2:3:4]", "begin:end or begin:end:step"),
        ("h[1:]", "end value"),
        ("h[1:5:0]", "step must not be 0"),
        ("h[1:5:x]", "not a number"),
        ("h[c:a]", "begin <= end"),
        ("h[a:9]", "neither numbers nor letters"),
        ("h[1:2", r"is not NAME\[BEGIN:END\]"),
    ],
)
def test_what_ansible_refuses(pattern: str, why: str) -> None:
    with pytest.raises(RangeError, match=why):
        expand(pattern)


@pytest.mark.parametrize(
    ("token", "split"),
    [
        ("gpu[01:04]:2222", ("gpu[01:04]", 2222)),
        ("gpu[01:04]", ("gpu[01:04]", None)),
        ("db:5432", ("db", 5432)),
        ("db", ("db", None)),
        ("[fe80::1]:22", ("fe80::1", 22)),
        ("fe80::1", ("fe80::1", None)),  # colons outside a range: an address, not a port
        ("r[1:2]-g[1:2]:22", ("r[1:2]-g[1:2]", 22)),
    ],
)
def test_port_after_the_name(token: str, split: tuple[str, int | None]) -> None:
    assert split_port(token) == split
