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
    if _guessing(req):
        fp = protocol.fingerprint(out)
        out["fingerprint"] = fp
        if out.get("incomplete"):
            return
    chain = _chain_of(req, out.get("fingerprint"))
    if chain is None and _guessing(req):
        return  # no guess was made on this answer: a plain inspect's
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


def ends(req: Any, out: Answer) -> bool:
    """PURE: whether the session ends with this answer (protocol.LAST). Only when the caller
    said it sends nothing more and nothing asks it to: the request ran and went well (ok,
    complete, every check passed), and where a chain rode with it, that chain ran to its end,
    every answer went well, and its own last request says "last" (a guess that missed leaves
    the session open: the caller's commit follows)."""
    if not isinstance(req, dict) or not _clean(out):
        return False
    if "then_if" in req or "then" in req:
        chain = _chain_of(req, out.get("fingerprint"))
        answers = out.get("then")
        if not isinstance(chain, list) or not isinstance(answers, list) or not chain:
            return False
        if len(answers) != len(chain) or not all(_clean(a) for a in answers):
            return False
        return isinstance(chain[-1], dict) and chain[-1].get(protocol.LAST) is True
    return req.get(protocol.LAST) is True


def _guessing(req: Answer) -> bool:
    """An inspect that carries guesses (`then_if`): its chain depends on its answer."""
    return req.get("op") == "inspect" and "then_if" in req


def _chain_of(req: Answer, fingerprint: Any) -> Any:
    """The chain `req` names: a guessing inspect's under its answer's fingerprint (None where
    it made no guess on that answer), else its `then`."""
    if _guessing(req):
        table = req.get("then_if")
        return table.get(fingerprint) if isinstance(table, dict) else None
    return req.get("then")


def _clean(answer: Any) -> bool:
    """An answer that went well: ok, complete, and every check it ran passed."""
    if not isinstance(answer, dict) or answer.get("ok") is not True or answer.get("incomplete"):
        return False
    checks = answer.get("checks")
    return not isinstance(checks, list) or all(
        isinstance(c, dict) and c.get("ok") is True for c in checks
    )


def _allowed(sub: Any) -> bool:
    return (
        isinstance(sub, dict)
        and sub.get("op") in CHAINED_OPS
        and "then_if" not in sub
        and "then" not in sub
    )
