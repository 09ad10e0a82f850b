"""Record that a write's checks passed (stdlib only, 3.9+): protocol.VERIFIED.

Why: a commit's checks run after its renames (the chain commit -> verify -> inspect). A run
stopped while they ran (a second Ctrl-C during the probe) left a patch written that nothing
had verified, and `vpatch status` said `applied ... ok`. So such a commit journals its apply
entries as `"verify": "pending"`, and the verify request that passed appends a VERIFIED
entry for its txn and spec, under the environment's lock, as a rollout step is appended.
"""

from __future__ import annotations

import os

from . import protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def record(rec: dict[str, Any]) -> None:
    """Append the VERIFIED entry `rec` names ({"txn", "spec", "state_dir"}) (fsync'ed)."""
    from . import lock, statedir
    from .commit import _adopt_state, _append, _ensure_state_dir
    from .facts import state_dir

    txn, spec = rec.get("txn"), rec.get("spec")
    if not isinstance(txn, str) or not isinstance(spec, str) or not txn or not spec:
        raise protocol.Refused("verify: record needs a txn and a spec", protocol.INPUT)
    state = _ensure_state_dir(state_dir(rec))
    try:
        opener = lambda: state.open_file(statedir.LOCK, os.O_RDWR, create=True)  # noqa: E731
        with lock.Locked(state.sub(statedir.LOCK), 60.0, opener):
            _append(state, [protocol.verified_entry(txn, spec)])
    finally:
        _adopt_state(state)
        state.close()
