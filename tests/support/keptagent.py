"""The agent's code kept on a host (patcher/transports/bundle.py, `kept_boot`), as tests see it:
where a lab host keeps it, and a planted bundle whose every module leaves a marker if run."""

from __future__ import annotations

import binascii
import json
import zlib
from pathlib import Path

from patcher.transports.bundle import agent_bundle, agent_key


def kept_dir(home: Path) -> Path:
    """The cache directory under a host user's home (the lab's /root, or the non-root home)."""
    return home / ".cache" / "vpatch" / "agent"


def kept_file(home: Path) -> Path:
    return kept_dir(home) / f"{agent_key()}.bundle"


def planted_bundle(marker: str) -> bytes:
    """A well-formed bundle in the controller's own layout (length header, every module's
    source zlib+base64) whose every module first writes `marker` (a path on the host): what
    an attacker would put under the real bundle's name. No code objects, so any loader that
    ran it would compile, and run, the planted source."""
    doc = json.loads(agent_bundle())
    out: dict[str, str] = {}
    for name, value in doc.items():
        if name == "#child":
            out[name] = value
        elif not name.startswith("#"):
            source = zlib.decompress(binascii.a2b_base64(value))
            plant = f"open({marker!r}, 'a').write('ran\\n')\n".encode()
            out[name] = binascii.b2a_base64(zlib.compress(plant + source), newline=False).decode()
    body = json.dumps(out)
    size = len('{"#n": "0000000000", ') + len(body)  # the header takes body's "{"; the newline
    return (f'{{"#n": "{size:010d}", ' + body[1:]).encode() + b"\n"


def code_file(home: Path, magic: bytes) -> Path:
    """Where a host keeps the agent's code objects compiled for its interpreter's magic."""
    return kept_dir(home) / f"{agent_key()}.{magic.hex()}.code"
