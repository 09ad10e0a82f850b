"""The stand-in package's two specs (tests/standin.py), shared by the engine, fault, hook,
transport and concurrency tests: one accepts kimi_k2 in `SpecConfig.verify`, the other raises
the batch limit, both in `servekit/config.py` and each with a probe that fails without it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests import standin
from tests.support.specs import Table, edit, probe, spec_toml

REL = "servekit/config.py"

# SPEC_A's own probe. TOML drops the newline that opens a multi-line string: its code without it.
KIMI = probe("kimi_k2 accepted", "servekit.config", standin.PROBE.removeprefix("\n"))


def spec_a(
    *,
    versions: str = ">=1.0",
    values: Sequence[str] = ("kimi_k2",),
    probes: Sequence[Table] = (KIMI,),
) -> str:
    """SPEC_A, or SPEC_A with another range, other values to ensure or other probes (a probe
    that sleeps, counts its runs, or waits for the test)."""
    return spec_toml(
        id="servekit-kimi",
        summary="accept kimi_k2",
        package="servekit",
        versions=versions,
        file=REL,
        edits=[
            edit(
                "ensure_elements",
                scope="SpecConfig.verify",
                target="supported",
                values=list(values),
            )
        ],
        probes=probes,
    )


SPEC_A = spec_a()

SPEC_B = spec_toml(
    id="servekit-batch",
    summary="raise the batch limit",
    package="servekit",
    versions=">=1.0",
    file=REL,
    edits=[edit("set_value", target="LIMITS", key="max_batch", value=64)],
    probes=[
        probe("batch limit is 64", "servekit.config", "assert module.LIMITS['max_batch'] == 64")
    ],
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p
