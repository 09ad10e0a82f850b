"""Unified diffs on real code: every `.py` file that changed between vLLM 0.16.0 and 0.17.0
(their wheels, from the test cache: tests/envs.py), diffed by vpatch and applied by GNU
`patch`, and diffed by GNU `diff -u` and applied by vpatch's parser (`vpatch backport`'s).
Two of them lack a final newline (`vllm_flash_attn/__init__.py`): the case the marker is
for. The counts go to the run's summary."""

from __future__ import annotations

import zipfile

import pytest

from patcher.authoring import udiff
from patcher.plan import base
from tests import envs
from tests.support import gnudiff


def _changed() -> list[tuple[str, str, str]]:
    old = zipfile.ZipFile(envs.wheel("vllm", "0.16.0", base=False))
    new = zipfile.ZipFile(envs.wheel("vllm", "0.17.0", base=False))
    with old, new:
        both = sorted(
            {n for n in old.namelist() if n.endswith(".py")}
            & {n for n in new.namelist() if n.endswith(".py")}
        )
        out = []
        for name in both:
            a, b = old.read(name), new.read(name)
            if a != b:
                out.append((name, a.decode(), b.decode()))
        return out


def test_every_changed_file_round_trips(record_property: pytest.RecordProperty) -> None:
    changed = _changed()
    no_newline = [n for n, a, b in changed if not a.endswith("\n") or not b.endswith("\n")]
    refused: list[str] = []
    for name, old, new in changed:
        ours = base.unified_diff(name, old, new)
        try:
            if gnudiff.patch(old, ours) != new:
                refused.append(f"{name}: patch made other text of vpatch's diff")
        except AssertionError as exc:
            refused.append(f"{name}: patch refused vpatch's diff: {exc}")
        gnus = f"--- a/{name}\n+++ b/{name}\n" + gnudiff.diff_u(old, new)
        [fp] = udiff.parse(gnus)
        if udiff.apply(old, fp) != new:
            refused.append(f"{name}: vpatch's parser made other text of diff -u's")
    record_property(
        "conformance",
        f"unified diffs, vLLM 0.16.0 -> 0.17.0: {len(changed) - len(refused)} of "
        f"{len(changed)} changed .py files round-trip through GNU diff and patch "
        f"({len(no_newline)} without a final newline)",
    )
    assert no_newline  # the case this suite is for is in the data
    assert not refused, "\n".join(refused)
