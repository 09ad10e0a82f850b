"""Replays of edits on a pristine text, remembered: what `vpatch capture` and `backport` check
every candidate edit (and the written spec) with.

Why: a capture replays the same edits on the same pristine text several times (the candidate
chosen, all kept edits together, then the spec loaded back from its TOML), and a second capture
of the same hand edit (a warm run: the file, the release and the edit seen before) replays them
all again. Each replay is a libcst parse, transform and print of the whole file (~0.1 s of CPU
for vLLM's `speculative.py`), and importing libcst alone is ~0.15 s. A replay is a pure function
of (text, edits, rewrite code), so its result is kept: in memory for the run, and on disk in the
rewrite cache's directory (`patcher.caches.rewrites.directory`, `replays/`: the user's own, not
writable by others, the same code version in every key), so a warm capture never imports libcst.

Every result is kept, a candidate that missed its anchor or was ambiguous too (a warm capture
tries it again); a changed text with its sha256 (checked on every read: a torn or hand-edited
entry is a miss), any other result without a text (it is the text replayed on, whose sha256
is in the entry's name). The cache can never fail a run; `VPATCH_NO_CACHE=1` turns the disk
side off, as it does the rewrite cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from patcher.authoring.capture import EditDict, Validated
from patcher.caches import rewrites
from patcher.specs import model
from patcher.transports.ownedfile import read_owned

if TYPE_CHECKING:
    from patcher.rewrite import RewriteResult
    from patcher.specs.model import Edit

KEEP = 256  # entries kept on disk (least recently written go first)
_STATUSES = ("changed", "unchanged", "anchor_missing", "ambiguous", "invalid")


def edits_key(edits: Sequence[EditDict]) -> str:
    """The edits as canonical JSON, without the file they name (the text says which file) and
    without the fields that hold their op's default (`op` kept): capture's dicts and a spec's
    edits loaded back name the same edits whether or not a default was written out."""
    return json.dumps([_canonical(e) for e in edits], sort_keys=True, separators=(",", ":"))


def _canonical(edit: EditDict) -> EditDict:
    defaults = model.edit_defaults(edit.get("op"))
    return {
        k: v
        for k, v in edit.items()
        if k != "file" and (k == "op" or k not in defaults or not _same(v, defaults[k]))
    }


def _same(value: object, default: object) -> bool:
    """The value is its default: equal and of the same type (JSON's 1 is not True)."""
    return type(value) is type(default) and value == default


def models_key(edits: Sequence[Edit]) -> str:
    """`edits_key` of edits loaded from a spec: they key as the edit dicts capture wrote them
    from."""
    return edits_key([model.as_json(e) for e in edits])


class Replays(Validated):
    """Replays (`capture.Validated`) with memory: this run's, then earlier runs' on disk. A
    hit needs neither the edits' validation nor libcst."""

    def __init__(self, disk: bool = True) -> None:
        super().__init__()
        self.disk = disk
        self.memo: dict[tuple[str, str], RewriteResult | None] = {}
        self.stats = {"applied": 0, "memo": 0, "disk": 0}

    def __call__(self, source: str, edits: Sequence[EditDict]) -> RewriteResult | None:
        return self._replay(source, edits_key(edits), lambda: self.models(edits))

    def spec_edits(self, source: str, edits: Sequence[Edit]) -> RewriteResult:
        """The replay of a spec's own edits (check_spec: the written spec loaded back)."""
        got = self._replay(source, models_key(edits), lambda: list(edits))
        assert got is not None  # models are valid edits
        return got

    def _replay(
        self, source: str, key: str, models: Callable[[], list[Edit] | None]
    ) -> RewriteResult | None:
        if (source, key) in self.memo:
            self.stats["memo"] += 1
            return self.memo[source, key]
        name = _name(source, key) if self.disk else None
        got = _read(name, source) if name is not None else None
        if got is not None:
            self.stats["disk"] += 1
        else:
            valid = models()
            if valid is not None:
                from patcher.rewrite import apply_edits  # libcst: only when nothing was kept

                got = apply_edits(source, valid)
                self.stats["applied"] += 1
                if name is not None:
                    _write(name, got)
        self.memo[source, key] = got
        return got


def _name(source: str, key: str) -> str:
    text_sha = rewrites.sha256_of(source)
    h = hashlib.sha256(f"{text_sha}:{key}:{rewrites.code_version()}".encode())
    return f"replay-{h.hexdigest()[:40]}.json"


def _read(name: str, given: str) -> RewriteResult | None:
    """The kept result of replaying on `given` (None: none, or it does not hold). Only a
    changed text is kept; any other result's text is `given` itself."""
    d = rewrites.directory(sub="replays")
    if d is None:
        return None
    raw = read_owned(d / name, rewrites.MAX_ENTRY_BYTES)
    try:
        entry = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or entry.get("name") != name:
        return None
    status, source, message = entry.get("status"), entry.get("source"), entry.get("message")
    if status == "changed":
        if not isinstance(source, str) or rewrites.sha256_of(source) != entry.get("sha256"):
            return None  # torn, or edited by hand: not the text it was stored with
    elif status in _STATUSES and source is None:
        source = given  # a replay that changed nothing (or missed its anchor) keeps the text
    else:
        return None
    if not isinstance(message, str):
        return None
    from patcher.rewrite import RewriteResult

    return RewriteResult(status, source, message)


def _write(name: str, result: RewriteResult) -> None:
    d = rewrites.directory(create=True, sub="replays")
    if d is None or result.status not in _STATUSES:
        return
    changed = result.status == "changed"
    entry = {
        "name": name,
        "status": result.status,
        "source": result.source if changed else None,
        "sha256": rewrites.sha256_of(result.source) if changed else None,
        "message": result.message,
    }
    rewrites.write_entry(d, name, entry, KEEP)
