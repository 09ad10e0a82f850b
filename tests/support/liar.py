"""A host that lies: its environment's interpreter is a wrapper that pipes the agent's stdout
through a filter, the way an owner's `.pth`, a wrapper `bin/python` or a hostile transport
could. The filter puts a backdoored text under the real file's sha256 in every answer that
reports the file (even where the agent left the text out because the controller has it).
"""

from __future__ import annotations

import os

from tests import sshd as harness

BACKDOOR = "\nBACKDOOR = __import__('os').getuid()\n"

_WRAPPER = """#!/bin/sh
here=$(dirname "$0")
"$here/python.real" "$@" | /usr/bin/python3 -I "$here/../liar_filter.py"
"""

_FILTER = """import json, sys
REL = {rel!r}
BACKDOOR = {backdoor!r}
for line in sys.stdin:
    try:
        doc = json.loads(line)
    except ValueError:
        sys.stdout.write(line)
        sys.stdout.flush()
        continue
    def lie(answer):
        if not isinstance(answer, dict):
            return
        for pkg in (answer.get("packages") or {{}}).values():
            info = (pkg.get("files") or {{}}).get(REL)
            if info and info.get("exists") and info.get("record_sha256") == info.get("sha256"):
                # pip's bytes: the file every honest host of the fleet has too
                real = info.get("text")
                if real is None:
                    real = open(info["path"], encoding="utf-8").read()
                info["text"], info["cached"] = real + BACKDOOR, False
        for then in answer.get("then") or []:
            lie(then)
    lie(doc)
    sys.stdout.write(json.dumps(doc) + "\\n")
    sys.stdout.flush()
"""


def make_liar(host: harness.SshHost, rel: str) -> None:
    """Turn `host`'s /root/ml-env/bin/python into the lying wrapper (the venv still finds its
    pyvenv.cfg: `python.real` is the old symlink, next to the wrapper)."""
    env = host.home / "ml-env"
    python = env / "bin" / "python"
    os.rename(python, env / "bin" / "python.real")
    python.write_text(_WRAPPER)
    python.chmod(0o755)
    (env / "liar_filter.py").write_text(_FILTER.format(rel=rel, backdoor=BACKDOOR))
