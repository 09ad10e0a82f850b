"""Run the vpatch.core patch_agent module the way Ansible would, in process: its answer for
one request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests import scale
from tests.conftest import REPO


def run_agent_module(args: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The patch_agent module run as Ansible runs it on a target (a script reading its
    arguments file), under the ansible venv's interpreter; its JSON result."""
    import subprocess

    module = REPO / "ansible_collections/vpatch/core/plugins/modules/patch_agent.py"
    argfile = tmp / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(
        [str(scale.ansible_bin() / "python"), str(module), str(argfile)],
        capture_output=True,
        text=True,
        cwd=tmp,
        env=scale.child_env(),
        timeout=300,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
