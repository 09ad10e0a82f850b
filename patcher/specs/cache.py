"""Specs validated once and kept, on the controller, so that a command on a spec it has seen
before builds no pydantic validator.

Why: a spec's first validation in a process builds pydantic's validators for every model of
the format and runs pydantic's plugin lookup (which imports importlib.metadata): ~25 ms of a
~200 ms one-host apply, paid again by every command (`vpatch ensure` in a pre-start hook on
every restart, `verify` after `apply`) for the same few spec files.

What is stored: per spec text, what validating it gave (patcher.specs.model.kept_form: the fields as
given, the digest, each edit's journal form), one JSON file named by the sha256 of the spec's
bytes, of patcher/specs/model.py's own source and of pydantic's version, so an edit of the spec, of
its format or an upgrade of pydantic is another name (never a stale hit). A kept spec is
rebuilt with pydantic's model_construct (patcher.specs.model.from_kept): the same objects, equal to
a
validation's (tests/unit/test_spec_cache.py checks every catalog spec), with no validator built.
Only specs that validated are kept: a bad one is validated, and refused, every time.

Where: beside the rewrite cache (rewrite_cache.directory: `specs/`, the same switch
VPATCH_NO_CACHE, the user's own directory closed to others); an entry is read on its
descriptor (owner, mode, one link) and used only when its recorded name is its own. `vpatch
check` never uses it: it is the validator. The cache can never fail a command: anything
unreadable, corrupt or unwritable is a miss.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from patcher.caches import rewrites as rewrite_cache

if TYPE_CHECKING:
    from patcher.specs.model import PatchSpec

KEEP = 256
MAX_ENTRY_BYTES = 4 * 1024 * 1024  # a spec is at most 1 MiB (spec.MAX_SPEC_BYTES), JSON-escaped
_FORMAT = b"vpatch-spec-cache 1"


@cache
def _code_key() -> bytes:
    """What decides a validation's result besides the spec's text: the format's source and
    pydantic's version."""
    import pydantic

    from patcher.specs import model as spec

    return Path(spec.__file__).read_bytes() + b"\0" + pydantic.VERSION.encode()


def _name(raw: bytes) -> str:
    h = hashlib.sha256(_FORMAT + b"\0" + _code_key() + b"\0" + raw)
    return h.hexdigest()[:40] + ".json"


def load(path: Path | str) -> PatchSpec:
    """spec.load_spec, from the cache when this very text validated before."""
    from patcher.specs import model as spec

    raw = spec.read_spec(path)
    d = rewrite_cache.directory(sub="specs")
    name = _name(raw)
    if d is not None:
        kept = _get(d, name)
        if kept is not None:
            return kept
    got = spec.parse_spec(raw, path)
    _put(name, got)
    return got


def _get(d: Path, name: str) -> PatchSpec | None:
    data = rewrite_cache.read_owned(d / name, MAX_ENTRY_BYTES)
    if data is None:
        return None
    from patcher.specs import model as spec

    try:
        entry = json.loads(data)
        if not isinstance(entry, dict) or entry.get("name") != name:
            return None  # torn, or renamed by hand: not the entry of this text
        return spec.from_kept(entry["spec"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _put(name: str, got: PatchSpec) -> None:
    from patcher.specs import model as spec

    d = rewrite_cache.directory(create=True, sub="specs")
    if d is not None:
        rewrite_cache.write_entry(d, name, {"name": name, "spec": spec.kept_form(got)}, KEEP)
