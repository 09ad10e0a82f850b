"""BLAKE2b hex digests from the interpreter's own C module, without importing `hashlib`.

Why: everything the controller hashes before its first `ssh` starts is on the critical path of
every command (the agent bundle's key, the kept bundle's file name, the shared-connection
config's name), and `hashlib`'s import loads OpenSSL (a few ms). `_blake2` is CPython's own
module, loaded in a fraction of that; it is the same BLAKE2b (the agent's loaders check a kept
bundle with it too). An interpreter without it gets hashlib's, the same digest.
"""

from __future__ import annotations

from collections.abc import Iterable


def blake2b_hex(chunks: Iterable[bytes], digest_size: int = 32) -> str:
    """The BLAKE2b digest (`digest_size` bytes) of the chunks joined, in hex."""
    try:
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover - CPython has it
        from hashlib import blake2b
    h = blake2b(digest_size=digest_size)
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()
