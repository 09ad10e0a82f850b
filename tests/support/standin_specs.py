"""The stand-in package's two specs (tests/standin.py), shared by the engine, fault, hook,
transport and concurrency tests: one accepts kimi_k2 in `SpecConfig.verify`, the other raises
the batch limit, both in `servekit/config.py` and each with a probe that fails without it."""

from __future__ import annotations

from pathlib import Path

from tests import standin

REL = "servekit/config.py"

SPEC_A = f"""
id = "servekit-kimi"
summary = "accept kimi_k2"
package = "servekit"
[[variant]]
versions = ">=1.0"
file = "{REL}"
  [[variant.edit]]
  op = "ensure_elements"
  scope = "SpecConfig.verify"
  target = "supported"
  values = ["kimi_k2"]
[[probe]]
name = "kimi_k2 accepted"
module = "servekit.config"
code = '''{standin.PROBE}'''
"""

SPEC_B = f"""
id = "servekit-batch"
summary = "raise the batch limit"
package = "servekit"
[[variant]]
versions = ">=1.0"
file = "{REL}"
  [[variant.edit]]
  op = "set_value"
  target = "LIMITS"
  key = "max_batch"
  value = 64
[[probe]]
name = "batch limit is 64"
module = "servekit.config"
code = "assert module.LIMITS['max_batch'] == 64"
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p
