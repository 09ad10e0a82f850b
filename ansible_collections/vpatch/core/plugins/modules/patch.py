#!/usr/bin/python
"""Documentation of `vpatch.core.patch`; the work is done by the action plugin of that name.

Ansible runs the action plugin (plugins/action/patch.py) on the controller for this task name;
this file exists for `ansible-doc vpatch.core.patch` and fails if it is ever run on a target.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: patch
short_description: Apply, verify or roll back vpatch specs on the target's Python environment
description:
  - Declarative, verified, reversible source patches for installed Python packages, as
    C(vpatch apply), C(vpatch verify) and C(vpatch rollback) do them, on any host Ansible
    reaches (any connection plugin, with C(become) when site-packages is root-owned).
  - The spec is loaded and the rewrite (libcst) is computed on the controller; only vpatch's
    stdlib agent runs on the target, through the module M(vpatch.core.patch_agent). The
    controller's Python (the one running ansible-playbook) needs vpatch installed
    (C(pip install vpatch)); the target needs only Python 3.9+ in the environment it patches.
  - C(changed) is true only when file bytes changed (or would, in check mode).
version_added: 0.1.0
options:
  spec:
    description:
      - Spec files (TOML) or catalog ids. A relative path is looked up like C(copy)'s C(src)
        (the role's or playbook's C(files/), then the playbook directory).
    type: list
    elements: str
    required: true
  state:
    description:
      - C(present) applies (then verifies what it wrote, restoring the previous bytes if the
        verify fails); C(absent) rolls back to the bytes from before vpatch, re-applying the
        specs that stay; C(verified) only checks, and fails unless every spec is in effect.
    type: str
    choices: [present, absent, verified]
    default: present
  python:
    description:
      - Interpreter of the environment to patch, on the target. Default, the interpreter
        Ansible runs modules with there (C(ansible_python_interpreter)).
    type: str
  trusted_python:
    description:
      - The root-owned interpreter on the target that starts vpatch's agent when the module
        runs as root (C(become)), with C(-I -S). It checks who owns the environment and runs
        O(python) as that user, so the owner's code (its C(.pth) files) never runs as root.
        It must be root's, and its directories writable by no one else.
    type: str
    default: /usr/bin/python3
  level:
    description:
      - How deep to verify. C(static) hashes and anchors; C(import) also imports the module in
        a fresh C(python -I); C(full) also runs the spec's probes.
    type: str
    choices: [static, import, full]
    default: full
  state_dir:
    description: Journal and backup directory on the target (default C(<sys.prefix>/.vpatch)).
    type: str
  force:
    description:
      - Patch a file that is not pristine per pip's RECORD; roll back a file that drifted.
    type: bool
    default: false
  catalog:
    description: >-
      Directory of C(<id>.toml) specs for ids (default C($VPATCH_CATALOG), ./patches, then the
      catalog shipped with vpatch).
    type: path
  timeout:
    description: Seconds for each agent call on the target.
    type: float
    default: 600
  restart:
    description:
      - Makes a O(state=present) task a rollout of this host, as C(vpatch rollout) does it
        (baseline, apply, restart, health, window, gates); this command runs on the target
        after the patch is written and verified, through C(sh -c) as the agent's user (root
        with C(become)), e.g. C(systemctl restart vllm). A non-zero exit fails the step.
      - When a step after the apply fails (restart, health, window, gates) the specs are rolled
        back (exact bytes), the command runs again and health is awaited again; the task then
        fails with the step and the numbers (result key C(rollout)). Use the play's C(serial)
        (and C(max_fail_percentage)) as the fleet policy; a failed canary batch stops the play.
      - In check mode no rollout runs; the task is the dry run of O(state=present).
    type: str
  restart_timeout:
    description: Seconds after which the restart command is killed (its process group).
    type: float
    default: 600
  health_url:
    description:
      - A rollout option (see O(restart)). Polled on the target (C(localhost) is the serving
        host) after the restart until it answers 200, for up to O(health_timeout) seconds.
    type: str
  health_timeout:
    description: Seconds to wait for O(health_url) to answer 200 (a large model loads for minutes).
    type: float
    default: 900
  metrics_url:
    description:
      - A rollout option (see O(restart)). The target's Prometheus endpoint (vLLM's
        C(/metrics)), scraped on the target before the patch (baseline) and after the
        restart, over O(window) seconds each; the deltas are gated by the spec's C([metrics])
        table, O(min_acceptance) and O(min_throughput_ratio).
    type: str
  window:
    description: Seconds each measurement lasts, before and after; ends early at O(min_drafts).
    type: float
    default: 120
  min_drafts:
    description: End a measurement once this many drafts were seen (0, always the full window).
    type: int
    default: 100
  min_acceptance:
    description:
      - Gate, draft acceptance rate after the restart (C(0.4) or C(40%)); overrides the spec's
        C([metrics] min_acceptance_rate).
    type: str
  min_throughput_ratio:
    description:
      - Gate, generation tokens/s after / before the patch (e.g. C(0.95)); overrides the
        spec's C([metrics] min_tokens_per_s_ratio).
    type: str
  allow_no_traffic:
    description:
      - A gate that cannot be computed (no drafts or no tokens in the window) passes instead
        of failing.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: A dry run; only the read-only inspect call reaches the target.
  diff_mode:
    support: full
    description: The unified diff of every file that changes (or would).
notes:
  - The result is the document of C(vpatch ... --json) (key C(vpatch)), with one host.
author:
  - vpatch developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Let EAGLE-3 drafters target Kimi-K2 / DeepSeek-V3
  vpatch.core.patch:
    spec: files/vllm-eagle3-mla-targets.toml
    python: /srv/vllm/bin/python
  become: true

- name: Check that it is still in effect (fails if not)
  vpatch.core.patch:
    spec: vllm-eagle3-mla-targets
    catalog: /etc/vpatch/patches
    state: verified
    python: /srv/vllm/bin/python

# In a play with `serial: 1` (or a canary batch first: `serial: [1, "25%"]`) and
# `max_fail_percentage: 0`: a host that serves worse is rolled back and stops the play.
- name: Patch, restart, wait for health, gate on the live metrics (rolled back if worse)
  vpatch.core.patch:
    spec: files/vllm-eagle3-mla-backport.toml
    python: /srv/vllm/bin/python
    restart: systemctl restart vllm
    health_url: http://localhost:8000/health
    metrics_url: http://localhost:8000/metrics
    min_acceptance: "0.4"
    min_throughput_ratio: "0.95"
  become: true

- name: Roll back to the bytes pip installed
  vpatch.core.patch:
    spec: files/vllm-eagle3-mla-targets.toml
    state: absent
    python: /srv/vllm/bin/python
"""

RETURN = r"""
vpatch:
  description: The document of C(vpatch apply|rollback|verify --json) for this host.
  returned: always
  type: dict
outcomes:
  description: Spec id to outcome (applied, already_applied, would_apply, would_roll_back, ...).
  returned: always
  type: dict
restart_required:
  description: Processes of the environment still running the code from before the write.
  returned: always
  type: list
rollout:
  description:
    - With a rollout option (O(restart), O(health_url), O(metrics_url)), what C(vpatch rollout
      --json) says of the host - C(verdict) (kept, rolled_back, not_enough_evidence,
      not_applied, untouched, attention), C(reached), every phase with its times, the
      baseline and after measures and each gate.
  returned: when a rollout ran
  type: dict
msg:
  description: One line per spec, outcome and message.
  returned: always
  type: str
"""


# Below the documentation, as ansible-test's validate-modules wants.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.vpatch.core.plugins.module_utils.patch_args import (  # noqa: E402
    ARGUMENT_SPEC,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(
        msg="vpatch.core.patch runs as an action plugin on the controller; "
        "this module body should never run on a target"
    )


if __name__ == "__main__":
    main()
