"""Specs validated once and kept, on the controller, so that a command on a spec it has seen
before imports no pydantic at all.

Why: validating a spec needs pydantic (~30 ms to import) and its model classes (~50 ms to
build, and the validators' first build besides): most of a one-host apply's controller CPU,
paid again by every command (`vpatch ensure` in a pre-start hook on every restart, `verify`
after `apply`) for the same few spec files (issue 41).

What is stored: per spec text, what validating it gave: the validator's JSON dump of it
(patcher.specs.validate.spec_fields), one JSON file named by the sha256 of the spec's bytes,
of the format's two sources (patcher/specs/model.py, which builds the objects, and
validate.py, which decides what validates) and of pydantic's version.py, read without
importing it; so an edit of the spec, of its format or an upgrade of pydantic is another name,
and an entry of an older format is never met (a miss: the spec is validated again). A kept
spec is built by model.from_json, exactly as a fresh validation's dump is: the same objects
(tests/unit/test_spec_cache.py checks every catalog spec). Only specs that validated are kept:
a bad one is validated, and refused, every time.

Where: beside the rewrite cache (rewrite_cache.directory: `specs/`, the same switch
VPATCH_NO_CACHE, the user's own directory closed to others); an entry is read on its
descriptor (owner, mode, one link) and used only when its recorded name is its own and it
builds (a missing or unknown field, an unknown op: a miss). Where pydantic cannot be found
there is no key and no cache. `vpatch check` never uses it: it is the validator. The cache can
never fail a command: anything unreadable, corrupt or unwritable is a miss.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from patcher.caches import rewrites
from patcher.transports.ownedfile import read_owned

if TYPE_CHECKING:
    from patcher.specs.model import PatchSpec

KEEP = 256
MAX_ENTRY_BYTES = 4 * 1024 * 1024  # a spec is at most 1 MiB (spec.MAX_SPEC_BYTES), JSON-escaped
_FORMAT = b"vpatch-spec-cache 2"  # 2: the validator's dump, built by model.from_json


@cache
def _code_key() -> bytes | None:
    """What decides a validation's result besides the spec's text: the format's sources and
    pydantic's version.py (found as the import system would, not imported); None where
    pydantic is not found."""
    from patcher.specs import model

    found = importlib.util.find_spec("pydantic")
    if found is None or found.origin is None:
        return None
    here = Path(model.__file__).parent
    try:
        parts = [
            (here / "model.py").read_bytes(),
            (here / "validate.py").read_bytes(),
            (Path(found.origin).parent / "version.py").read_bytes(),
        ]
    except OSError:
        return None
    return b"\0".join(parts)


def _name(raw: bytes) -> str | None:
    key = _code_key()
    if key is None:
        return None
    h = hashlib.sha256(_FORMAT + b"\0" + key + b"\0" + raw)
    return h.hexdigest()[:40] + ".json"


def load(path: Path | str) -> PatchSpec:
    """spec.load_spec, from the cache when this very text validated before."""
    from patcher.specs.model import parse_spec, read_spec

    raw = read_spec(path)
    d = rewrites.directory(sub="specs")
    name = _name(raw)
    if d is not None and name is not None:
        kept = _get(d, name)
        if kept is not None:
            return kept
    got = parse_spec(raw, path)
    if name is not None:
        _put(name, got)
    return got


def _get(d: Path, name: str) -> PatchSpec | None:
    data = read_owned(d / name, MAX_ENTRY_BYTES)
    if data is None:
        return None
    from patcher.specs.model import from_json

    try:
        entry = json.loads(data)
        if not isinstance(entry, dict) or entry.get("name") != name:
            return None  # torn, or renamed by hand: not the entry of this text
        return from_json(entry["spec"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _put(name: str, got: PatchSpec) -> None:
    from patcher.specs.model import as_json

    d = rewrites.directory(create=True, sub="specs")
    if d is not None:
        rewrites.write_entry(d, name, {"name": name, "spec": as_json(got)}, KEEP)
