"""Which files of a distribution still have RECORD's sha256 (`vpatch diff`'s scan; stdlib, 3.9+).

A large distribution is ~12,000 files (torch), so the cost per file is the cost of the scan:
each directory is walked once (fdwalk: from the distribution's root, no component a link),
and each file in it costs one open relative to that directory, the fstat that checks it and,
in the common case, one read (fdwalk.read_fd) before its hash: OpenSSL's sha256 for a large
scan, the agent's own for a small one (no OpenSSL load). Every read is bounded and checked on
its descriptor, exactly as scan.py's single reads.

One thread: on a 16-core H200 host, torch 2.11's 11,839 files took 321-443 ms of wall and CPU
in one thread against 300-396 ms for one plain Python process hashing them (1.07-1.12x), and
more in threads (2: ~410 ms wall, ~540 ms CPU; 4: ~530 / ~765; 8: ~485 / ~745): the Python
work per file holds the GIL, and threads handing it over at every read and hash cost more than
the hashing they overlap (docs/design.md, "What a large environment costs").
"""

from __future__ import annotations

import os

from . import fdwalk, fsops

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

    Group = Tuple[Tuple[str, ...], List[Tuple[str, str, str]]]  # dir components, files in it
    Result = Dict[str, Tuple[str, Optional[bytes]]]  # rel -> (state, bytes when modified)

SAME, MODIFIED, MISSING, SKIPPED = "same", "modified", "missing", "skipped"
OPENSSL_FILES = 1024  # from this many files on, OpenSSL's sha256 pays for its load


def groups(items: list[tuple[str, str]]) -> tuple[list[Group], list[str]]:
    """(rel, sha256) pairs grouped by directory, in first-seen order, and the rels that are
    not plain relative paths (RECORD's `pkg/../../etc/x`: never read, skipped)."""
    by_dir: dict[tuple[str, ...], list[tuple[str, str, str]]] = {}
    bad = []
    for rel, want in items:
        try:
            names = fdwalk.parts(rel)
        except fdwalk.Unsafe:
            bad.append(rel)
            continue
        by_dir.setdefault(tuple(names[:-1]), []).append((rel, names[-1], want))
    return list(by_dir.items()), bad


def check(top: fdwalk.Dir, items: list[tuple[str, str]], limit: int) -> Result:
    """rel -> (SAME | MODIFIED | MISSING | SKIPPED, the bytes when MODIFIED) for each
    (rel, RECORD sha256) below the open distribution root `top`; files over `limit` bytes,
    and what the walk refuses, are SKIPPED."""
    todo, bad = groups(items)
    out: Result = {rel: (SKIPPED, None) for rel in bad}
    sha = _sha256(len(items) >= OPENSSL_FILES)
    for group in todo:
        _check_dir(top, group, limit, sha, out)
    return out


def _check_dir(
    top: fdwalk.Dir, group: Group, limit: int, sha: Callable[..., Any], out: Result
) -> None:
    names, files = group
    try:
        where = top.walk(list(names))
    except OSError as exc:  # gone with its files, or refused by the walk
        state = MISSING if isinstance(exc, FileNotFoundError) else SKIPPED
        for rel, _name, _want in files:
            out[rel] = (state, None)
        return
    with where:
        for rel, name, want in files:
            try:
                fd, st = where.open_checked(name)
            except FileNotFoundError:
                out[rel] = (MISSING, None)
                continue
            except OSError:  # fdwalk.Unsafe, unreadable
                out[rel] = (SKIPPED, None)
                continue
            try:
                data = fdwalk.read_fd(fd, limit, rel, st)
            except OSError:  # fdwalk.TooBig, an I/O error
                out[rel] = (SKIPPED, None)
                continue
            finally:
                os.close(fd)
            out[rel] = (SAME, None) if sha(data).hexdigest() == want else (MODIFIED, data)


def _sha256(large: bool) -> Callable[..., Any]:
    """OpenSSL's sha256 for a large scan (faster per byte); the agent's own (fsops: no OpenSSL
    load) for a small one or where hashlib is missing."""
    if large:
        try:
            from hashlib import sha256

            return sha256
        except ImportError:  # pragma: no cover - a build without OpenSSL and _sha2
            pass
    sha: Callable[..., Any] = fsops.SHA256
    return sha
