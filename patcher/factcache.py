"""The inspect answers each host gave in earlier runs, on the controller: the guesses a run
plans on before it has heard from the host (agent/chain.py says how a guess is checked).

Why: most commands meet a host in a state a run has already seen: the pristine bytes a canary
saw on every other host, the state the last apply left for the rollback or the next verify.
Planning on that state ahead lets the inspect and the commit share one exchange.

Nothing read here is trusted. A guess only ever decides a write when the host's own answer has
the same fingerprint (computed here from the stored answer, never stored), and every text is
checked against the sha256 the answer gives it when it is loaded: an edited or corrupt entry is
a guess that does not match, or no guess, never a wrong write.

Where: `hosts/` next to the rewrite cache (patcher.rewrite_cache.directory: same switch, same
ownership rules), one JSON file per (target, state dir, packages asked), with the last
`KEEP_PER_HOST` distinct answers, newest first. Writes are atomic, not fsync'ed: a torn or lost
entry is only a miss.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patcher import rewrite_cache
from patcher.agent import protocol

KEEP_PER_HOST = 2
KEEP_HOSTS = 4096
KEEP_TEXTS = 1024
MAX_BYTES = 32 * 1024 * 1024  # an entry bigger than this is not read (a cache, not an input)

Answer = dict[str, Any]


@dataclass
class Memo:
    """What one run knows of the cache directory so it asks the disk once: the directories it
    pruned, and the texts it stored or saw stored (part of exchange.RunContext)."""

    pruned: set[Path] = field(default_factory=set)
    written: set[tuple[str, str]] = field(default_factory=set)  # (texts dir, sha256)


def key(target: str, request: dict[str, Any]) -> str:
    """What an inspect answer depends on besides the host: who asks where, for which files."""
    raw = json.dumps(
        [target, request.get("state_dir"), request.get("packages")], sort_keys=True
    ).encode()
    return hashlib.sha256(raw).hexdigest()[:40]


def load(name: str, memo: Memo | None = None, d: Path | None = None) -> list[tuple[str, Answer]]:
    """(fingerprint, answer) of the stored answers, texts put back, that are usable (the rest
    are dropped). `memo`: the run's (a fresh one when None); `d`: the directory when the caller
    has just checked it (else it is looked up)."""
    memo = memo if memo is not None else Memo()
    d = d if d is not None else rewrite_cache.directory(sub="hosts")
    if d is None:
        return []
    doc = _read_json(d / f"{name}.json")
    answers = doc.get("answers") if isinstance(doc, dict) else None
    if not isinstance(answers, list):
        return []
    out = []
    for a in answers:
        try:
            filled = _with_texts(d, a, memo)
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
        fp = usable(filled) if filled is not None else None
        if fp is not None and filled is not None:
            out.append((fp, filled))
    return out


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


def remember(name: str, answers: list[Answer], memo: Memo | None = None) -> None:
    """Store `answers` (newest first) ahead of what is stored, one per fingerprint. Never
    fails a run: a cache that cannot be written misses next time. `memo`: the run's."""
    memo = memo if memo is not None else Memo()
    keep: list[Answer] = []
    seen: set[str] = set()
    d = rewrite_cache.directory(sub="hosts")  # one check for the read and the write
    for batch in (answers, None):
        # the older ones only when room is left
        got = load(name, memo, d) if batch is None else [(usable(a), a) for a in batch]
        for fp, a in got:
            if len(keep) < KEEP_PER_HOST and fp is not None and fp not in seen:
                seen.add(fp)
                keep.append(a)
        if len(keep) == KEEP_PER_HOST:
            break
    if keep and d is None:
        d = rewrite_cache.directory(create=True, sub="hosts")
    if not keep or d is None:
        return
    try:
        texts = d / "texts"
        try:
            os.mkdir(texts, mode=0o700)
        except FileExistsError:
            pass
        stored = [_without_texts(texts, a, memo) for a in keep]
        _write(d, f"{name}.json", json.dumps({"answers": stored}).encode())
        _prune_once(d, texts, memo)
    except OSError:
        pass


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


def _with_texts(d: Path, stored: Answer, memo: Memo) -> Answer | None:
    for holder, k in _text_fields(stored):
        ref = holder.get(k)
        if ref is None:
            continue
        if not (isinstance(ref, str) and ref.startswith("@") and len(ref) == 65):
            return None
        if not all(c in "0123456789abcdef" for c in ref[1:].lower()):
            return None  # a name, never a path
        name = d / "texts" / ref[1:].lower()
        data = rewrite_cache.read_owned(name, MAX_BYTES)  # owner, mode, type: on the descriptor
        if data is None or hashlib.sha256(data).hexdigest() != name.name:
            memo.written.discard((str(d / "texts"), name.name))
            try:
                os.unlink(name)  # not what its name says, or not ours: gone, stored again next run
            except OSError:
                pass
            return None
        holder[k] = data.decode("utf-8", "surrogateescape")
    return stored


def _read_json(path: Path) -> Any:
    raw = rewrite_cache.read_owned(path, MAX_BYTES)  # owner, mode, type: on the descriptor
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
    """Atomic (a temp file of this process and thread in the same directory, created
    exclusively, then rename); no fsync: this is a cache."""
    tmp = os.path.join(d, f".tmp-{os.getpid()}-{threading.get_ident()}-{next(_serial)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(d, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_serial = itertools.count()  # temp file names: unique within the process, not run state


def _prune_once(d: Path, texts: Path, memo: Memo) -> None:
    """Once a run: at most KEEP_HOSTS answer files and KEEP_TEXTS texts, oldest out first."""
    if d in memo.pruned:
        return
    memo.pruned.add(d)
    rewrite_cache.prune(d, KEEP_HOSTS)
    rewrite_cache.prune(texts, KEEP_TEXTS)


def _stored(answer: Answer) -> Answer:
    """The answer without its envelope and the chain's answers."""
    return {k: v for k, v in answer.items() if k not in ("then", "ok", "pid", "protocol")}
