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
    # A rollout (state=present only): restart, health and live-metric gates, rolled back when
    # worse; the same steps as one host of `vpatch rollout` (patcher.rollout.walk).
    "restart": {"type": "str"},
    "restart_timeout": {"type": "float", "default": 600},
    "health_url": {"type": "str"},
    "health_timeout": {"type": "float", "default": 900},
    "metrics_url": {"type": "str"},
    "window": {"type": "float", "default": 120},
    "min_drafts": {"type": "int", "default": 100},
    "min_acceptance": {"type": "str"},
    "min_throughput_ratio": {"type": "str"},
    "allow_no_traffic": {"type": "bool", "default": False},
}

# The options that make a `state: present` task a rollout.
ROLLOUT_TRIGGERS = ("restart", "health_url", "metrics_url")
