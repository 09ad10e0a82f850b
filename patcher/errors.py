"""One error tree for every failure vpatch expects, so the CLI can print `error:`/`hint:` and exit.

    VpatchError                 exit 1 unless a subclass says otherwise
    ├── InputError              exit 2: bad input, nothing was contacted or written
    │   ├── SpecError           a spec file is unreadable or invalid (names file and field)
    │   └── UsageError          command-line arguments that make no sense together
    └── HostError               exit 1: a target could not be inspected or changed
        ├── Unreachable         no connection: refused, timed out, no route, no such name
        ├── Unsupported         exit 2: what the target holds is not patchable (editable)
        └── AgentError          the on-host agent answered with an error (or garbage)

Every error carries a `hint`: the one thing the user should try next.
"""

from __future__ import annotations


class VpatchError(Exception):
    """Base of all expected failures; `str(err)` is the one-line message."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class InputError(VpatchError):
    exit_code = 2


class SpecError(InputError):
    pass


class UsageError(InputError):
    pass


class HostError(VpatchError):
    pass


class Unreachable(HostError):
    """No connection to the target at all (refused, timed out, no route, a name that does not
    resolve): nothing there was asked, so nothing is known of its state. A monitor tells it
    apart from a host that answered and is not as vpatch left it (`vpatch status`'s per-host
    `state`, patcher/plan/monitor.py), as a host check is told apart from a service check."""


class Unsupported(HostError):
    """A target holds something vpatch does not patch (an editable install): exit 2, like bad
    input, since no run will ever succeed on it as it is; nothing was written."""

    exit_code = 2


class AgentError(HostError):
    """`kind` is the agent's error kind (patcher.agent.protocol): what the controller decides
    on, never the message text."""

    def __init__(self, message: str, hint: str = "", kind: str = "") -> None:
        super().__init__(message, hint)
        self.kind = kind
