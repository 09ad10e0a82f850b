#!/usr/bin/python
"""Runs ONE vpatch agent request on the target; driven by the `vpatch.core.patch` action plugin.

Why the agent travels as an argument instead of living in this file: the controller's vpatch
sends its own agent (`patcher.transports.bundle.agent_bundle()`) and bootstraps (`BOOT`,
`BOOT0`), exactly as the SSH and local transports do. There is one agent source of truth
(patcher/agent/), nothing is generated at build time, and a collection older or newer than the
controller's vpatch can never run a mismatched agent. This file only moves bytes: it starts the
agent as every transport starts it (patcher.transports.bundle.agent_argv), feeds it the bundle
and the request on stdin, and hands back stdout. As root (`become`) that is privsep's stage 0:
the trusted interpreter runs `-I -S -c BOOT0 PYTHON`, decides who owns the environment and
starts its interpreter as that user (patcher/agent/privsep.py), so the owner's `.pth` files
never run as root; else `PYTHON -I -c BOOT`, with the login user's power.

Runs under whatever interpreter Ansible uses on the target (3.8+ syntax here); the agent itself
needs 3.9+ in the environment it patches.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: patch_agent
short_description: Internal - run one vpatch agent request on the target
description:
  - Internal transport of M(vpatch.core.patch); use that module in playbooks.
  - Starts O(python) as C(python -I -c BOOT) with the agent sources and the request on stdin,
    and returns the agent's JSON answer as a string. As root, O(trusted_python) runs
    C(-I -S -c BOOT0) first (vpatch's privilege separation), which starts O(python) as the
    environment's owner.
version_added: 0.1.0
options:
  request:
    description: One agent request, as JSON text.
    type: str
    required: true
  agent:
    description: First stdin line for the bootstrap (agent sources keyed by module name).
    type: str
    required: true
  boot:
    description: The bootstrap program given to C(python -I -c).
    type: str
    required: true
  boot0:
    description:
      - The bootstrap of privsep's stage 0, given to C(trusted_python -I -S -c) when the module
        runs as root. Required then; a root run without it is refused.
    type: str
  trusted_python:
    description:
      - The root-owned interpreter stage 0 runs under as root (checked by stage 0 itself).
    type: str
    default: /usr/bin/python3
  python:
    description: Interpreter of the environment to act on; default the one running this module.
    type: str
  timeout:
    description: Seconds before the agent is killed (the outcome is then unknown).
    type: float
    default: 600
author:
  - vpatch developers (!UNKNOWN)
"""

RETURN = r"""
answer:
  description: The agent's stdout (one JSON document), undecoded.
  returned: always
  type: str
rc:
  description: The agent's exit status.
  returned: always
  type: int
stderr_tail:
  description: The last lines of the agent's stderr, for error messages.
  returned: always
  type: str
"""

EXAMPLES = r"""
# Not for playbooks: the vpatch.core.patch action plugin calls it, with the controller's agent.
- name: Apply a spec (runs vpatch.core.patch_agent underneath)
  vpatch.core.patch:
    spec: vllm-eagle3-mla-targets
    python: /srv/venv/bin/python
"""

# Below the documentation, as ansible-test's validate-modules wants.
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

# Ops that never write: the only ones allowed in check mode (a second guard; the action plugin
# never sends a commit in check mode).
READ_ONLY_OPS = frozenset(("inspect", "verify", "procs", "fetch"))


def would_write(request, depth=0):
    """Whether `request` may write, looking into every request it chains (`then`, and each
    chain of `then_if`, patcher/agent/chain.py): a read-only op that carries a commit writes.
    Anything not understood here counts as a write."""
    if not isinstance(request, dict) or request.get("op") not in READ_ONLY_OPS:
        return True
    chained = []
    for key in ("then", "then_if"):
        if key not in request:
            continue
        value = request[key]
        chains = list(value.values()) if key == "then_if" and isinstance(value, dict) else [value]
        for chain in chains:
            if not isinstance(chain, list):
                return True
            chained.extend(chain)
    return bool(chained) and (depth > 2 or any(would_write(r, depth + 1) for r in chained))


def agent_argv(python, root, params):
    """How the agent starts, as patcher.transports.bundle.agent_argv says (written out here:
    the module runs where vpatch is not installed): as root, privsep's stage 0 under the
    trusted interpreter; else the environment's interpreter itself."""
    if root:
        return [params["trusted_python"], "-I", "-S", "-c", params["boot0"], python]
    return [python, "-I", "-c", params["boot"]]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            # no_log: a request carries whole file texts (commit) and probe code; Ansible logs
            # module arguments to the target's syslog/journal unless told not to.
            request=dict(type="str", required=True, no_log=True),
            # no_log: 40 kB of source would otherwise go to the target's syslog on every call.
            agent=dict(type="str", required=True, no_log=True),
            boot=dict(type="str", required=True),
            boot0=dict(type="str"),
            trusted_python=dict(type="str", default="/usr/bin/python3"),
            python=dict(type="str"),
            timeout=dict(type="float", default=600),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        request = json.loads(params["request"])
        op = request.get("op")
    except (ValueError, AttributeError):
        module.fail_json(msg="request is not a JSON object", kind="protocol")
    if module.check_mode and would_write(request):
        what = f"op {op!r}" if op not in READ_ONLY_OPS else f"op {op!r} chaining a write"
        module.fail_json(msg=f"refusing agent {what} in check mode", kind="check_mode")
    python = params["python"] or sys.executable
    if os.geteuid() == 0 and not params["boot0"]:
        module.fail_json(
            msg="refusing to run the agent as root without privsep's stage 0 (boot0)",
            kind="privsep",
        )
    argv = agent_argv(python, os.geteuid() == 0, params)
    payload = params["agent"].encode("utf-8")
    if not payload.endswith(b"\n"):
        payload += b"\n"
    payload += params["request"].encode("utf-8")
    try:
        proc = subprocess.run(
            argv,
            input=payload,
            capture_output=True,
            timeout=params["timeout"],
            check=False,  # the agent's exit status is part of the answer
        )
    except FileNotFoundError:
        if argv[0] != python:
            module.fail_json(
                msg=f"the trusted interpreter {argv[0]!r} (trusted_python) is not on the host",
                kind="python_missing",
            )
        module.fail_json(msg=f"python {python!r} not found on the host", kind="python_missing")
    except PermissionError:
        module.fail_json(msg=f"python {argv[0]!r} is not executable here", kind="python_missing")
    except subprocess.TimeoutExpired:
        module.fail_json(
            msg=f"agent timed out after {params['timeout']:g}s; outcome unknown", kind="timeout"
        )
    if proc.returncode == 127 and not proc.stdout.strip() and argv[0] != python:
        # stage 0 found no interpreter at `python`: the same words as without it
        module.fail_json(msg=f"python {python!r} not found on the host", kind="python_missing")
    tail = "\n".join(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-5:])
    module.exit_json(
        changed=False,
        answer=proc.stdout.decode("utf-8", "replace"),
        rc=proc.returncode,
        stderr_tail=tail,
    )


if __name__ == "__main__":
    main()
