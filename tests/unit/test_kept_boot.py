"""The loaders that look for the agent kept on the host (bundle.kept_boot): what stage 0 reads
after a miss, in a real interpreter on a real pipe.

Stage 0 shares its stdin with the worker it becomes or starts, so after a miss it must take
exactly the bundle's line and never a byte past it, whatever came before it (a request the
controller sent before it heard of the miss, cut short or whole) and however the pipe splits
the bytes (the bundle's header across reads). The rest of the stream is the worker's.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time

import pytest

from patcher.transports.bundle import BOOT, BOOT0, agent_bundle, agent_key, kept_boot

# Runs the kept BOOT0 up to its lookup, then only the miss reader: what it returns, and what
# is left on stdin for the worker.
_READER = """
l=R()
rest=sys.stdin.buffer.read()
from hashlib import blake2b
os.write(1,(blake2b(l,digest_size=32).hexdigest()+' %d\\n'%len(l)).encode()+rest)
"""


def _reader(boot: str) -> str:
    head = boot[: boot.index("l=G()\n")]
    return head + _READER


def _feed(code: str, pieces: list[bytes]) -> bytes:
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    for piece in pieces:
        proc.stdin.write(piece)
        proc.stdin.flush()
        time.sleep(0.005)  # (only makes separate reads likelier; the result must not care)
    proc.stdin.close()
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    return out


BUNDLE = agent_bundle()
CUT = b'{"op": "commit", "files": "' + b"a" * 100_000  # a request cut short, then "\n"


@pytest.mark.parametrize(
    "pieces",
    [
        [b'{"op": "inspect"}\n', b"\n" + BUNDLE + b'{"op": "inspect"}\n'],
        [b'{"op": "inspect"}\n\n', BUNDLE[:5], BUNDLE[5:13], BUNDLE[13:19], BUNDLE[19:]],
        [CUT, b"\n", BUNDLE[:9], BUNDLE[9:4100], BUNDLE[4100:], b'{"op": "inspect"}\n'],
        [b"\n" + BUNDLE + b'{"op": "inspect"}\n'],
    ],
    ids=["request-first", "header-split", "cut-request", "bundle-only"],
)
def test_stage0_reads_exactly_the_bundle_after_a_miss(pieces: list[bytes]) -> None:
    out = _feed(_reader(kept_boot(BOOT0, agent_key())), pieces)
    head, _, rest = out.partition(b"\n")
    assert head.decode() == f"{agent_key()} {len(BUNDLE)}"
    sent = b"".join(pieces)
    assert rest == sent[sent.index(BUNDLE) + len(BUNDLE) :]  # the worker's, every byte


def test_plain_loader_skips_to_the_bundle_line() -> None:
    out = _feed(_reader(kept_boot(BOOT, agent_key())), [CUT, b"\n" + BUNDLE + b"next\n"])
    head, _, rest = out.partition(b"\n")
    assert head.decode() == f"{agent_key()} {len(BUNDLE)}" and rest == b"next\n"


def test_the_key_is_the_bundles_blake2b() -> None:
    assert agent_key() == hashlib.blake2b(BUNDLE, digest_size=32).hexdigest()
    assert agent_key() in kept_boot(BOOT, agent_key())
    assert agent_key() in kept_boot(BOOT0, agent_key())
