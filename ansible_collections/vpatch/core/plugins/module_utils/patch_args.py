"""The options of `vpatch.core.patch`, in one place: the action plugin validates a task with
them, and the documentation-only module declares them, so ansible-test's validate-modules can
hold the documentation to what the plugin really accepts."""

from __future__ import annotations

ARGUMENT_SPEC = {
    "spec": {"type": "list", "elements": "str", "required": True},
    "state": {"type": "str", "default": "present", "choices": ["present", "absent", "verified"]},
    "python": {"type": "str"},
    "trusted_python": {"type": "str", "default": "/usr/bin/python3"},
    "level": {"type": "str", "default": "full", "choices": ["static", "import", "full"]},
    "state_dir": {"type": "str"},
    "force": {"type": "bool", "default": False},
    "catalog": {"type": "path"},
    "timeout": {"type": "float", "default": 600},
}
