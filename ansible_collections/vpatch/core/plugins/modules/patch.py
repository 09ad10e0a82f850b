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
