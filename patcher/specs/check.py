"""`vpatch check`: offline validation of a patch repository (pre-commit, CI, editors).

`apply` stops at the first bad field because it must not touch a host with a bad spec. A review
of a patch repo wants every mistake at once, in every file, including the ones no single spec
can see (an id used twice) and the ones that validate but cannot be what the author meant
(variants out of order, a replacement identical to what it replaces, a value listed twice).
Nothing here contacts a host or imports the patched package.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from patcher import pyast
from patcher._compat import tomllib
from patcher.errors import SpecError
from patcher.output.lines import put
from patcher.result import SCHEMA_VERSION
from patcher.specs import catalog, tomlpos, validate
from patcher.specs.model import (
    MAX_SPEC_BYTES,
    EnsureElements,
    PatchSpec,
    RemoveElements,
    ReplaceStatement,
    Variant,
    as_json,
    load_spec,
    toml_loads,
)
from patcher.specs.validate import field_errors

_OVERLAP = re.compile(r"^variant\[\d+\] \(.*\) and variant\[(\d+)\] ")
HINT = "fix the fields named above; docs/spec.md lists them (`vpatch schema` feeds editors)"
# Other tools' TOML that a patch repo (and pre-commit's `files: \.toml$`) may hold.
_NOT_SPECS = frozenset(
    {
        "pyproject.toml",
        "ruff.toml",
        ".ruff.toml",
        "taplo.toml",
        ".taplo.toml",
        "uv.toml",
        "pixi.toml",
        "hatch.toml",
        "Cargo.toml",
    }
)


@dataclass(frozen=True)
class Problem:
    file: str
    field: str
    message: str
    line: int | None = None  # where the field is written (1-based), when the file has text
    col: int | None = None

    def text(self) -> str:
        """`error: FILE:LINE:COL: FIELD: message`, the form editors and pre-commit link."""
        where = self.file if self.line is None else f"{self.file}:{self.line}:{self.col}"
        return f"error: {where}: {self.field}: {self.message}"


@dataclass
class Report:
    files: list[Path] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check(args: Sequence[str]) -> Report:
    """Every problem in every spec named by `args` (files, catalog ids or directories)."""
    report = Report()
    report.files, report.problems = _collect(args)
    loaded: list[tuple[Path, PatchSpec]] = []
    for path in report.files:
        spec, problems = validate_file(path)
        report.problems += problems
        if spec is not None:
            loaded.append((path, spec))
            report.problems += spec_problems(path, spec)
    report.problems += _duplicate_ids(loaded)
    report.problems = _with_positions(report.problems)
    order = {str(f): i for i, f in enumerate(report.files)}
    report.problems.sort(key=lambda p: order.get(p.file, -1))  # stable: file order, then found
    return report


def render(report: Report, out: TextIO | None, err: TextIO) -> None:
    """Problems on `err`; the ok line on `out` (None under --json: stdout holds the document)."""
    if report.problems:
        for p in report.problems:
            put(p.text(), err)  # a message may quote the file: put makes it inert
        put(f"hint: {HINT}", err)
        return
    if out is not None:
        put(f"check: {len(report.files)} spec(s) ok", out)


def to_json(report: Report) -> dict[str, Any]:
    """`vpatch check --json`: every file checked and every problem; when there are problems,
    also `error` (the first one) and `hint`, the keys every failed vpatch document has."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "command": "check",
        "ok": report.ok,
        "files": [str(f) for f in report.files],
        "problems": [asdict(p) for p in report.problems],
    }
    if report.problems:
        doc |= {"error": report.problems[0].text().removeprefix("error: "), "hint": HINT}
    return doc


def _with_positions(problems: list[Problem]) -> list[Problem]:
    """Each problem with the line and column of its field in its file (TOML syntax errors: the
    parser's own position); none for a file that cannot be read as text, or a directory."""
    texts: dict[str, tomlpos.Positions | None] = {}  # each file read and scanned once
    out = []
    for p in problems:
        if p.file not in texts:
            text = _text(Path(p.file))
            texts[p.file] = None if text is None else tomlpos.positions(text)
        found = texts[p.file]
        pos: tuple[int, int] | None = None
        if found is not None and p.field == "(toml)":
            pos = tomlpos.error_position(p.message)
        elif found is not None and p.field not in ("(file)", "(dir)"):
            pos = tomlpos.locate(found, p.field)
        out.append(replace(p, line=pos[0], col=pos[1]) if pos else p)
    return out


def _text(path: Path) -> str | None:
    if not _small_file(path):
        return None
    try:
        return path.read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------------------------------------
# Which files


def _collect(args: Sequence[str]) -> tuple[list[Path], list[Problem]]:
    files: list[Path] = []
    problems: list[Problem] = []
    catalogs = catalog.Catalog()
    for arg in args:
        if Path(arg).is_dir():
            found = [f for f in sorted(Path(arg).rglob("*.toml")) if _in_tree(f, Path(arg))]
            found = [f for f in found if not _other_toml(f)]
            if not found:
                problems.append(Problem(arg, "(dir)", "holds no .toml spec"))
            files += found
            continue
        try:
            path = catalogs.resolve(arg)
        except SpecError as exc:
            problems.append(Problem(arg, "(file)", exc.message))
            continue
        if not _other_toml(path):
            files.append(path)
    return list(dict.fromkeys(files)), problems


def _in_tree(path: Path, root: Path) -> bool:
    """Not under a hidden dir (.git, .venv, .tox): those hold other people's TOML."""
    return not any(part.startswith(".") for part in path.relative_to(root).parent.parts)


def _other_toml(path: Path) -> bool:
    """Another tool's config, or a vpatch inventory (`[[host]]` and no `id`)."""
    if path.name in _NOT_SPECS:
        return True
    if not _small_file(path):
        return False  # load_spec reports it (a device, a huge file), without reading it all
    try:
        data = toml_loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # a spec that cannot be read is reported, not skipped
    return "host" in data and "id" not in data


def _small_file(path: Path) -> bool:
    """A regular file no bigger than a spec may be: safe to read whole (not /dev/zero)."""
    try:
        return path.is_file() and path.stat().st_size <= MAX_SPEC_BYTES
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# One file


def validate_file(path: Path) -> tuple[PatchSpec | None, list[Problem]]:
    """The spec, or every schema error in it (load_spec stops at the first)."""
    try:
        return load_spec(path), []
    except SpecError as exc:
        return None, _explain(path, exc)


def _explain(path: Path, exc: SpecError) -> list[Problem]:
    name = str(path)
    message = exc.message.removeprefix(f"{name}: ")
    if not _small_file(path):
        return [Problem(name, "(file)", message)]
    try:
        data = toml_loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        where = "(toml)" if message.startswith("invalid TOML") else "(file)"
        return [Problem(name, where, message)]
    try:
        validate.PatchSpec.model_validate(data)
    except ValidationError as ve:
        return [Problem(name, _field(loc, msg), msg) for loc, msg in field_errors(ve)]
    return [Problem(name, "(file)", message)]


def _field(loc: str, message: str) -> str:
    """Spec-wide rules report at the top level; point at the later of two overlapping ranges."""
    found = _OVERLAP.match(message) if loc == "(top level)" else None
    return f"variant[{found[1]}].versions" if found else loc


def spec_problems(path: Path, spec: PatchSpec) -> list[Problem]:
    """What validates but is still a mistake, as `file: field: message` problems."""
    name = str(path)
    found: list[tuple[str, str]] = []
    if spec.id != path.stem:
        found.append(
            (
                "id",
                f"{spec.id!r} differs from the file name {path.name!r}: "
                f"`vpatch apply {spec.id}` looks for {spec.id}.toml",
            )
        )
    found += _order(spec.variant)
    for i, variant in enumerate(spec.variant):
        found += _edits(f"variant[{i}]", variant)
    found += _probe_names(spec)
    return [Problem(name, where, msg) for where, msg in found]


def _lower_bound(variant: Variant) -> Version | None:
    """Smallest version the range starts at (None = open below)."""
    lows = []
    for s in variant.specifier:
        if s.operator in (">=", ">", "==", "~=", "==="):
            try:
                lows.append(Version(s.version.removesuffix(".*")))
            except InvalidVersion:
                continue
    return max(lows) if lows else None


def _order(variants: list[Variant]) -> list[tuple[str, str]]:
    """Variants oldest range first: a reader (and a reviewer of a new release's variant) finds
    the one that applies by reading down."""
    out = []
    for i in range(1, len(variants)):
        before, here = _lower_bound(variants[i - 1]), _lower_bound(variants[i])
        if before is not None and (here is None or here < before):
            out.append(
                (
                    f"variant[{i}].versions",
                    f"{variants[i].versions!r} starts before variant[{i - 1}] "
                    f"({variants[i - 1].versions!r}); list variants oldest range first",
                )
            )
    return out


def _same_code(a: str, b: str) -> bool:
    return ast.dump(pyast.parse(a)) == ast.dump(pyast.parse(b))


def _dupes(values: Iterable[object]) -> list[object]:
    seen: set[str] = set()
    out = []
    for v in values:
        key = json.dumps(v, sort_keys=True)
        if key in seen:
            out.append(v)
        seen.add(key)
    return out


def _anchor(edit: EnsureElements | RemoveElements) -> str:
    """What names an element edit's literal: its target, or the values it must contain."""
    return edit.target or json.dumps(edit.containing, sort_keys=True)


def _edits(where: str, variant: Variant) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    first: dict[str, int] = {}
    wanted: dict[tuple[str, str, str], int] = {}  # (scope, target, value) -> ensuring edit
    for k, edit in enumerate(variant.edit):
        at = f"{where}.edit[{k}]"
        key = json.dumps(as_json(edit))
        if key in first:
            out.append((at, f"repeats edit[{first[key]}]"))
        first.setdefault(key, k)
        if isinstance(edit, EnsureElements | RemoveElements):
            for v in _dupes(edit.values):
                out.append((f"{at}.values", f"{v!r} is listed twice"))
        if isinstance(edit, EnsureElements):
            for v in edit.values:
                wanted.setdefault((edit.scope, _anchor(edit), json.dumps(v, sort_keys=True)), k)
        if isinstance(edit, RemoveElements):
            for v in edit.values:
                j = wanted.get((edit.scope, _anchor(edit), json.dumps(v, sort_keys=True)))
                if j is not None:
                    out.append((f"{at}.values", f"{v!r} is removed here but ensured by edit[{j}]"))
        if isinstance(edit, ReplaceStatement) and _same_code(edit.match, edit.code):
            out.append((f"{at}.code", "is the same code as match: the edit changes nothing"))
    return out


def _probe_names(spec: PatchSpec) -> list[tuple[str, str]]:
    """Reports name probes: two with one name cannot be told apart."""
    seen: dict[str, int] = {}
    out = []
    for j, probe in enumerate(spec.probe):
        first = seen.setdefault(probe.name, j)
        if first != j:
            out.append((f"probe[{j}].name", f"{probe.name!r} is also the name of probe[{first}]"))
    return out


# ---------------------------------------------------------------------------------------------
# Across files


def _duplicate_ids(loaded: list[tuple[Path, PatchSpec]]) -> list[Problem]:
    """Ids are unique among the checked specs AND the other specs next to them: pre-commit
    passes only the changed files, and a new spec may reuse the id of an untouched one."""
    owner: dict[str, Path] = {}
    out = []
    for path, spec in loaded:
        if spec.id in owner:
            out.append(Problem(str(path), "id", f"{spec.id!r} is also the id of {owner[spec.id]}"))
        owner.setdefault(spec.id, path)
    checked = {p.resolve() for p, _ in loaded}
    for sibling, sid in _siblings({p.parent for p, _ in loaded}, checked):
        for path, spec in loaded:
            if spec.id == sid:
                out.append(Problem(str(path), "id", f"{sid!r} is also the id of {sibling}"))
    return out


def _siblings(dirs: set[Path], skip: set[Path]) -> list[tuple[Path, str]]:
    """(path, id) of valid specs in `dirs` that were not checked themselves."""
    out = []
    for d in sorted(dirs):
        for f in sorted(d.glob("*.toml")):
            if f.resolve() in skip or _other_toml(f):
                continue
            try:
                out.append((f, load_spec(f).id))
            except SpecError:
                continue  # its own check reports it
    return out
