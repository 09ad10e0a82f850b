"""What every transport says when an agent call ends without an answer, in one place.

Local subprocess, SSH, Ray and the Ansible action each run the agent their own way, but a call
that timed out, an agent killed by a signal and a connection or node lost mid-call mean the
same thing to the operator everywhere: the commit is atomic, so the files are pristine or fully
patched, and only a fresh look tells which. The words were written four times and had drifted
("agent timed out" here, "...; outcome unknown" there); these constructors are the one copy.
"""

from __future__ import annotations

from patcher.errors import HostError

UNKNOWN = "outcome unknown"


def status_hint(how: str = "`vpatch status`") -> str:
    """The one thing to do after an unknown outcome; `how` names the command for this
    transport (`vpatch status --ray ...`, the playbook's `state: verified`)."""
    return f"files are either pristine or fully patched; {how} tells which"


def timed_out(target: str, seconds: float, how: str = "`vpatch status`") -> HostError:
    return HostError(
        f"{target}: agent call timed out after {seconds:g}s; {UNKNOWN}", status_hint(how)
    )


def killed(target: str, signal: int, how: str = "`vpatch status`") -> HostError:
    return HostError(f"{target}: agent killed by signal {signal}; {UNKNOWN}", status_hint(how))


def lost(
    target: str, what: str = "connection", why: str = "", how: str = "`vpatch status`"
) -> HostError:
    detail = f" ({why})" if why else ""
    return HostError(f"{target}: {what} lost mid-call{detail}; {UNKNOWN}", status_hint(how))
