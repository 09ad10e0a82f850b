"""Rewrites remembered across runs, on the controller, so that libcst is not even imported when
every file a run meets was rewritten before.

Why: a rewrite is a pure function of (file text, spec, variant, rewrite code), and a fleet meets
the same few file contents again and again: a canary run then the rest, `vpatch verify` after
`vpatch apply`, `vpatch ensure` in a pre-start hook on every restart after a reinstall. Importing
libcst alone costs ~0.3 s of CPU per run, a quarter of a one-host apply.

What is stored: one JSON file per (text sha256, spec digest, "variant index:file", code version)
with the result's status, text and message; only `changed` and `unchanged` results (the ones a run
acts on; an anchor that is missing is re-derived and reported fresh). The code version hashes
the rewrite package's own source and libcst's version file, so any change to how rewrites are
computed is a different key (never a stale hit after an upgrade or an edit of the code).

Where: `$VPATCH_CACHE_DIR`, else `$XDG_CACHE_HOME/vpatch`, else `~/.cache/vpatch`, under
`rewrites/`; `VPATCH_NO_CACHE=1` turns it off. The directory must be the user's own and not
writable by group or others (the entries are code that vpatch writes into site-packages), or it
is not used. The cache can never fail a run: unreadable, corrupt or unwritable = a miss, and
whatever text comes out of it still goes through the agent's compile check and verify.
Writes are atomic (temp file in the same directory, fsync, rename); at most `KEEP` entries are
kept, the least recently written go first.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patcher.transports.ownedfile import read_owned

if TYPE_CHECKING:
    from patcher.rewrite import RewriteResult
    from patcher.specs.model import Edit, PatchSpec

KEEP = 512
MAX_ENTRY_BYTES = 64 * 1024 * 1024  # bigger than any rewrite of an 8 MiB file, JSON-escaped
_STORED = ("changed", "unchanged")


def directory(create: bool = False, sub: str = "rewrites") -> Path | None:
    """The cache directory `sub` (rewrites/, or hosts/ for patcher.caches.facts), or None when
    off, missing (unless `create`: then made 0700) or not safe to use. Only a write creates
    it: reading never leaves anything behind. Checked on every call (a fleet's run calls it a
    few times a host: plain os.stat, no pathlib until the answer)."""
    if os.environ.get("VPATCH_NO_CACHE"):
        return None
    base = os.environ.get("VPATCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vpatch"
    )
    d = os.path.join(base, sub)
    try:
        try:
            st = os.stat(d)
        except FileNotFoundError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode):
            if not create:
                return None
            os.makedirs(base, mode=0o700, exist_ok=True)
            try:
                os.mkdir(d, mode=0o700)
            except FileExistsError:
                pass  # made meanwhile by another run: checked below like any other
            st = os.stat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return None
    if not _safe_parent(base):
        return None
    return Path(d)


def _safe_parent(d: str | Path) -> bool:
    """The directory holding the cache: whoever else could write it could swap the cache."""
    try:
        st = os.stat(d)
    except OSError:
        return False
    return st.st_uid in (os.geteuid(), 0) and not st.st_mode & 0o022


@cache
def code_version() -> str:
    """Hash of everything that decides a rewrite's output besides its inputs."""
    h = hashlib.sha256()
    for f in sorted((Path(__file__).parent.parent / "rewrite").glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    found = importlib.util.find_spec("libcst")  # locates, does not import
    if found is not None and found.origin:
        version = Path(found.origin).parent / "_version.py"
        h.update(version.read_bytes() if version.exists() else found.origin.encode())
    return h.hexdigest()[:16]


def _name(text_sha: str, spec: PatchSpec, index: str) -> str:
    key = hashlib.sha256(f"{text_sha}:{spec.digest}:{index}:{code_version()}".encode())
    return f"{spec.digest}-{key.hexdigest()[:32]}.json"


def covers(specs: list[PatchSpec]) -> bool:
    """True when every spec has at least one entry: the run will most likely need no libcst
    (a hint for prefetching it, not a promise)."""
    d = directory()
    if d is None or not specs:
        return False
    try:
        names = os.listdir(d)
    except OSError:
        return False
    have = {n.split("-", 1)[0] for n in names if n.endswith(".json")}
    return all(s.digest in have for s in specs)


def get(text_sha: str, spec: PatchSpec, index: str) -> RewriteResult | None:
    d = directory()
    if d is None:
        return None
    raw = read_owned(d / _name(text_sha, spec, index), MAX_ENTRY_BYTES)
    try:
        entry = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(entry, dict):
        return None
    want = {"text_sha256": text_sha, "spec": spec.digest, "variant": index, "code": code_version()}
    if any(entry.get(k) != v for k, v in want.items()):
        return None
    status, source, message = entry.get("status"), entry.get("source"), entry.get("message")
    if status not in _STORED or not isinstance(source, str) or not isinstance(message, str):
        return None
    if sha256_of(source) != entry.get("source_sha256"):
        return None  # torn, or edited by hand: not the text it was stored with
    if status == "unchanged" and hashlib.sha256(source.encode()).hexdigest() != text_sha:
        return None
    from patcher.rewrite import RewriteResult

    return RewriteResult(status, source, message)


def put(text_sha: str, spec: PatchSpec, index: str, result: RewriteResult) -> None:
    if result.status not in _STORED:
        return
    d = directory(create=True)
    if d is None:
        return
    entry = {
        "text_sha256": text_sha,
        "spec": spec.digest,
        "variant": index,
        "code": code_version(),
        "status": result.status,
        "source": result.source,
        "source_sha256": sha256_of(result.source),
        "message": result.message,
    }
    write_entry(d, _name(text_sha, spec, index), entry, KEEP)


def write_entry(d: Path, name: str, entry: Any, keep: int) -> None:
    """`entry` as JSON in `d/name`, atomically and never through a planted name
    (patcher.safewrite: a temp file, fsync, rename), then at most `keep` entries kept (prune).
    A cache that cannot be written is a cache that misses next time."""
    from patcher import safewrite

    try:
        safewrite.write(d / name, json.dumps(entry), "the rewrite cache's", 0o600)
        prune(d, keep)
    except (OSError, safewrite.Refused):
        pass


def prune(d: Path, keep: int) -> None:
    """At most `keep` entries in `d` (down to 3/4 of it when over), least recently written
    first; temp files a killed run left are removed after an hour."""
    entries = []
    now = time.time()
    for n in os.listdir(d):
        try:
            mtime = os.stat(d / n).st_mtime
            if n.startswith(".tmp-") and now - mtime > 3600:
                os.unlink(d / n)  # left by a run killed between its write and its rename
            elif not n.startswith(".") and os.path.isfile(d / n):
                entries.append((mtime, n))
        except OSError:
            continue
    if len(entries) <= keep:
        return
    for _mtime, n in sorted(entries)[: len(entries) - keep * 3 // 4]:
        try:
            os.unlink(d / n)
        except OSError:
            continue


class Texts(dict[str, str]):
    """File texts by their sha256, shared by every host of a run: a text is only ever stored
    under the hash of its own bytes (a host that names another file's hash for its text is
    refused here, before any other host can be given it). Reads need no check: nothing else
    got in."""

    def __setitem__(self, sha: str, text: str) -> None:
        if self.get(sha) is not text:
            if not isinstance(text, str) or sha256_of(text) != sha:
                raise ValueError(f"a text does not hash to the sha256 {str(sha)[:16]} it claims")
            super().__setitem__(sha, text)

    def setdefault(self, sha: str, text: str) -> str:
        if sha not in self:
            self[sha] = text
        return self[sha]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for sha, text in dict(*args, **kwargs).items():
            self[sha] = text


def sha256_of(text: str) -> str:
    """The sha256 of a text as the agent hashes the file: its UTF-8 bytes (the agent sends only
    texts that decode strictly); "" for a str no file could hold (a lone surrogate)."""
    try:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except UnicodeEncodeError:
        return ""


@dataclass
class Caches:
    """What a run learns once and reuses on every host: file texts by sha256 (inspect then
    sends only hashes for these) and rewrites by (text sha256, spec digest, variant, file)."""

    content: Texts = field(default_factory=Texts)
    rewrites: dict[tuple[str, str, int, str], RewriteResult] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=lambda: {"parses": 0, "hits": 0})
    lock: threading.Lock = field(default_factory=threading.Lock)
    key_locks: dict[tuple[str, str, int, str], threading.Lock] = field(default_factory=dict)
    # sha256 of the texts rewritten, by the text's identity (the str held, so its id stays
    # its own): a fleet's hosts hand the same few text objects (the content cache's) over.
    shas: dict[int, tuple[str, str]] = field(default_factory=dict)
    # rewrites asked for by each thread (asked()): a plan made once and copied for other
    # hosts (exchange.RunContext.planned) counts the cache hits its rewrites stand for
    calls: threading.local = field(default_factory=threading.local, repr=False)

    def asked(self) -> int:
        """How many rewrites this thread asked this cache for so far."""
        return int(getattr(self.calls, "n", 0))

    def hit(self, n: int) -> None:
        """`n` more rewrites answered from the cache without being asked again (a copied plan's)."""
        with self.lock:
            self.stats["hits"] += n

    def _sha(self, text: str) -> str:
        hit = self.shas.get(id(text))
        if hit is not None and hit[0] is text:
            return hit[1]
        sha = hashlib.sha256(text.encode()).hexdigest()
        if len(self.shas) >= 64:
            self.shas.clear()
        self.shas[id(text)] = (text, sha)
        return sha

    def rewrite(
        self, text: str, spec: PatchSpec, index: int, rel: str, edits: Sequence[Edit]
    ) -> RewriteResult:
        """Single-flight per key: 8 hosts inspected at once with the same file wait for ONE
        parse. Misses go to the on-disk cache of earlier runs (patcher.caches.rewrites)."""
        self.calls.n = self.asked() + 1
        key = (self._sha(text), spec.digest, index, rel)
        hit = self.rewrites.get(key)  # every host after the first: no lock but the count's
        if hit is not None:
            with self.lock:
                self.stats["hits"] += 1
            return hit
        part = f"{index}:{rel}"
        with self.lock:
            key_lock = self.key_locks.setdefault(key, threading.Lock())
        with key_lock:
            hit = self.rewrites.get(key) or get(key[0], spec, part)
            if hit is not None:
                with self.lock:
                    self.stats["hits"] += 1
                    self.rewrites[key] = hit
                return hit
            from patcher.rewrite import apply_edits

            res = apply_edits(text, edits)
            put(key[0], spec, part, res)
            with self.lock:
                self.stats["parses"] += 1
                self.rewrites[key] = res
            return res
