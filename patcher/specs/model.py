"""Patch specs as the rest of vpatch works with them: plain frozen dataclasses, built from a
validated spec's JSON fields.

A spec is declarative on purpose: it names a package, a file relative to site-packages, and
structural edits per PEP 440 version range. It is validated by patcher/specs/validate.py
(pydantic) before any host is contacted, so a typo costs an `error:` line and exit 2, never a
half-applied fleet; what the validator gives, its models' JSON dump, is what these classes are
built from (`from_json`), and what the spec cache (patcher/specs/cache.py) keeps of a spec
seen before and builds them from again. So a command on a cached spec imports no pydantic and
builds no model class: ~85 ms of a one-host apply's controller CPU (issue 41).

The classes here and the models there have the same names, fields, field order and defaults
(tests/unit/test_spec_model.py), so a dump here is the validator's dump: a spec's digest, each
edit's journal form and the cache's entries do not depend on which side built the object.
Nothing here validates: build these only from what validate.py (or the cache) gave.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, get_args

from patcher.errors import SpecError

if TYPE_CHECKING:
    from dataclasses import dataclass as record
    from dataclasses import field
    from typing import TypeAlias

    from packaging.specifiers import SpecifierSet

    # pydantic's JsonValue, spelled without importing pydantic.
    JsonValue: TypeAlias = (
        list["JsonValue"] | dict[str, "JsonValue"] | str | bool | int | float | None
    )
else:

    def record(**_: Any) -> Callable[[type], type]:
        """What type checkers read as dataclasses.dataclass (frozen, keyword-only: every class
        says so); at run time the class is _Model's own, as it is."""
        return lambda cls: cls

    def field(*, default_factory: Callable[[], Any]) -> Any:
        """A field whose default is made anew for each object (a list), as
        dataclasses.field."""
        return _Factory(default_factory)


class _Missing:
    """The default of a field that has none (a class: nothing to construct at import)."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


class FrozenError(AttributeError):
    """A spec object's fields were assigned (as dataclasses' FrozenInstanceError)."""


class _Model:
    """A frozen record, keyword arguments only: what a frozen dataclass gives, without its
    cost. The dataclass decorator writes and compiles six methods per class (~0.5 ms each
    class, ~10 ms for the format's 21, paid by every command); here the fields are read once
    per class from its annotations, in the order dataclasses uses (bases first, a redeclared
    field in its first place), and one set of methods serves every class. Type checkers see
    each class as the frozen keyword-only dataclass it stands for (`record`).

    What a model derives from its fields (a spec's digest, a variant's version range parsed)
    is a functools.cached_property: a fleet's run asks it per host, and a frozen object's
    fields do not change. Kept in the instance's __dict__ beside the fields, which __eq__
    compares and `as_json` dumps by the list of fields alone; a copy (`copy_with`) computes
    them again."""

    _fields: ClassVar[tuple[tuple[str, Any], ...]] = ()

    def __init_subclass__(cls) -> None:
        found: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for name, ann in vars(klass).get("__annotations__", {}).items():
                if not str(ann).startswith("ClassVar"):
                    found[name] = vars(klass).get(name, _Missing)
        cls._fields = tuple(found.items())

    def __init__(self, **values: Any) -> None:
        own = self.__dict__
        for name, default in self._fields:
            if name in values:
                own[name] = values.pop(name)
            elif default is _Missing:
                raise TypeError(f"{type(self).__name__}: missing field {name!r}")
            else:
                own[name] = default.make() if type(default) is _Factory else default
        if values:
            raise TypeError(f"{type(self).__name__}: unknown field(s) {', '.join(values)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.__dict__[name] for name, _ in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Model)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={self.__dict__[name]!r}" for name, _ in self._fields)
        return f"{type(self).__name__}({inner})"


_M = TypeVar("_M", bound=_Model)


def field_names(cls: type[_Model]) -> tuple[str, ...]:
    """A spec class's fields, in order (what dataclasses.fields would list)."""
    return tuple(name for name, _ in cls._fields)


def copy_with(obj: _M, **changes: Any) -> _M:
    """`obj` with some fields changed (as dataclasses.replace); derived values recomputed."""
    return type(obj)(**{**{name: obj.__dict__[name] for name, _ in obj._fields}, **changes})


def as_json(obj: Any) -> Any:
    """A spec (or any part of one) as the validator's JSON dump gives it: every field, defaults
    and None included, in field order; lists and dicts copied, so the dump is the caller's."""
    if isinstance(obj, _Model):
        return {name: as_json(obj.__dict__[name]) for name, _ in obj._fields}
    if isinstance(obj, list):
        return [as_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: as_json(v) for k, v in obj.items()}
    return obj


@record(frozen=True, kw_only=True)
class _Edit(_Model):
    scope: str = ""  # dotted path of classes/functions holding the target ('' = module level)
    file: str | None = None  # relative to site-packages (default: the variant's `file`)

    @cached_property
    def dumped(self) -> dict[str, Any]:
        """The edit as journal entries record it (JSON, None fields left out). Shared by
        every caller, so never changed by one (plan.dump_edits)."""
        return {k: v for k, v in as_json(self).items() if v is not None}


@record(frozen=True, kw_only=True)
class _ElementsEdit(_Edit):
    target: str | None = None
    containing: list[JsonValue] | None = None
    values: list[JsonValue]


@record(frozen=True, kw_only=True)
class EnsureElements(_ElementsEdit):
    """Add missing values to a list/tuple/set literal (`target`'s, or the one `containing`)."""

    op: Literal["ensure_elements"] = "ensure_elements"


@record(frozen=True, kw_only=True)
class RemoveElements(_ElementsEdit):
    """Remove values from a list/tuple/set literal (`target`'s, or the one `containing`)."""

    op: Literal["remove_elements"] = "remove_elements"


@record(frozen=True, kw_only=True)
class SetValue(_Edit):
    """Set the right-hand side of an assignment, a dict entry in it, or a parameter default."""

    op: Literal["set_value"] = "set_value"
    target: str | None = None
    param: str | None = None
    key: str | int | float | bool | None = None
    value: JsonValue | None = None
    expr: str | None = None


@record(frozen=True, kw_only=True)
class _StatementEdit(_Edit):
    match: str
    occurrence: int | None = None


@record(frozen=True, kw_only=True)
class ReplaceStatement(_StatementEdit):
    """Replace the statement(s) `match` finds in scope with `code`."""

    op: Literal["replace_statement"] = "replace_statement"
    code: str


@record(frozen=True, kw_only=True)
class InsertStatement(_StatementEdit):
    """Insert `code` before or after the statement `match` finds in scope."""

    op: Literal["insert_statement"] = "insert_statement"
    code: str
    position: Literal["before", "after"] = "after"


@record(frozen=True, kw_only=True)
class RemoveStatement(_StatementEdit):
    """Remove the statement `match` finds in scope."""

    op: Literal["remove_statement"] = "remove_statement"


@record(frozen=True, kw_only=True)
class _BaseEdit(_Edit):
    value: str


@record(frozen=True, kw_only=True)
class EnsureBase(_BaseEdit):
    """Add a base class (after the positional bases, before `metaclass=` and other keywords)."""

    op: Literal["ensure_base"] = "ensure_base"


@record(frozen=True, kw_only=True)
class RemoveBase(_BaseEdit):
    """Remove a base class; nothing to do when it is not there."""

    op: Literal["remove_base"] = "remove_base"


@record(frozen=True, kw_only=True)
class EnsureDef(_Edit):
    """Add a function or method to the module or class `scope` unless one of its name exists."""

    op: Literal["ensure_def"] = "ensure_def"
    code: str
    replace: bool = False
    after: str | None = None
    before: str | None = None

    @property
    def name(self) -> str:
        """Name of the def in `code`."""
        import ast
        import textwrap

        from patcher import pyast

        node = pyast.parse(textwrap.dedent(self.code)).body[0]
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        return node.name


@record(frozen=True, kw_only=True)
class EnsureImport(_Edit):
    """Add a module-level import unless its names are already imported."""

    op: Literal["ensure_import"] = "ensure_import"
    code: str


@record(frozen=True, kw_only=True)
class SetArgument(_Edit):
    """Set (or add) a keyword argument of the one call to `call` in scope, decorators included."""

    op: Literal["set_argument"] = "set_argument"
    call: str
    arg: str
    value: JsonValue | None = None
    expr: str | None = None


@record(frozen=True, kw_only=True)
class AddFile(_Edit):
    """Create a module the package lacks (`text` is its whole content); rollback removes it."""

    op: Literal["add_file"] = "add_file"
    text: str


Edit = (
    EnsureElements
    | RemoveElements
    | SetValue
    | ReplaceStatement
    | InsertStatement
    | RemoveStatement
    | EnsureBase
    | RemoveBase
    | EnsureDef
    | EnsureImport
    | SetArgument
    | AddFile
)
# The op table: each edit's record by its `op`, read off the union above (the one list of
# ops; validate.py's union is checked against it, and rewrite/ dispatches by it).
_EDIT_CLASSES: dict[str, type[Edit]] = {cls.op: cls for cls in get_args(Edit)}
EDIT_OPS = tuple(_EDIT_CLASSES)


def edit_defaults(op: object) -> dict[str, Any]:
    """The plain defaults of an edit op's fields (a list's default included, made anew); {}
    for a name that is not an op. A key of edits that must not depend on whether a default
    was written out uses it (patcher.authoring.replays)."""
    cls = _EDIT_CLASSES.get(op) if isinstance(op, str) else None
    if cls is None:
        return {}
    made = {name: d.make() if type(d) is _Factory else d for name, d in cls._fields}
    return {name: d for name, d in made.items() if d is not _Missing}


@record(frozen=True, kw_only=True)
class Variant(_Model):
    """One PEP 440 version range: edit `file`, or do nothing because upstream fixed it."""

    versions: str
    file: str | None = None
    edit: list[Edit] = field(default_factory=list)
    upstream: str | None = None

    def files(self) -> list[tuple[str, list[Edit]]]:
        """(file, its edits in spec order) per file the variant changes, in first-seen order."""
        out: dict[str, list[Edit]] = {}
        for e in self.edit:
            rel = e.file or self.file
            assert rel is not None  # validate.Variant._kind
            out.setdefault(rel, []).append(e)
        return list(out.items())

    @cached_property
    def specifier(self) -> SpecifierSet:
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.versions)

    @property
    def modules(self) -> list[str]:
        """Import names of the files it changes (``vllm/config/speculative.py`` ->
        ``vllm.config.speculative``)."""
        return list(self._modules)

    @cached_property
    def _modules(self) -> tuple[str, ...]:
        return tuple(module_of(rel) for rel, _ in self.files())


def module_of(rel: str) -> str:
    parts = list(PurePosixPath(rel).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@record(frozen=True, kw_only=True)
class Probe(_Model):
    """A check run in a fresh `python -I` on the target; passes when the code raises nothing."""

    name: str
    module: str
    code: str = ""
    timeout: float = 120.0


@record(frozen=True, kw_only=True)
class MetricsThresholds(_Model):
    """`[metrics]`: what live serving numbers must show for the patch to count as paying off.

    Checked by `vpatch verify --metrics URL` (scraped on the host; the rates) and by the gates
    of `vpatch rollout` (every one: one field per row of patcher/serving/gates.py GATES);
    `--min-acceptance` and `--min-throughput-ratio` override. A patch can load perfectly and
    still not help: these turn "the file changed" into "speculative decoding accepts enough
    drafts, and the server got no slower". The fields' meanings are
    validate.MetricsThresholds' descriptions (docs/spec.md).
    """

    min_acceptance_rate: float | None = None
    min_mean_acceptance_length: float | None = None
    min_tokens_per_s_ratio: float | None = None
    max_error_rate: float | None = None
    # Latency gates (patcher/serving/gates.py GATES), each in its unit: per output token,
    # time to first token, per engine step, end to end; judged from bucket counts.
    max_tpot_p99_ratio: float | None = None
    max_tpot_p99_s: float | None = None
    max_ttft_p99_ratio: float | None = None
    max_ttft_p99_s: float | None = None
    max_itl_p99_ratio: float | None = None
    max_itl_p99_s: float | None = None
    max_e2e_p99_ratio: float | None = None
    max_e2e_p99_s: float | None = None


@record(frozen=True, kw_only=True)
class PatchSpec(_Model):
    """One patch: which package it fixes, how per version range, and how to prove it works."""

    id: str
    summary: str
    package: str
    references: list[str] = field(default_factory=list)
    variant: list[Variant]
    probe: list[Probe] = field(default_factory=list)
    metrics: MetricsThresholds | None = None

    def choose_variant(self, version: str) -> tuple[int, Variant] | None:
        """The variant whose range contains `version` (pre-releases included), or None."""
        chosen = self._chosen  # a fleet has a few versions: each parsed once
        try:
            return chosen[version]
        except KeyError:
            pass
        got = self._choose_variant(version)
        if len(chosen) >= 64:
            chosen.clear()
        chosen[version] = got
        return got

    @cached_property
    def _chosen(self) -> dict[str, tuple[int, Variant] | None]:
        return {}

    def _choose_variant(self, version: str) -> tuple[int, Variant] | None:
        from packaging.version import InvalidVersion, Version

        try:
            v = Version(version)
        except InvalidVersion:
            return None
        for i, var in enumerate(self.variant):
            if var.specifier.contains(v, prereleases=True):
                return i, var
        return None

    @cached_property
    def digest(self) -> str:
        """Stable hash of the validated content: journal entries record which spec text applied."""
        blob = json.dumps(as_json(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Built from the validator's JSON dump (or the cache's copy of it)


def edit_from_json(doc: dict[str, Any]) -> Edit:
    """One edit, by its `op`; a KeyError or TypeError when `doc` is not an edit's dump."""
    return _EDIT_CLASSES[doc["op"]](**doc)


def _variant(doc: dict[str, Any]) -> Variant:
    return Variant(**{**doc, "edit": [edit_from_json(e) for e in doc.get("edit", [])]})


def from_json(doc: dict[str, Any]) -> PatchSpec:
    """The spec whose validated JSON dump `doc` is (patcher/specs/validate.py's spec_fields,
    or the spec cache's copy of it); a KeyError or TypeError when it is not one (an unknown or
    missing field, an unknown op), which the cache takes for a miss."""
    metrics = doc.get("metrics")
    return PatchSpec(
        **{
            **doc,
            "variant": [_variant(v) for v in doc["variant"]],
            "probe": [Probe(**p) for p in doc.get("probe", [])],
            "metrics": None if metrics is None else MetricsThresholds(**metrics),
        }
    )


def edits_from_json(raw: Any) -> list[Edit]:
    """Edits recorded elsewhere (a journal entry, capture's candidates), validated first: host
    data is never trusted. A ValueError (pydantic's ValidationError) when one is not an edit."""
    from patcher.specs import validate

    return [edit_from_json(e) for e in validate.edit_fields(raw)]


# ---------------------------------------------------------------------------------------------
# Reading a spec

# Real specs are a few KiB; anything near this is a wrong file (or a device) and would only
# make every host's request and every journal line huge.
MAX_SPEC_BYTES = 1024 * 1024


def toml_loads(text: str) -> dict[str, Any]:
    """tomllib.loads, with nesting deeper than its recursive parser can take (`a = [[[[...`)
    reported as invalid TOML instead of a RecursionError traceback."""
    from patcher._compat import tomllib  # here: a spec seen before is never parsed

    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("arrays or inline tables nested too deeply") from None


def read_spec(path: Path | str) -> bytes:
    """A spec file's bytes, bounded; a SpecError when it cannot be read."""
    path = Path(path)
    try:
        with path.open("rb") as fh:  # bounded: `vpatch apply /dev/zero` must not eat memory
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(
            f"{path}: cannot read spec ({exc.strerror})",
            "pass the path of a .toml patch spec (see patches/)",
        ) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(
            f"{path}: spec is larger than {MAX_SPEC_BYTES // 1024} KiB",
            "a spec holds a few edits; is this the right file?",
        )
    return raw


def load_spec(path: Path | str) -> PatchSpec:
    """Read and validate one TOML spec; any problem is a SpecError naming file and field."""
    return parse_spec(read_spec(path), path)


def parse_spec(raw: bytes, path: Path | str) -> PatchSpec:
    """Validate one spec's bytes (read from `path`, which errors name)."""
    from patcher._compat import tomllib

    path = Path(path)
    try:
        data = toml_loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SpecError(f"{path}: spec is not UTF-8 text", "save the spec as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(
            f"{path}: invalid TOML: {exc}", "fix the TOML syntax at that line"
        ) from None
    return from_data(data, path)


def from_data(data: dict[str, Any], path: Path | str = "<spec>") -> PatchSpec:
    """A spec's TOML data validated (errors name `path`): a SpecError when it is not one."""
    from patcher.specs import validate

    return from_json(validate.spec_fields(data, Path(path)))
