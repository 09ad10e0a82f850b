"""What the catalog's real-wheel tests share: RECORD hashes, and the releases on which each
spec's probes are run both ways (FAIL on the pristine files, PASS on the patched ones).

The tables live here, not in the test modules that run them, so tests/unit/test_catalog_probes.py
can hold every catalog spec to them without importing a test module.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# vllm-eagle3-mla-targets (tests/integration/test_vllm_local.py): (version, list name, whether
# the release writes the list on one line).
TARGETS_BOTH_WAYS = [
    ("0.11.0", "eagle3_target_supported", True),
    ("0.16.0", "eagle3_target_supported", False),
    ("0.17.0", "aux_hidden_states_supported", False),
]

# vllm-eagle3-mla-backport (tests/integration/test_vllm_backport.py).
BACKPORT_BOTH_WAYS = ["0.16.0", "0.17.0"]

# spec id -> releases its probes are run both ways on; every edit variant needs one.
BOTH_WAYS: dict[str, list[str]] = {
    "vllm-eagle3-mla-targets": [v for v, *_ in TARGETS_BOTH_WAYS],
    "vllm-eagle3-mla-backport": BACKPORT_BOTH_WAYS,
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
