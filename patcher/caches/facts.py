"""The inspect answers each host gave in earlier runs, on the controller: the guesses a run
plans on before it has heard from the host (agent/chain.py says how a guess is checked).

Why: most commands meet a host in a state a run has already seen: the pristine bytes a canary
saw on every other host, the state the last apply left for the rollback or the next verify.
Planning on that state ahead lets the inspect and the commit share one exchange.

Nothing read here is trusted. A guess only ever decides a write when the host's own answer has
the same fingerprint (computed here from the stored answer, never stored), and every text is
checked against the sha256 the answer gives it when it is loaded: an edited or corrupt entry is
a guess that does not match, or no guess, never a wrong write.

Where: `hosts/` next to the rewrite cache (patcher.caches.rewrites.directory: same switch, same
ownership rules), in BUCKETS files named by the first two hex digits of each (target, state
dir)'s name: per (target, state dir), per files asked (the inspect's `packages`, newest first,
at most `KEEP_ASKED`), the last `KEEP_PER_HOST` distinct answers, newest first. An inspect that
asks for no package files (`rollback ID`, `status`) is answered from every entry with its
package files left out: the journal is the same. A file per host made a fleet's first run
create one inode per host, the costliest step a controller took per host (ext4 allocating
it: ~30 % of the 10,000-target simulation's CPU on the bench machine); a bucket holds up to
`KEEP_PER_BUCKET` hosts, least recently written out first. A fleet command defers its writes
(Memo.defer) and writes each bucket it touched once, at its end (flush: the bucket read again
and merged, so another run's hosts in it stay); any other caller writes through. Writes are
atomic, not fsync'ed: a torn or lost entry (two runs racing on one bucket) is only a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patcher.agent import protocol
from patcher.caches import rewrites
from patcher.transports.ownedfile import read_owned

KEEP_PER_HOST = 2  # answers per files asked
KEEP_ASKED = 4  # sets of files asked, per host file
BUCKETS = 256  # host files: the first two hex digits of name()
KEEP_PER_BUCKET = 64  # hosts per bucket file: 16,384 in all
KEEP_TEXTS = 1024
MAX_BYTES = 32 * 1024 * 1024  # an entry bigger than this is not read (a cache, not an input)

Answer = dict[str, Any]
_NONE_ASKED = ""  # the tag of an inspect that asks for no package files


@dataclass
class Memo:
    """What one run knows of the cache directory so it asks the disk once: the directory it
    checked, the directories it pruned, and the texts it stored or saw stored (part of
    exchange.RunContext). Entries are still checked on every read, on their descriptor."""

    pruned: set[Path] = field(default_factory=set)
    written: set[tuple[str, str]] = field(default_factory=set)  # (texts dir, sha256)
    checked: Path | None = None  # hosts/, found usable by this run
    texts_made: bool = False  # hosts/texts/ made (or found) by this run
    defer: bool = False  # store() keeps its writes for flush() (a fleet command's memo)
    # bucket file -> {host file name: its document's JSON text}: as this run read or wrote the
    # bucket (read once a run), and what store() has not written yet
    read: dict[str, dict[str, str]] = field(default_factory=dict)
    pending: dict[str, dict[str, str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    flushing: threading.Lock = field(default_factory=threading.Lock, repr=False)


def key(target: str, request: dict[str, Any]) -> str:
    """What an inspect answer depends on besides the host: who asks where, for which files."""
    raw = json.dumps(
        [target, request.get("state_dir"), request.get("packages")], sort_keys=True
    ).encode()
    return hashlib.sha256(raw).hexdigest()[:40]


def name(target: str, request: dict[str, Any]) -> str:
    """The file of `target`'s answers in the state dir `request` names (any files asked)."""
    raw = json.dumps([target, request.get("state_dir")]).encode()
    return hashlib.sha256(raw).hexdigest()[:40]


def asked(request: dict[str, Any]) -> str:
    """The tag of the package files `request` asks for ("" for none)."""
    packages = request.get("packages")
    if not packages:
        return _NONE_ASKED
    return hashlib.sha256(json.dumps(packages, sort_keys=True).encode()).hexdigest()[:40]


def load(
    target: str,
    request: dict[str, Any],
    memo: Memo | None = None,
    known: Mapping[str, str] | None = None,
) -> list[tuple[str, Answer]]:
    """(fingerprint, answer) of what `target` answered before to `request`'s files, newest
    first, texts put back, that are usable (the rest are dropped). `memo`: the run's (a fresh
    one when None); `known`: texts by sha256 already checked this run (exchange.RunContext's
    content), taken instead of reading their files."""
    memo = memo if memo is not None else Memo()
    d = _directory(memo)
    if d is None:
        return []
    tag, host = asked(request), name(target, request)
    entries = _entries(_host_doc(d, host, memo))
    out: list[tuple[str, Answer]] = []
    for entry_tag, answers in entries:
        if entry_tag != tag and tag != _NONE_ASKED:
            continue
        for a in answers:
            if len(out) == KEEP_PER_HOST:
                return out
            fp = _usable_stored(d, a if entry_tag == tag else _narrowed(a), memo, known, out)
            if fp is not None:
                out.append(fp)
    return out


def _narrowed(answer: Any) -> Any:
    """An answer to a request for some package files as the same host answers a request for
    none: the journal is the same. If this ever misses the agent's answer, its fingerprint
    differs and that run takes the two-step path."""
    return dict(answer, packages={}) if isinstance(answer, dict) else answer


def _usable_stored(
    d: Path,
    stored: Any,
    memo: Memo,
    known: Mapping[str, str] | None,
    have: list[tuple[str, Answer]],
) -> tuple[str, Answer] | None:
    """(fingerprint, answer) of a stored answer, texts put back, when it is usable and not one
    of `have`'s fingerprints."""
    try:
        filled = _with_texts(d, stored, memo, known)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    fp = usable(filled) if filled is not None else None
    if fp is None or filled is None or any(fp == f for f, _ in have):
        return None
    return fp, filled


def usable(answer: Any) -> str | None:
    """The fingerprint of an answer a plan can be made from (well-formed, complete, and every
    text it carries the one its sha256 names: a file that exists without its text is no use
    either); None for any other answer."""
    try:
        fp = protocol.fingerprint(answer)
        if answer.get("incomplete") or answer.get("locked"):
            return None
        for info in _file_infos(answer):
            if info.get("exists") and not _has(info.get("text"), info.get("sha256")):
                return None
        for st in answer["journal"].values():
            if st.get("base_text") is not None and not _has(st["base_text"], st.get("base")):
                return None
            text = st.get("current_text")
            if text is not None and not _has(text, st.get("current")):
                return None
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    return fp


def remember(
    target: str,
    request: dict[str, Any],
    answers: list[Answer],
    memo: Memo | None = None,
    known: Mapping[str, str] | None = None,
) -> None:
    """Store `answers` (newest first) ahead of what is stored for `request`'s files, one per
    fingerprint, in `target`'s one file. Never fails a run: a cache that cannot be written
    misses next time. `memo`, `known`: as for load."""
    got = [(fp, a) for a in answers for fp in [usable(a)] if fp is not None]
    store(target, request, got, memo, known)


def store(
    target: str,
    request: dict[str, Any],
    answers: list[tuple[str, Answer]],
    memo: Memo | None = None,
    known: Mapping[str, str] | None = None,
) -> None:
    """remember() for answers whose usable() fingerprint the caller has: (fingerprint,
    answer), newest first."""
    memo = memo if memo is not None else Memo()
    keep: list[tuple[str, Answer]] = []
    for fp, a in answers:
        if len(keep) < KEEP_PER_HOST and all(fp != f for f, _ in keep):
            keep.append((fp, a))
    if not keep:
        return
    d = _directory(memo, create=True)  # one check for the read and the write
    if d is None:
        return
    tag, host = asked(request), name(target, request)
    others: list[dict[str, Any]] = []
    for entry_tag, old in _entries(_host_doc(d, host, memo)):
        if entry_tag != tag:
            if len(others) < KEEP_ASKED - 1:
                others.append({"asked": entry_tag, "answers": old})  # checked when loaded
            continue
        for a in old:  # the older ones only when room is left
            if len(keep) == KEEP_PER_HOST:
                break
            got = _usable_stored(d, a, memo, known, keep)
            if got is not None:
                keep.append(got)
    try:
        texts = d / "texts"
        if not memo.texts_made:
            try:
                os.mkdir(texts, mode=0o700)
            except FileExistsError:
                pass
            memo.texts_made = True
        stored = [_without_texts(texts, a, memo) for _, a in keep]  # texts first, always
    except OSError:
        return
    text = json.dumps({"entries": [{"asked": tag, "answers": stored}, *others]})
    with memo.lock:
        memo.pending.setdefault(_bucket(host), {})[host] = text
    if not memo.defer:
        flush(memo)


def flush(memo: Memo) -> None:
    """Write every bucket store() left pending in `memo`: each read again (another run's hosts
    in it are kept, this run's replace theirs and move to its end), trimmed to KEEP_PER_BUCKET,
    written once. Never fails a run."""
    with memo.flushing:
        with memo.lock:
            pending, memo.pending = memo.pending, {}
        d = memo.checked
        if not pending or d is None:
            return
        for bucket, hosts in pending.items():
            now = _hosts_of(_read_json(d / bucket))
            for host in hosts:
                now.pop(host, None)
            now.update(hosts)
            for host in list(now)[: max(0, len(now) - KEEP_PER_BUCKET)]:
                del now[host]
            try:
                _write(d, bucket, json.dumps({"hosts": now}).encode())
            except OSError:
                continue
            with memo.lock:
                memo.read[bucket] = now
        try:
            _prune_once(d, d / "texts", memo)
        except OSError:
            pass


def _bucket(host: str) -> str:
    return f"{host[:2]}.json"


def _host_doc(d: Path, host: str, memo: Memo) -> Any:
    """The stored document of one (target, state dir): this run's own not yet written, else
    its bucket's as this run first read it (one read a bucket and run)."""
    bucket = _bucket(host)
    with memo.lock:
        text = memo.pending.get(bucket, {}).get(host)
        hosts = memo.read.get(bucket) if text is None else None
    if text is None:
        if hosts is None:
            hosts = _hosts_of(_read_json(d / bucket))
            with memo.lock:
                hosts = memo.read.setdefault(bucket, hosts)
        text = hosts.get(host)
    try:
        return json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None


def _hosts_of(doc: Any) -> dict[str, str]:
    """A bucket's {host file name: its document's JSON text}, only names as name() makes them.
    Each host's document is kept as text, parsed when that host is looked up (and checked then:
    _entries, then every answer and text): a run holds a bucket's hosts as compact strings,
    and what it stores waits for the flush as the text it will write."""
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    if not isinstance(hosts, dict):
        return {}
    return {
        h: v
        for h, v in hosts.items()
        if isinstance(h, str) and isinstance(v, str) and len(h) == 40 and all(c in _HEX for c in h)
    }


_HEX = frozenset("0123456789abcdef")


def _directory(memo: Memo, create: bool = False) -> Path | None:
    """hosts/, checked once a run (rewrite_cache.directory: the user's own, closed to others);
    each entry read from it is still checked on its own descriptor."""
    if memo.checked is None:
        memo.checked = rewrites.directory(create=create, sub="hosts")
    return memo.checked


def _entries(doc: Any) -> list[tuple[str, list[Any]]]:
    """(files-asked tag, stored answers) of a host file's entries that are well-formed."""
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return []
    return [
        (e["asked"], e["answers"])
        for e in entries
        if isinstance(e, dict)
        and isinstance(e.get("asked"), str)
        and isinstance(e.get("answers"), list)
    ]


# Texts live once per content under hosts/texts/ (a fleet's hosts share them); in an answer a
# text field holds "@" + its sha256 instead.


def _file_infos(answer: Answer) -> list[dict[str, Any]]:
    return [info for pkg in answer["packages"].values() for info in pkg["files"].values()]


def _text_fields(answer: Answer) -> list[tuple[dict[str, Any], str]]:
    fields = [(info, "text") for info in _file_infos(answer)]
    for st in answer["journal"].values():
        fields += [(st, "base_text"), (st, "current_text")]
    return fields


def _without_texts(texts: Path, answer: Answer, memo: Memo) -> Answer:
    out = _copied(_stored(answer))
    for holder, k in _text_fields(out):
        text = holder.get(k)
        if isinstance(text, str):
            sha = _sha_of(text)
            where = (str(texts), sha)  # str: a Path's hash is costlier than its text's
            if where not in memo.written and not os.path.exists(os.path.join(texts, sha)):
                _write(texts, sha, text.encode())
            memo.written.add(where)
            holder[k] = "@" + sha
        holder.pop("cached", None)
    return out


def _copied(answer: Answer) -> Answer:
    """A copy of `answer` whose dicts that hold texts (file infos, journal states) are new:
    what _without_texts changes, and nothing it does not (the rest is written as it is)."""
    out = dict(answer)
    pkgs = out.get("packages")
    if isinstance(pkgs, dict):
        out["packages"] = {
            n: dict(p, files={r: dict(i) for r, i in p["files"].items()})
            if isinstance(p, dict) and isinstance(p.get("files"), dict)
            else p
            for n, p in pkgs.items()
        }
    journal = out.get("journal")
    if isinstance(journal, dict):
        out["journal"] = {p: dict(st) for p, st in journal.items()}
    return out


def _with_texts(
    d: Path, stored: Answer, memo: Memo, known: Mapping[str, str] | None = None
) -> Answer | None:
    """`stored` with its texts put back (in place): each read from the file its sha256 names
    and checked against it, or taken from `known` (texts this run checked already)."""
    texts = str(d / "texts")
    for holder, k in _text_fields(stored):
        ref = holder.get(k)
        if ref is None:
            continue
        if not (isinstance(ref, str) and ref.startswith("@") and len(ref) == 65):
            return None
        sha = ref[1:].lower()
        if not all(c in "0123456789abcdef" for c in sha):
            return None  # a name, never a path
        text = known.get(sha) if known is not None else None
        if text is not None:
            holder[k] = text
            continue
        path = os.path.join(texts, sha)
        data = read_owned(Path(path), MAX_BYTES)  # owner, mode, type: on the fd
        if data is None or hashlib.sha256(data).hexdigest() != sha:
            memo.written.discard((texts, sha))
            try:
                os.unlink(path)  # not what its name says, or not ours: gone, stored again next run
            except OSError:
                pass
            return None
        memo.written.add((texts, sha))
        holder[k] = data.decode("utf-8", "surrogateescape")
    return stored


def _read_json(path: Path) -> Any:
    raw = read_owned(path, MAX_BYTES)  # owner, mode, type: on the descriptor
    try:
        return json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return None


def _has(text: Any, sha: Any) -> bool:
    return isinstance(text, str) and _sha_of(text) == sha


# A fleet's answers carry the same few text objects (the run's content cache hands one str to
# every host): each is hashed once, not at every check. Keyed by identity, the text held so its
# id stays its own; a str is immutable, so its sha256 cannot change. Texts up to 1 MiB.
_SHAS: dict[int, tuple[str, str]] = {}


def _sha_of(text: str) -> str:
    hit = _SHAS.get(id(text))
    if hit is not None and hit[0] is text:
        return hit[1]
    sha = hashlib.sha256(text.encode()).hexdigest()
    if len(text) <= 1 << 20:
        if len(_SHAS) >= 64:
            _SHAS.clear()
        _SHAS[id(text)] = (text, sha)
    return sha


def _write(d: Path, name: str, data: bytes) -> None:
    """Atomic and never through a planted name (patcher.safewrite: a temp file created
    exclusively in the same directory, then rename); no fsync: this is a cache. A refused
    name is an OSError here: the cache misses, the run goes on."""
    from patcher import safewrite

    try:
        safewrite.write(os.path.join(d, name), data, "the fact cache's", 0o600, sync=False)
    except safewrite.Refused as exc:
        raise OSError(exc.message) from None


def _prune_once(d: Path, texts: Path, memo: Memo) -> None:
    """Once a run: the host files of the older layout out, at most BUCKETS bucket files (and a
    killed run's temp files) and KEEP_TEXTS texts, oldest out first."""
    if d in memo.pruned:
        return
    memo.pruned.add(d)
    for n in os.listdir(d):  # one file per host, as an older vpatch kept them: never read
        if len(n) == 45 and n.endswith(".json"):
            try:
                os.unlink(d / n)
            except OSError:
                continue
    rewrites.prune(d, BUCKETS)
    rewrites.prune(texts, KEEP_TEXTS)


def _stored(answer: Answer) -> Answer:
    """The answer without its envelope and the chain's answers."""
    return {k: v for k, v in answer.items() if k not in ("then", "ok", "pid", "protocol")}
