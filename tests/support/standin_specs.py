"""The stand-in package's two specs (tests/standin.py), shared by the engine, fault, hook,
transport and concurrency tests: one accepts kimi_k2 in `SpecConfig.verify`, the other raises
the batch limit, both in `servekit/config.py` and each with a probe that fails without it."""

from __future__ import annotations

from pathlib import Path

from tests import standin
from tests.support.specs import edit, probe, spec_toml

REL = "servekit/config.py"

SPEC_A = spec_toml(
    id="servekit-kimi",
    summary="accept kimi_k2",
    package="servekit",
    versions=">=1.0",
    file=REL,
    edits=[
        edit("ensure_elements", scope="SpecConfig.verify", target="supported", values=["kimi_k2"])
    ],
    # TOML drops the newline that opens a multi-line string: the probe's code without it
    probes=[probe("kimi_k2 accepted", "servekit.config", standin.PROBE.removeprefix("\n"))],
)

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
