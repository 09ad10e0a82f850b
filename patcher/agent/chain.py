"""An inspect and the commit planned for it, in one exchange (`then_if`).

Why: a cached apply over SSH spent one round trip inspecting and another committing, and a
round trip is most of what a one-host apply costs beyond the SSH handshake. The controller
remembers the answers a host gave before (patcher/caches/facts.py), plans on each, and sends the
plans along with the inspect, keyed by the answer's fingerprint (protocol.fingerprint). The
agent runs the chain only when the answer it just made has one of those fingerprints: the
decision was made on exactly the facts the host has. Any other answer (the host changed, or
the controller guessed wrong) runs nothing and goes back as a plain inspect answer, from which
the controller plans as if it had sent no guess: a wrong guess costs the bytes it carried,
never a wrong write. Every write still goes through commit's own checks (lock, expected
hashes, compile) as in the two-step path.
"""

from __future__ import annotations

from . import protocol

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from typing import Any, Callable, Dict, List

# What a chain may run. No nested chains: one exchange, one bounded list.
CHAINED_OPS = ("commit", "verify", "inspect")
MAX_CHAIN = 16

if TYPE_CHECKING:
    Answer = Dict[str, Any]


def run(req: Answer, out: Answer, handle: Callable[[Answer], Answer]) -> None:
    """After a successful request: `then` (any op) runs unconditionally; `then_if` (inspect
    only) puts out["fingerprint"] and runs the chain it names, if any. Answers: out["then"]."""
    if req.get("op") == "inspect" and "then_if" in req:
        fp = protocol.fingerprint(out)
        out["fingerprint"] = fp
        table = req.get("then_if")
        if not isinstance(table, dict) or out.get("incomplete"):
            return
        chain = table.get(fp)
        if chain is None:
            return
    else:
        chain = req.get("then")
    if not isinstance(chain, list):
        out["then"] = [protocol.error(protocol.INPUT, "then: not a list of requests")]
        return
    if len(chain) > MAX_CHAIN or not all(_allowed(r) for r in chain):
        why = "a chain is at most %d requests of %s, none with its own chain"
        out["then"] = [protocol.error(protocol.INPUT, why % (MAX_CHAIN, "/".join(CHAINED_OPS)))]
        return
    answers: List[Answer] = []
    for sub in chain:
        got = handle(sub)
        answers.append(got)
        if not got.get("ok"):
            break
    out["then"] = answers


def _allowed(sub: Any) -> bool:
    return (
        isinstance(sub, dict)
        and sub.get("op") in CHAINED_OPS
        and "then_if" not in sub
        and "then" not in sub
    )
