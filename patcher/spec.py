"""Patch specs: TOML files validated by pydantic (frozen, extra fields forbidden).

A spec is declarative on purpose: it names a package, a file relative to site-packages, and
structural edits per PEP 440 version range. Everything is validated here, before any host is
contacted, so a typo costs an `error:` line and exit 2, never a half-applied fleet.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import textwrap
import tomllib
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from patcher.errors import SpecError

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_PACKAGE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _at_line(exc: SyntaxError) -> str:
    """ " (line N)" when the compiler knows the line (not for e.g. a NUL byte in the source)."""
    return f" (line {exc.lineno})" if exc.lineno else ""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_statements(source: str, what: str) -> str:
    """Statement sources must parse and hold at least one statement."""
    try:
        # Dedented like the rewrite does, so an indented multi-line TOML string is accepted.
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError as exc:
        raise ValueError(f"{what} is not valid Python: {exc.msg}{_at_line(exc)}") from None
    if not tree.body:
        raise ValueError(f"{what} holds no statement")
    return source


class _Edit(_Model):
    scope: str = Field(
        default="",
        description="Dotted path of classes/functions holding the target ('' = module level).",
    )

    @field_validator("scope")
    @classmethod
    def _scope(cls, v: str) -> str:
        if v and not _DOTTED.match(v):
            raise ValueError("scope must be a dotted path like 'Class.method' (or empty)")
        return v


class _TargetEdit(_Edit):
    target: str = Field(description="Name assigned in scope, e.g. 'supported' or 'self.items'.")

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        if not _DOTTED.match(v):
            raise ValueError("target must be a name or dotted attribute like 'self.items'")
        return v


class EnsureElements(_TargetEdit):
    """Add missing values to a list/tuple/set literal assigned to `target`."""

    op: Literal["ensure_elements"]
    values: list[JsonValue] = Field(min_length=1)


class RemoveElements(_TargetEdit):
    """Remove values from a list/tuple/set literal assigned to `target`."""

    op: Literal["remove_elements"]
    values: list[JsonValue] = Field(min_length=1)


class SetValue(_Edit):
    """Set the right-hand side of an assignment, a dict entry in it, or a parameter default."""

    op: Literal["set_value"]
    target: str | None = None
    param: str | None = Field(default=None, description="Parameter of the scope function.")
    key: str | int | float | bool | None = Field(
        default=None, description="Dict key inside target's literal (a hashable scalar)."
    )
    value: JsonValue | None = None
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
            if name is not None and not _DOTTED.match(name):
                raise ValueError(f"{name!r} is not a name or dotted attribute")
        if self.expr is not None:
            try:
                ast.parse(self.expr, mode="eval")
            except SyntaxError as exc:
                raise ValueError(f"expr is not a Python expression: {exc.msg}") from None
        return self


class _StatementEdit(_Edit):
    match: str = Field(description="Statement source to find (whitespace/comments ignored).")

    @field_validator("match")
    @classmethod
    def _match(cls, v: str) -> str:
        return _check_statements(v, "match")


class ReplaceStatement(_StatementEdit):
    op: Literal["replace_statement"]
    code: str

    @field_validator("code")
    @classmethod
    def _code(cls, v: str) -> str:
        return _check_statements(v, "code")


class InsertStatement(_StatementEdit):
    op: Literal["insert_statement"]
    code: str
    position: Literal["before", "after"] = "after"

    @field_validator("code")
    @classmethod
    def _code(cls, v: str) -> str:
        return _check_statements(v, "code")


class RemoveStatement(_StatementEdit):
    op: Literal["remove_statement"]


Edit = Annotated[
    EnsureElements
    | RemoveElements
    | SetValue
    | ReplaceStatement
    | InsertStatement
    | RemoveStatement,
    Field(discriminator="op"),
]
EDIT_OPS = (
    "ensure_elements",
    "remove_elements",
    "set_value",
    "replace_statement",
    "insert_statement",
    "remove_statement",
)


class Variant(_Model):
    """One PEP 440 version range: edit `file`, or do nothing because upstream fixed it."""

    versions: str = Field(description="PEP 440 specifier set, e.g. '>=0.11,<0.17'.")
    file: str | None = Field(default=None, description="Path relative to site-packages.")
    edit: list[Edit] = Field(default_factory=list)
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

    @model_validator(mode="after")
    def _kind(self) -> Variant:
        if self.upstream is not None:
            if self.file is not None or self.edit:
                raise ValueError("an 'upstream' variant takes no 'file' or 'edit'")
        elif self.file is None or not self.edit:
            raise ValueError(
                "a variant needs 'file' and at least one [[variant.edit]], or 'upstream'"
            )
        return self

    @property
    def specifier(self) -> SpecifierSet:
        return SpecifierSet(self.versions)

    @property
    def module(self) -> str | None:
        """Import name of `file` (``vllm/config/speculative.py`` -> ``vllm.config.speculative``)."""
        if self.file is None:
            return None
        parts = list(PurePosixPath(self.file).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)


class Probe(_Model):
    """A check run in a fresh `python -I` on the target; passes when the code raises nothing."""

    name: str = Field(min_length=1)
    module: str = Field(description="Imported first; bound to the name `module` for the code.")
    code: str = ""
    timeout: float = Field(default=120.0, gt=0, le=3600)

    @field_validator("module")
    @classmethod
    def _module(cls, v: str) -> str:
        if not _DOTTED.match(v):
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

    Checked only by `vpatch verify --metrics URL` (scraped on the host); `--min-acceptance`
    overrides `min_acceptance_rate`. A patch can load perfectly and still not help: these turn
    "the file changed" into "speculative decoding accepts enough drafts".
    """

    min_acceptance_rate: float | None = Field(
        default=None, ge=0, le=1, description="accepted / drafted tokens, 0..1"
    )
    min_mean_acceptance_length: float | None = Field(
        default=None, ge=1, description="1 + accepted tokens per draft (bonus token included)"
    )


class PatchSpec(_Model):
    id: str
    summary: str = Field(min_length=1)
    package: str
    references: list[str] = Field(default_factory=list)
    variant: list[Variant] = Field(min_length=1)
    probe: list[Probe] = Field(default_factory=list)
    metrics: MetricsThresholds | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError("id must be lowercase letters, digits, '.', '_' or '-'")
        return v

    @field_validator("package")
    @classmethod
    def _package(cls, v: str) -> str:
        if not _PACKAGE.match(v):
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

    def choose_variant(self, version: str) -> tuple[int, Variant] | None:
        """The variant whose range contains `version` (pre-releases included), or None."""
        try:
            v = Version(version)
        except InvalidVersion:
            return None
        for i, var in enumerate(self.variant):
            if var.specifier.contains(v, prereleases=True):
                return i, var
        return None

    @property
    def digest(self) -> str:
        """Stable hash of the validated content: journal entries record which spec text applied."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


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


def field_errors(exc: ValidationError) -> list[tuple[str, str]]:
    """(field path, message) for EVERY error pydantic found (`vpatch check` lists them all)."""
    return [(_loc(tuple(e["loc"])), e["msg"].removeprefix("Value error, ")) for e in exc.errors()]


_FIELD_HINTS = {
    "op": "op must be one of: " + ", ".join(EDIT_OPS),
    "extra_forbidden": "remove the field; allowed fields are listed in docs/spec.md",
    "missing": "add the field; see patches/ for a complete example",
}


# Real specs are a few KiB; anything near this is a wrong file (or a device) and would only
# make every host's request and every journal line huge.
MAX_SPEC_BYTES = 1024 * 1024


def toml_loads(text: str) -> dict[str, Any]:
    """tomllib.loads, with nesting deeper than its recursive parser can take (`a = [[[[...`)
    reported as invalid TOML instead of a RecursionError traceback."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("arrays or inline tables nested too deeply") from None


def load_spec(path: Path | str) -> PatchSpec:
    """Read and validate one TOML spec; any problem is a SpecError naming file and field."""
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
    try:
        data = toml_loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SpecError(f"{path}: spec is not UTF-8 text", "save the spec as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(
            f"{path}: invalid TOML: {exc}", "fix the TOML syntax at that line"
        ) from None
    try:
        return PatchSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = _loc(tuple(err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        kind = err["type"]
        hint = _FIELD_HINTS.get(kind, "")
        if kind == "union_tag_invalid" or kind == "union_tag_not_found":
            hint = _FIELD_HINTS["op"]
        if not hint:
            hint = "see docs/spec.md for the allowed fields and values"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise SpecError(f"{path}: {loc}: {msg}{more}", hint) from None
