"""Which files of a distribution still have RECORD's sha256 (`vpatch diff`'s scan; stdlib, 3.9+).

A large distribution is ~12,000 files (torch), so the cost per file is the cost of the scan:
each directory is walked once (fdwalk: from the distribution's root, no component a link),
and each file in it costs one open relative to that directory, the fstat that checks it and,
in the common case, one read (fdwalk.read_fd) before its hash. On a host with cores, a large
scan hashes in threads (the reads and OpenSSL's sha256 run without the GIL); a small one stays
in one thread with the agent's own sha256, paying for neither threads nor OpenSSL's load.
Every read is still bounded and checked on its descriptor, exactly as scan.py's single reads.
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
PARALLEL_FILES = 1024  # from this many files on, a scan hashes in threads (when it has cores)
MAX_THREADS = 8  # past this, the Python work per file (it holds the GIL) is the limit


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


def threads_for(files: int, cpus: int) -> int:
    """How many threads a scan of `files` files uses on a host with `cpus` usable cores."""
    if files < PARALLEL_FILES or cpus < 2:
        return 1
    return min(cpus, MAX_THREADS)


def check(top: fdwalk.Dir, items: list[tuple[str, str]], limit: int) -> Result:
    """rel -> (SAME | MODIFIED | MISSING | SKIPPED, the bytes when MODIFIED) for each
    (rel, RECORD sha256) below the open distribution root `top`; files over `limit` bytes,
    and what the walk refuses, are SKIPPED."""
    todo, bad = groups(items)
    out: Result = {rel: (SKIPPED, None) for rel in bad}
    n = threads_for(len(items), _cpus())
    sha = _sha256(len(items) >= PARALLEL_FILES)
    if n == 1:
        for group in todo:
            _check_dir(top, group, limit, sha, out)
        return out
    import threading

    lock = threading.Lock()
    queue = iter(todo)
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with lock:
                group = next(queue, None)
            if group is None:
                return
            try:
                _check_dir(top, group, limit, sha, out)
            except BaseException as exc:  # re-raised by the caller's thread below
                errors.append(exc)

    pool = [threading.Thread(target=work, daemon=True) for _ in range(n)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
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


def _cpus() -> int:
    """Cores this process may run on (a container's or taskset's share, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _sha256(large: bool) -> Callable[..., Any]:
    """OpenSSL's sha256 for a large scan (faster, and it releases the GIL while it hashes);
    the agent's own (fsops: no OpenSSL load) for a small one or where hashlib is missing."""
    if large:
        try:
            from hashlib import sha256

            return sha256
        except ImportError:  # pragma: no cover - a build without OpenSSL and _sha2
            pass
    sha: Callable[..., Any] = fsops.SHA256
    return sha
