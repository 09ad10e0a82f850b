"""The spec format's validator: pydantic models (frozen, extra fields forbidden) that a spec's
TOML, or an edit from elsewhere (a journal entry, capture's candidates), is validated by.

What the rest of vpatch works with is patcher/specs/model.py's plain frozen dataclasses, of
the same names and fields: a validation here ends in the validated model's JSON dump, every
field in the models' order, from which model.py builds them (as the spec cache builds them
from the dump it kept). So a command on a spec seen before never imports pydantic, nor builds
a model class (~85 ms of a one-host apply, issue 41); `vpatch check`, `vpatch schema`, the
docs and a spec seen for the first time import this module. tests/unit/test_spec_model.py
keeps the two in step (names, fields, order, defaults).

Everything is validated here, before any host is contacted, so a typo costs an `error:` line
and exit 2, never a half-applied fleet.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
import textwrap
from functools import cache, cached_property
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, get_args

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from patcher import pyast
from patcher.errors import SpecError
from patcher.specs.names import ID

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PACKAGE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _at_line(exc: SyntaxError) -> str:
    """ " (line N)" when the compiler knows the line (not for e.g. a NUL byte in the source)."""
    return f" (line {exc.lineno})" if exc.lineno else ""


def _empty() -> list[Any]:
    """The list fields' default_factory: a Python function, not the builtin `list`. pydantic
    reads each factory's signature (does it take the validated data?); a builtin's comes from
    parsing its text signature with tokenize, whose pattern compiles on first use (~5 ms of
    the first spec load of every run)."""
    return []


class _Model(BaseModel):
    # defer_build: the validators are built by the first validation, not at import. A command
    # that imports the models without loading a spec (rollback or status by the journal, via
    # the planner) skips that build (~30 ms) and the plugin lookup pydantic does with it.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _check_statements(source: str, what: str) -> str:
    """Statement sources must parse and hold at least one statement."""
    try:
        # Dedented like the rewrite does, so an indented multi-line TOML string is accepted.
        tree = pyast.parse(textwrap.dedent(source))
    except SyntaxError as exc:
        raise ValueError(f"{what} is not valid Python: {exc.msg}{_at_line(exc)}") from None
    if not tree.body:
        raise ValueError(f"{what} holds no statement")
    return source


def _rel_file(v: str | None) -> str | None:
    """A path relative to site-packages, spelled the way pip's RECORD spells it."""
    if v is None:
        return v
    p = PurePosixPath(v)
    if p.is_absolute() or "\\" in v or ".." in p.parts or v.startswith("~"):
        raise ValueError("file must be relative to site-packages, without '..'")
    if str(p) != v or "\0" in v:  # "pkg/./m.py", "pkg//m.py": not how RECORD spells it
        raise ValueError(f"file must be a plain relative path like 'pkg/module.py', not {v!r}")
    if p.suffix != ".py" or len(p.parts) < 1:
        raise ValueError("file must name a .py file inside the package")
    return v


class _Edit(_Model):
    scope: str = Field(
        default="",
        description="Dotted path of classes/functions holding the target ('' = module level).",
    )
    file: str | None = Field(
        default=None,
        description="File this edit changes, relative to site-packages (default: the variant's "
        "`file`); one variant may change several files of its package.",
    )

    @field_validator("file")
    @classmethod
    def _file(cls, v: str | None) -> str | None:
        return _rel_file(v)

    @field_validator("scope")
    @classmethod
    def _scope(cls, v: str) -> str:
        if v and not _DOTTED.fullmatch(v):
            raise ValueError("scope must be a dotted path like 'Class.method' (or empty)")
        return v


def _check_dotted(v: str | None, what: str) -> str | None:
    if v is not None and not _DOTTED.fullmatch(v):
        raise ValueError(f"{what} must be a name or dotted attribute like 'self.items', not {v!r}")
    return v


def _check_expression(v: str, what: str) -> str:
    try:
        pyast.parse(v.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"{what} is not a Python expression: {exc.msg}") from None
    return v


class _ElementsEdit(_Edit):
    target: str | None = Field(
        default=None,
        description="Name assigned in scope, e.g. 'supported' or 'self.items'.",
    )
    containing: list[JsonValue] | None = Field(
        default=None,
        min_length=1,
        description="Instead of target: the one list/tuple/set literal in scope that holds all "
        "these values (a comparison operand, call argument, dict value, ...).",
    )
    values: list[JsonValue] = Field(min_length=1)

    @field_validator("target")
    @classmethod
    def _target(cls, v: str | None) -> str | None:
        return _check_dotted(v, "target")

    @model_validator(mode="after")
    def _anchor(self) -> _ElementsEdit:
        if (self.target is None) == (self.containing is None):
            raise ValueError("set exactly one of 'target' or 'containing'")
        return self


class EnsureElements(_ElementsEdit):
    """Add missing values to a list/tuple/set literal (`target`'s, or the one `containing`)."""

    op: Literal["ensure_elements"] = Field(description="Add the values the literal lacks.")
    values: list[JsonValue] = Field(
        min_length=1, description="Values that must be in the literal (TOML strings, numbers...)."
    )


class RemoveElements(_ElementsEdit):
    """Remove values from a list/tuple/set literal (`target`'s, or the one `containing`)."""

    op: Literal["remove_elements"] = Field(description="Remove the values from the literal.")
    values: list[JsonValue] = Field(
        min_length=1, description="Values that must not be in the literal."
    )

    @model_validator(mode="after")
    def _kept(self) -> RemoveElements:
        doomed = {json.dumps(v, sort_keys=True) for v in self.values}
        both = [v for v in self.containing or [] if json.dumps(v, sort_keys=True) in doomed]
        if both:
            # The anchor must still hold after the removal, or a re-run could not find it.
            raise ValueError(f"containing lists {both[0]!r}, which values removes")
        return self


class SetValue(_Edit):
    """Set the right-hand side of an assignment, a dict entry in it, or a parameter default."""

    op: Literal["set_value"] = Field(description="Set an assignment's value or a default.")
    target: str | None = Field(
        default=None, description="Name assigned in scope (or set 'param' instead)."
    )
    param: str | None = Field(default=None, description="Parameter of the scope function.")
    key: str | int | float | bool | None = Field(
        default=None, description="Dict key inside target's literal (a hashable scalar)."
    )
    value: JsonValue | None = Field(
        default=None, description="The new value as TOML data (or set 'expr' instead)."
    )
    expr: str | None = Field(default=None, description="Python expression source.")

    @model_validator(mode="after")
    def _one_of(self) -> SetValue:
        if (self.target is None) == (self.param is None):
            raise ValueError("set exactly one of 'target' or 'param'")
        if (self.value is None) == (self.expr is None):
            raise ValueError("set exactly one of 'value' or 'expr'")
        if self.key is not None and self.target is None:
            raise ValueError("'key' needs 'target' (a dict literal assigned to it)")
        if self.param is not None and not self.scope:
            raise ValueError("'param' needs 'scope' naming the function")
        for name in (self.target, self.param):
            if name is not None and not _DOTTED.fullmatch(name):
                raise ValueError(f"{name!r} is not a name or dotted attribute")
        if self.expr is not None:
            _check_expression(self.expr, "expr")
        return self


class _StatementEdit(_Edit):
    match: str = Field(description="Statement source to find (whitespace/comments ignored).")
    occurrence: int | None = Field(
        default=None,
        ge=1,
        description="Which match (1-based, in file order) when it repeats in scope.",
    )

    @field_validator("match")
    @classmethod
    def _match(cls, v: str) -> str:
        return _check_statements(v, "match")


class ReplaceStatement(_StatementEdit):
    """Replace the statement(s) `match` finds in scope with `code`."""

    op: Literal["replace_statement"] = Field(description="Replace a statement.")
    code: str = Field(description="Python statements to put in place of the match.")

    @field_validator("code")
    @classmethod
    def _code(cls, v: str) -> str:
        return _check_statements(v, "code")


class InsertStatement(_StatementEdit):
    """Insert `code` before or after the statement `match` finds in scope."""

    op: Literal["insert_statement"] = Field(description="Insert statements next to a match.")
    code: str = Field(description="Python statements to insert.")
    position: Literal["before", "after"] = Field(
        default="after", description="Where `code` goes relative to the match."
    )

    @field_validator("code")
    @classmethod
    def _code(cls, v: str) -> str:
        return _check_statements(v, "code")


class RemoveStatement(_StatementEdit):
    """Remove the statement `match` finds in scope."""

    op: Literal["remove_statement"] = Field(description="Remove a statement.")

    @field_validator("occurrence")
    @classmethod
    def _no_occurrence(cls, v: int | None) -> int | None:
        if v is not None:
            # Removing the Nth of several equal statements leaves a file in which another one
            # is the Nth: a re-run would remove it too. Only a wider match can say which one.
            raise ValueError(
                "occurrence cannot pick a statement to remove (after the removal another one "
                "takes its number); widen match with a neighbouring statement instead"
            )
        return v


class _BaseEdit(_Edit):
    value: str = Field(description="Base class expression source, e.g. 'Mixin' or 'mod.Base'.")

    @model_validator(mode="after")
    def _class(self) -> _BaseEdit:
        if not self.scope:  # an after-validator: a field's own validator skips the default
            raise ValueError("scope must name the class (dotted for a nested class)")
        return self

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        return _check_expression(v, "value")


class EnsureBase(_BaseEdit):
    """Add a base class (after the positional bases, before `metaclass=` and other keywords)."""

    op: Literal["ensure_base"] = Field(description="Add a base class to the class `scope` names.")


class RemoveBase(_BaseEdit):
    """Remove a base class; nothing to do when it is not there."""

    op: Literal["remove_base"] = Field(
        description="Remove a base class from the class `scope` names."
    )


class EnsureDef(_Edit):
    """Add a function or method to the module or class `scope` unless one of its name exists."""

    op: Literal["ensure_def"] = Field(
        description="Add (or, with replace, replace) a function or method."
    )
    code: str = Field(description="The whole def, decorators included.")
    replace: bool = Field(
        default=False, description="Replace a different def of the same name (else a conflict)."
    )
    after: str | None = Field(
        default=None,
        description="Where an absent def goes: right after what binds this name in scope "
        "(a def, class or assignment); at the end when nothing does.",
    )
    before: str | None = Field(
        default=None,
        description="Where an absent def goes: right before what binds this name in scope; "
        "at the end when nothing does.",
    )

    @field_validator("code")
    @classmethod
    def _code(cls, v: str) -> str:
        body = pyast.parse(textwrap.dedent(_check_statements(v, "code"))).body
        if len(body) != 1 or not isinstance(body[0], ast.FunctionDef | ast.AsyncFunctionDef):
            kinds = ", ".join(type(stmt).__name__ for stmt in body)
            raise ValueError(f"code must be exactly one def (decorators allowed), not {kinds}")
        return v

    @field_validator("after", "before")
    @classmethod
    def _neighbour(cls, v: str | None) -> str | None:
        if v is not None and (not v.isidentifier() or keyword.iskeyword(v)):
            raise ValueError(f"after/before must be a name like 'forward', not {v!r}")
        return v

    @model_validator(mode="after")
    def _one_place(self) -> EnsureDef:
        if self.after is not None and self.before is not None:
            raise ValueError("set at most one of 'after' or 'before'")
        return self


class EnsureImport(_Edit):
    """Add a module-level import unless its names are already imported."""

    op: Literal["ensure_import"] = Field(
        description="Add a module-level import, merged into an existing one."
    )
    code: str = Field(description="One import statement, e.g. 'from .interfaces import X'.")

    @field_validator("scope")
    @classmethod
    def _module_level(cls, v: str) -> str:
        if v:
            raise ValueError("ensure_import adds module-level imports: leave scope empty")
        return v

    @field_validator("code")
    @classmethod
    def _code(cls, v: str) -> str:
        body = pyast.parse(textwrap.dedent(_check_statements(v, "code"))).body
        if len(body) != 1 or not isinstance(body[0], ast.Import | ast.ImportFrom):
            raise ValueError("code must be exactly one 'import ...' or 'from ... import ...'")
        if any(alias.name == "*" for alias in body[0].names):
            raise ValueError("a star import cannot be checked for presence; name the imports")
        return v


class SetArgument(_Edit):
    """Set (or add) a keyword argument of the one call to `call` in scope, decorators included."""

    op: Literal["set_argument"] = Field(description="Set or add a keyword argument of one call.")
    call: str = Field(description="Dotted name of the callee, e.g. 'lru_cache' or 'Field'.")
    arg: str = Field(description="Keyword argument name.")
    value: JsonValue | None = Field(default=None, description="The argument's value (TOML).")
    expr: str | None = Field(default=None, description="Python expression source.")

    @field_validator("call")
    @classmethod
    def _call(cls, v: str) -> str:
        if not _DOTTED.fullmatch(v):
            raise ValueError("call must be a dotted name like 'functools.lru_cache'")
        return v

    @field_validator("arg")
    @classmethod
    def _arg(cls, v: str) -> str:
        if not v.isidentifier() or keyword.iskeyword(v):
            raise ValueError("arg must be a keyword argument name")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> SetArgument:
        if (self.value is None) == (self.expr is None):
            raise ValueError("set exactly one of 'value' or 'expr'")
        if self.expr is not None:
            _check_expression(self.expr, "expr")
        return self


class AddFile(_Edit):
    """Create a module the package lacks (`text` is its whole content); rollback removes it."""

    op: Literal["add_file"] = Field(
        description="Create a module the package lacks; rollback removes it."
    )
    text: str = Field(description="The new module's source.")

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        try:
            compile(v, "<add_file>", "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise ValueError(f"text is not valid Python: {exc.msg}{_at_line(exc)}") from None
        return v


Edit = Annotated[
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
    | AddFile,
    Field(discriminator="op"),
]
# Every op, read off the union (tests/unit/test_spec_model.py: the same ops as specs/model.py's).
EDIT_OPS: tuple[str, ...] = tuple(
    get_args(m.model_fields["op"].annotation)[0] for m in get_args(get_args(Edit)[0])
)


class Variant(_Model):
    """One PEP 440 version range: edit `file`, or do nothing because upstream fixed it."""

    versions: str = Field(description="PEP 440 specifier set, e.g. '>=0.11,<0.17'.")
    file: str | None = Field(default=None, description="Path relative to site-packages.")
    edit: list[Edit] = Field(
        default_factory=_empty, description="Structural edits of `file`, applied in order."
    )
    upstream: str | None = Field(
        default=None, min_length=1, description="Why no edit is needed here."
    )

    @field_validator("versions")
    @classmethod
    def _versions(cls, v: str) -> str:
        if not v.strip():  # SpecifierSet("") admits every version: a forgotten value, not intent
            raise ValueError("versions is empty; write '>=0' to mean every version")
        try:
            SpecifierSet(v)
        except InvalidSpecifier:
            raise ValueError(f"{v!r} is not a PEP 440 specifier like '>=0.11,<0.17'") from None
        return v

    @field_validator("file")
    @classmethod
    def _file(cls, v: str | None) -> str | None:
        return _rel_file(v)

    @model_validator(mode="after")
    def _kind(self) -> Variant:
        if self.upstream is not None:
            if self.file is not None or self.edit:
                raise ValueError("an 'upstream' variant takes no 'file' or 'edit'")
            return self
        if not self.edit:
            raise ValueError(
                "a variant needs 'file' and at least one [[variant.edit]] (an edit may name its "
                "own file), or 'upstream'"
            )
        for i, e in enumerate(self.edit):
            if (e.file or self.file) is None:
                raise ValueError(f"edit[{i}] names no file: set the variant's 'file' or its own")
        for rel, edits in self.files():
            if len(edits) > 1 and any(e.op == "add_file" for e in edits):
                raise ValueError(f"add_file gives the whole text of {rel}: no other edit there")
        return self

    def files(self) -> list[tuple[str, list[Edit]]]:
        """(file, its edits in spec order) per file the variant changes, in first-seen order."""
        out: dict[str, list[Edit]] = {}
        for e in self.edit:
            rel = e.file or self.file
            assert rel is not None  # _kind
            out.setdefault(rel, []).append(e)
        return list(out.items())

    @cached_property
    def specifier(self) -> SpecifierSet:
        return SpecifierSet(self.versions)


class Probe(_Model):
    """A check run in a fresh `python -I` on the target; passes when the code raises nothing."""

    name: str = Field(min_length=1, description="Names the probe in reports (unique).")
    module: str = Field(description="Imported first; bound to the name `module` for the code.")
    code: str = Field(default="", description="Python run after the import; raising = failing.")
    timeout: float = Field(
        default=120.0, gt=0, le=3600, description="Seconds before the probe counts as failed."
    )

    @field_validator("module")
    @classmethod
    def _module(cls, v: str) -> str:
        if not _DOTTED.fullmatch(v):
            raise ValueError("module must be a dotted import name")
        return v

    @field_validator("code")
    @classmethod
    def _code(cls, v: str) -> str:
        try:
            compile(v, "<probe>", "exec")
        except SyntaxError as exc:
            raise ValueError(f"probe code does not compile: {exc.msg}{_at_line(exc)}") from None
        return v


class MetricsThresholds(_Model):
    """`[metrics]`: what live serving numbers must show for the patch to count as paying off.

    Checked by `vpatch verify --metrics URL` (scraped on the host; the rates) and by the gates
    of `vpatch rollout` (every one: one field per row of patcher/serving/gates.py GATES);
    `--min-acceptance` and `--min-throughput-ratio` override.
    A patch can load perfectly and still not help: these turn "the file changed" into
    "speculative decoding accepts enough drafts, and the server got no slower".
    """

    min_acceptance_rate: float | None = Field(
        default=None, ge=0, le=1, description="accepted / drafted tokens, 0..1"
    )
    min_mean_acceptance_length: float | None = Field(
        default=None, ge=1, description="1 + accepted tokens per draft (bonus token included)"
    )
    min_tokens_per_s_ratio: float | None = Field(
        default=None,
        gt=0,
        description="rollout: generation tokens/s after the restart over the baseline's, e.g. 1.0",
    )
    max_error_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="rollout: aborted or failed requests / finished requests in the window, 0..1",
    )
    # Latency gates (patcher/serving/gates.py GATES), each in its unit; judged from the
    # histograms' bucket counts (docs/rollout.md).
    max_tpot_p99_ratio: float | None = Field(
        default=None,
        gt=0,
        description="rollout: time per output token p99 (per request) over the control's",
    )
    max_tpot_p99_s: float | None = Field(
        default=None, gt=0, description="rollout: time per output token p99 ceiling, seconds"
    )
    max_ttft_p99_ratio: float | None = Field(
        default=None, gt=0, description="rollout: time-to-first-token p99 over the control's"
    )
    max_ttft_p99_s: float | None = Field(
        default=None, gt=0, description="rollout: time-to-first-token p99 ceiling, seconds"
    )
    max_itl_p99_ratio: float | None = Field(
        default=None,
        gt=0,
        description="rollout: inter-token latency p99 per engine step over the control's",
    )
    max_itl_p99_s: float | None = Field(
        default=None,
        gt=0,
        description="rollout: inter-token latency p99 per engine step ceiling, seconds",
    )
    max_e2e_p99_ratio: float | None = Field(
        default=None, gt=0, description="rollout: end-to-end request latency p99 over the control's"
    )
    max_e2e_p99_s: float | None = Field(
        default=None, gt=0, description="rollout: end-to-end request latency p99 ceiling, seconds"
    )


class PatchSpec(_Model):
    """One patch: which package it fixes, how per version range, and how to prove it works."""

    id: str = Field(description="Unique id, the file name without .toml (`vpatch apply ID`).")
    summary: str = Field(min_length=1, description="One line: what the patch fixes.")
    package: str = Field(description="Distribution name as pip knows it, e.g. 'vllm'.")
    references: list[str] = Field(
        default_factory=_empty, description="Issue or pull request links that explain the fix."
    )
    variant: list[Variant] = Field(
        min_length=1, description="One per PEP 440 version range, oldest range first."
    )
    probe: list[Probe] = Field(
        default_factory=_empty, description="Checks run on the target after applying (verify)."
    )
    metrics: MetricsThresholds | None = Field(
        default=None, description="Live serving thresholds for `vpatch verify --metrics`."
    )

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not ID.fullmatch(v):
            raise ValueError("id must be lowercase letters, digits, '.', '_' or '-'")
        return v

    @field_validator("package")
    @classmethod
    def _package(cls, v: str) -> str:
        if not _PACKAGE.fullmatch(v):
            raise ValueError("package must be a distribution name like 'vllm'")
        return v

    @model_validator(mode="after")
    def _no_overlap(self) -> PatchSpec:
        for i, a in enumerate(self.variant):
            for j in range(i + 1, len(self.variant)):
                probe = _overlap_witness(a.specifier, self.variant[j].specifier)
                if probe is not None:
                    raise ValueError(
                        f"variant[{i}] ({a.versions}) and variant[{j}] "
                        f"({self.variant[j].versions}) both match {probe}"
                    )
        return self


def _overlap_witness(a: SpecifierSet, b: SpecifierSet) -> str | None:
    """A version both sets admit, searched among the boundary versions they mention.

    Two specifier sets overlap iff some version near one of their bounds is in both, so testing
    each bound and its immediate neighbours finds every overlap that matters in practice.
    """
    candidates: set[Version] = set()
    for spec in [*a, *b]:
        try:
            base = Version(spec.version.rstrip(".*"))
        except InvalidVersion:
            continue
        rel = base.release + (0,) * (3 - len(base.release))
        candidates.add(base)
        candidates.add(Version(".".join(map(str, (*rel[:-1], rel[-1] + 1)))))
        candidates.add(Version(".".join(map(str, (*rel[:2], rel[2] + 1)))))
        candidates.add(Version(f"{base}.post1"))
        if any(rel):
            candidates.add(Version(".".join(map(str, rel)) + ".dev0"))
    candidates.add(Version("0"))
    for c in sorted(candidates):
        if a.contains(c, prereleases=True) and b.contains(c, prereleases=True):
            return str(c)
    return None


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in EDIT_OPS:
            continue  # pydantic's discriminator tag, not a field the user wrote
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's annotation holds (list[Variant] -> Variant, the edit union -> each
    op's model, `X | None` -> X)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _op_of(model: type[BaseModel]) -> Any:
    """An edit model's op tag (its `op: Literal[...]`), else None."""
    field = model.model_fields.get("op")
    tags = get_args(field.annotation) if field is not None else ()
    return tags[0] if len(tags) == 1 else None


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The fields of the model a field at `loc` was written in (the spec's, a variant's, an
    edit's by the op tag pydantic puts in the path, ...); [] where no one model is found."""
    models: list[type[BaseModel]] = [PatchSpec]
    for part in loc[:-1]:
        if isinstance(part, int):  # a list's index
            continue
        tagged = [m for m in models if _op_of(m) == part]
        models = tagged or [
            inner
            for m in models
            if part in m.model_fields
            for inner in _models_in(m.model_fields[part].annotation)
        ]
    return list(models[0].model_fields) if len(models) == 1 else []


def _suggestion(err: Any) -> str:
    """For a field the model does not have, the closest one it has (`sumary` -> `did you
    mean "summary"?`), as a mistyped command or spec id gets; else ""."""
    loc = tuple(err["loc"])
    if err["type"] != "extra_forbidden" or not loc or not isinstance(loc[-1], str):
        return ""
    from patcher.suggest import did_you_mean

    return did_you_mean(loc[-1], _fields_at(loc), '"{}"')


def _message(err: Any) -> str:
    """pydantic's message for one error, with the suggestion when there is one."""
    msg: str = err["msg"].removeprefix("Value error, ")
    close = _suggestion(err)
    return f"{msg}; {close}" if close else msg


def field_errors(exc: ValidationError) -> list[tuple[str, str]]:
    """(field path, message) for EVERY error pydantic found (`vpatch check` lists them all)."""
    return [(_loc(tuple(e["loc"])), _message(e)) for e in exc.errors()]


_FIELD_HINTS = {
    "op": "op must be one of: " + ", ".join(EDIT_OPS),
    "extra_forbidden": "rename or remove the field; allowed fields are listed in docs/spec.md",
    "missing": "add the field; see patches/ for a complete example",
}


def spec_fields(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """A spec's TOML (read from `path`, which errors name) validated: the model's JSON dump,
    every field (defaults included) in the models' order, which patcher.specs.model builds its
    objects from; a SpecError naming file and the first field at fault otherwise."""
    try:
        return PatchSpec.model_validate(data).model_dump(mode="json")
    except ValidationError as exc:
        errors = exc.errors()
        # a misspelled field is two errors (the name written, the required one missing): the
        # one that says what was meant comes first
        err = next((e for e in errors if _suggestion(e)), errors[0])
        loc = _loc(tuple(err["loc"]))
        msg = _message(err)
        kind = err["type"]
        hint = _FIELD_HINTS.get(kind, "")
        if kind == "union_tag_invalid" or kind == "union_tag_not_found":
            hint = _FIELD_HINTS["op"]
        if not hint:
            hint = "see docs/spec.md for the allowed fields and values"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise SpecError(f"{path}: {loc}: {msg}{more}", hint) from None


@cache
def _edits() -> TypeAdapter[list[Edit]]:
    return TypeAdapter(list[Edit])


def edit_fields(raw: Any) -> list[dict[str, Any]]:
    """Edits from elsewhere (a journal entry's, capture's candidates) validated: each one's
    JSON dump, as spec_fields gives it; a ValidationError (a ValueError) when one is not an
    edit of the format."""
    return [e.model_dump(mode="json") for e in _edits().validate_python(raw)]
