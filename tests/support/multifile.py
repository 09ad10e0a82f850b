"""A three-file patch of the stand-in package (tests/standin.py), for transaction tests.

One variant changes `servekit/config.py` and `servekit/__init__.py` and adds the module
`servekit/aux.py`: a real pip install with a real RECORD, so "pristine" means RECORD's bytes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from patcher.specs.model import PatchSpec, load_spec
from tests import envs
from tests.support.specs import edit, probe, spec_toml

FILES = ("servekit/__init__.py", "servekit/aux.py", "servekit/config.py")

# The probe needs all three changes, the aux module's as the spec's own text has it.
ALL_THREE = probe(
    "all three changes load",
    "servekit.aux",
    "import servekit, servekit.config\n"
    "from types import SimpleNamespace as NS\n"
    "assert servekit.EAGLE3 and module.AUX_LAYERS == (2, 16, 29)\n"
    'assert servekit.config.SpecConfig.verify(NS(model_type="kimi_k2"))\n',
)


def spec_text(aux_layers: str = "(2, 16, 29)", probes: bool = True) -> str:
    """The three-file spec; `aux_layers` is what the added module says (another value than
    the probe's makes the probe fail after every write)."""
    return spec_toml(
        id="servekit-eagle3",
        summary="accept kimi_k2, mark the package, add the aux module",
        package="servekit",
        versions=">=1.0",
        file="servekit/config.py",
        edits=[
            edit(
                "ensure_elements", scope="SpecConfig.verify", target="supported", values=["kimi_k2"]
            ),
            edit(
                "insert_statement",
                file="servekit/__init__.py",
                match='__version__ = "1.0.0"',
                code="EAGLE3 = True",
            ),
            edit("add_file", file="servekit/aux.py", text=f"AUX_LAYERS = {aux_layers}\n"),
        ],
        probes=[ALL_THREE] if probes else [],
    )


@dataclass
class MultiTarget:
    """The files of one environment as the test process sees them."""

    root: Path
    spec: PatchSpec
    pristine: dict[str, bytes | None] = field(default_factory=dict)
    patched: dict[str, bytes | None] = field(default_factory=dict)

    @property
    def site(self) -> Path:
        return envs.site_packages(self.root)

    @property
    def state(self) -> Path:
        return self.root / ".vpatch"

    def now(self) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for rel in FILES:
            p = self.site / rel
            out[rel] = p.read_bytes() if p.exists() else None
        return out

    def temps(self) -> list[Path]:
        found = list((self.site / "servekit").glob(".vpatch-*.tmp"))
        return found + list((self.state / "backups").glob(".vpatch-*.tmp"))

    def reset(self) -> None:
        shutil.rmtree(self.state, ignore_errors=True)
        for tmp in self.temps():
            tmp.unlink()
        for rel, data in self.pristine.items():
            p = self.site / rel
            if data is None:
                p.unlink(missing_ok=True)
            else:
                p.write_bytes(data)


def write_spec(dest: Path, probe: bool = True) -> PatchSpec:
    path = dest / "multi.toml"
    path.write_text(spec_text(probes=probe))
    return load_spec(path)


def target(root: Path, spec: PatchSpec) -> MultiTarget:
    """Pristine bytes from the env as installed; patched bytes from the spec's own edits."""
    from patcher.rewrite import apply_edits

    t = MultiTarget(root, spec)
    t.pristine = t.now()
    for rel, edits in spec.variant[0].files():
        before = t.pristine[rel]
        t.patched[rel] = apply_edits((before or b"").decode(), edits).source.encode()
    assert t.pristine["servekit/aux.py"] is None
    return t
