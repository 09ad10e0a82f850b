"""Hand edits as operators make them (sed -i, an editor): for `vpatch diff`/`capture` tests.

`edit_file` writes like `sed -i` does (a new file renamed over the old one), so hard-link
clones of cached environments (tests/envs.py) are never changed through a shared inode.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

# (file, old, new, the op capture must find): five kinds of hand edit on click 8.1.7, over two
# files. Old texts occur exactly once in their file.
CLICK_VERSION = "8.1.7"
CLICK_EDITS = [
    ("click/types.py", '    name = "boolean"\n', '    name = "bool"\n', "set_value"),
    (
        "click/types.py",
        '{"1", "true", "t", "yes", "y", "on"}',
        '{"1", "true", "t", "yes", "y", "on", "enabled"}',
        "ensure_elements",
    ),
    (
        "click/types.py",
        '        return "BOOL"\n',
        '        return "BOOL"\n\n    def __str__(self) -> str:\n        return "bool"\n',
        "ensure_def",
    ),
    (
        "click/utils.py",
        "class KeepOpenFile:\n",
        "class KeepOpenFile(t.Generic[R]):\n",
        "ensure_base",
    ),
    ("click/utils.py", "    nl: bool = True,\n", "    nl: bool = False,\n", "set_value"),
]

# The seed: what was run on a vLLM 0.16.0 host instead of a patch.
SEED_REL = "vllm/config/speculative.py"
SEED_SED = r's/"afmoe",/"afmoe",\n            "kimi_k2",\n            "deepseek_v3",/'


def edit_file(path: Path, old: str, new: str) -> None:
    text = path.read_text("utf-8")
    assert text.count(old) == 1, f"{path}: {old!r} occurs {text.count(old)} times"
    tmp = path.with_name(path.name + ".edit-tmp")
    tmp.write_text(text.replace(old, new), "utf-8")
    os.replace(tmp, path)


def sed_i(path: Path, expr: str) -> None:
    """GNU sed -i itself (it writes a new file and renames it)."""
    subprocess.run(["sed", "-i", expr, str(path)], check=True)


def record_sha(site: Path, rel: str) -> str:
    """sha256 (hex) pip's RECORD lists for `rel` in the one dist-info that lists it."""
    for record in site.glob("*.dist-info/RECORD"):
        for line in record.read_text().splitlines():
            name, digest, _size = line.rsplit(",", 2)
            if name == rel:
                raw = digest.removeprefix("sha256=")
                return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).hex()
    raise AssertionError(f"{rel} is in no RECORD under {site}")
