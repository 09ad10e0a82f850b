"""Writing specs from what exists: `vpatch diff` (every file of a package that differs from
pip's RECORD), `vpatch capture` (a host's hand edits, from `patcher.authoring.handedit`'s scan
-> a spec file, `patcher.authoring.capture`, pure) and `vpatch backport` (an upstream diff
applied to release V's files -> captured the same way, `patcher.authoring.backport`). A
captured spec is checked by loading it back and replaying it on the pristine files, then
(unless --no-matrix) by the release matrix over the neighbouring releases: where it fits."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patcher import pyast
from patcher.commands import _targets
from patcher.errors import UsageError, VpatchError
from patcher.exitcodes import ExitCode
from patcher.output.inert import clean, line

# `vpatch diff` needs the scan only: capture's machinery (pydantic's spec models, the
# rewriters, the release matrix, rich) is imported by the functions that use it.
if TYPE_CHECKING:
    from packaging.version import Version

    from patcher.authoring import handedit
    from patcher.authoring.capture import Captured
    from patcher.authoring.refusals import Refused
    from patcher.authoring.replays import Replays
    from patcher.specs.model import PatchSpec
    from patcher.wheels import matrix
    from patcher.wheels.store import Store


def add_options(p: argparse.ArgumentParser, name: str) -> None:
    """The options of `vpatch diff`, `capture` or `backport`."""
    if name == "diff":
        _diff_options(p)
    elif name == "capture":
        _capture_options(p)
    else:
        _backport_options(p)


def _diff_options(dp: argparse.ArgumentParser) -> None:
    dp.add_argument("package", metavar="PACKAGE", help="distribution name, e.g. vllm")
    dp.add_argument("files", nargs="*", metavar="FILE", help="only these files (as in RECORD)")
    _targets.target_options(dp, pods=True)
    _targets.wheelhouse_option(dp)
    _host_wheel_option(dp)


def _host_wheel_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host-wheel",
        metavar="PATH",
        help="when no wheel of the release can be had here, read pip's bytes from this wheel "
        "file on each host (absolute path there; a file is used only if it has the sha256 "
        "the host's RECORD lists)",
    )


def _capture_options(cp: argparse.ArgumentParser) -> None:
    cp.add_argument("package", metavar="PACKAGE", help="distribution name, e.g. vllm")
    cp.add_argument("files", nargs="*", metavar="FILE", help="only these files (as in RECORD)")
    cp.add_argument("--id", required=True, help="id of the new spec (its file name, too)")
    cp.add_argument("-o", "--output", metavar="SPEC.toml", help="write here (default: stdout)")
    cp.add_argument("--summary", help="the spec's one-line summary")
    cp.add_argument(
        "--versions",
        metavar="SPECIFIER",
        help="the variant's range (default: ==the installed release)",
    )
    cp.add_argument(
        "--no-matrix",
        action="store_true",
        help="skip checking the spec against neighbouring releases",
    )
    cp.add_argument(
        "--neighbours",
        type=int,
        default=3,
        metavar="N",
        help="releases before and after the installed one the matrix checks (3)",
    )
    _targets.target_options(cp)
    _targets.wheelhouse_option(cp)
    _host_wheel_option(cp)


def _backport_options(bp: argparse.ArgumentParser) -> None:
    bp.add_argument("diff", metavar="DIFF", help="unified diff file (git format), or - (stdin)")
    bp.add_argument("--package", required=True, help="distribution name, e.g. vllm")
    bp.add_argument(
        "--from-version", required=True, metavar="V", help="the release the diff was made against"
    )
    bp.add_argument("--id", required=True, help="id of the new spec (its file name, too)")
    bp.add_argument("-o", "--output", metavar="SPEC.toml", help="write here (default: stdout)")
    bp.add_argument("--summary", help="the spec's one-line summary")
    bp.add_argument("--versions", metavar="SPECIFIER", help="the variant's range (default: ==V)")
    bp.add_argument("--no-matrix", action="store_true", help="skip the neighbouring releases")
    bp.add_argument("--neighbours", type=int, default=3, metavar="N", help="releases each side (3)")
    _targets.json_option(bp)
    _targets.wheelhouse_option(bp)


def run(args: argparse.Namespace) -> int:
    if args.command == "backport":
        return backport(args)
    if args.command == "capture":
        validate(args)
    if getattr(args, "report", None):  # a link or a stranger's file at the name: refused now
        from patcher import safewrite

        safewrite.check(args.report)
    from patcher.authoring import handedit
    from patcher.output import progress
    from patcher.output.report import emit
    from patcher.wheels.store import Store

    hw = args.host_wheel
    if hw is not None and not (hw.startswith("/") and hw.endswith(".whl")):
        raise UsageError(
            f"--host-wheel {hw}: not an absolute path to a .whl file",
            "name the wheel as the hosts see it, e.g. /var/cache/wheels/vllm-0.16.0-...whl",
        )
    targets = _targets.targets(args)
    store = Store.for_run(args.wheelhouse, refresh=args.refresh)  # this run's: each wheel once
    store.warm()  # pip's configuration read while the hosts are scanned
    pristine = handedit.Pristine(args.package, partial(store.file, args.package))
    with progress.live(f"{args.command}: starting") if len(targets) == 1 else nullcontext():
        scans = handedit.scan_all(
            args.package,
            args.files,
            targets,
            lambda t: _targets.open_target(t, args),
            args.state_dir,
            args.parallel,
            pristine,
            early=args.command == "diff" and len(targets) == 1,
        )
    unavailable = next(iter(pristine.failures.values()), None)
    if unavailable is not None and args.host_wheel:
        unavailable = _from_host_wheels(args, targets, scans, unavailable)
    if args.command == "capture":
        if unavailable is not None:
            raise VpatchError(f"pristine side unavailable: {unavailable.message}", unavailable.hint)
        return _capture(args, scans, store)
    doc = handedit.to_json(args.package, scans)
    if args.report:
        from patcher import safewrite

        safewrite.write(args.report, json.dumps(doc, indent=2) + "\n")
    if args.json:
        emit(doc)
    else:
        handedit.render(args.package, scans)
    for s in scans:
        if s.error:
            print(line(f"error: {s.error}"), file=sys.stderr)
    if not doc["ok"]:
        hint = next((s.hint for s in scans if s.hint), None)
        print(line(f"hint: {hint or 'see the errors above'}"), file=sys.stderr)
    elif unavailable is not None:  # the hosts answered; pip's side of their files did not
        print(line(f"error: pristine side unavailable: {unavailable.message}"), file=sys.stderr)
        print(line(f"hint: {unavailable.hint}"), file=sys.stderr)
        return ExitCode.FAILED
    if any(s.unsupported for s in scans):
        return ExitCode.UNSUPPORTED  # an editable install (errors.Unsupported)
    return ExitCode.OK if doc["ok"] else ExitCode.FAILED


def _from_host_wheels(
    args: argparse.Namespace,
    targets: Sequence[Any],
    scans: Sequence[handedit.HostScan],
    unavailable: VpatchError,
) -> VpatchError | None:
    """The pristine sides the controller had no wheel for, from the wheel file each host
    holds at --host-wheel; None when every file got one, else `unavailable`. A host's bytes
    are kept only when they hash to the sha256 that host's RECORD lists for the file: the
    bytes its diff is judged against, never more trusted than that RECORD."""
    import base64
    import hashlib

    from patcher.authoring import handedit
    from patcher.run import exchange

    left = False
    for target, scan in zip(targets, scans, strict=True):
        want = [
            f
            for f in scan.files
            if f.pristine_from == handedit.UNAVAILABLE and f.record_sha256 and f.state != "added"
        ]
        if not want:
            continue
        request = {"op": "wheel_members", "path": args.host_wheel, "files": [f.rel for f in want]}
        try:
            transport = _targets.open_target(target, args)
            try:
                got = exchange.call(transport, request).get("members") or {}
            finally:
                transport.close()
        except VpatchError as exc:
            for f in want:
                f.note = f"--host-wheel: {exc.message}"
            left = True
            continue
        for f in want:
            raw = got.get(f.rel)
            try:
                data = base64.b64decode(raw, validate=True) if isinstance(raw, str) else None
            except ValueError:  # binascii.Error: the host's answer is not base64
                data = None
            if data is None:
                f.note = f"not in {args.host_wheel} on {target.name}"
            elif hashlib.sha256(data).hexdigest() != f.record_sha256:
                f.note = f"{args.host_wheel} on {target.name}: not the bytes RECORD lists"
            else:
                try:
                    f.before = data.decode("utf-8")
                except UnicodeDecodeError:
                    f.note = "not UTF-8 text"
                else:
                    f.pristine_from, f.note = handedit.WHEEL, f"from {args.host_wheel}"
                    continue
            left = True
    return unavailable if left else None


def validate(args: argparse.Namespace) -> None:
    """Bad input is exit 2 before any host is contacted."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    from patcher.specs.names import ID

    if not ID.fullmatch(args.id):
        raise UsageError(
            f"--id {args.id!r}: must be lowercase letters, digits, '.', '_' or '-'",
            "e.g. --id vllm-eagle3-kimi",
        )
    if args.output and Path(args.output).name != f"{args.id}.toml":
        raise UsageError(
            f"-o {args.output}: a spec's file is named after its id ({args.id}.toml), or "
            f"`vpatch apply {args.id}` cannot find it (`vpatch check` says so too)",
            f"-o {Path(args.output).with_name(args.id + '.toml')}",
        )
    if args.output and os.path.lexists(args.output):  # a dangling link too: never through it
        raise UsageError(
            f"-o {args.output}: exists; vpatch capture does not overwrite a spec",
            "pick another path, or move the old spec away first",
        )
    if args.versions is not None:
        try:
            SpecifierSet(args.versions)
        except InvalidSpecifier:
            raise UsageError(
                f"--versions {args.versions!r} is not a PEP 440 specifier",
                "e.g. --versions '>=0.15,<0.17'",
            ) from None
    if args.neighbours < 0:
        raise UsageError("--neighbours must be 0 or more", "e.g. --neighbours 3")


@dataclass
class FileResult:
    rel: str
    captured: Captured
    pristine: str
    edited: str
    identical: bool = False


def capture_files(scan: handedit.HostScan, replays: Replays) -> tuple[list[FileResult], list[str]]:
    """Capture every hand-edited .py file of one host; notes say what was left out and why
    (every candidate replayed through the run's `replays`)."""
    from patcher.authoring import handedit, refusals
    from patcher.authoring.backport import attempt, which
    from patcher.authoring.capture import CaptureError, capture

    out: list[FileResult] = []
    notes: list[str] = []
    refused: list[refusals.Refusal] = []
    for f in scan.files:
        if f.pristine_from == handedit.VPATCH:
            notes.append(f"{f.rel}: vpatch's own change (journaled); not captured")
            continue
        if f.state == "missing":
            notes.append(f"{f.rel}: removed on the host; a spec cannot remove a file")
            continue
        if not f.rel.endswith(".py"):
            notes.append(f"{f.rel}: not a .py file; not captured")
            continue
        if f.before is None or f.after is None:
            raise VpatchError(
                f"{f.rel}: cannot capture ({f.note or 'no text'})",
                "vpatch capture needs the file's text and pip's bytes of it (pip download of "
                "the installed release)",
            )
        try:
            cap = capture(f.before, f.after, f.rel, replays)
        except CaptureError as exc:
            hunks = list(enumerate(refusals.hunks_of(f.rel, f.before, f.after), 1))
            refused += which(f.rel, f.before, hunks, exc, attempt(f.before, f.rel, replays))
            continue
        notes.extend(cap.notes)
        if cap.edits:
            out.append(FileResult(f.rel, cap, f.before, f.after))
    if refused:
        raise refusals.Refused(refused, "undo these edits on the host, or write the spec by hand")
    return out, notes


def check_spec(text: str, results: Sequence[FileResult], replays: Replays) -> PatchSpec:
    """Load the written spec back and replay it on the pristine files: the AST must be the
    edited file's (always), the bytes too where the ops kept the layout (reported)."""
    from patcher.authoring import sameast
    from patcher.specs.model import parse_spec

    spec = parse_spec(text.encode(), "captured spec")
    variant = spec.variant[0]
    for rel, edits in variant.files():
        res = next(r for r in results if r.rel == rel)
        rw = replays.spec_edits(res.pristine if not adds(edits) else "", edits)
        res.identical = rw.source == res.edited  # the same bytes: the same AST, unparsed
        if not res.identical and sameast.dump(pyast.parse(rw.source)) != sameast.dump(
            pyast.parse(res.edited)
        ):
            raise VpatchError(
                f"{rel}: the captured spec does not reproduce the edit",
                "a bug in vpatch capture: please report it with the diff",
            )
    return spec


def adds(edits: Sequence[Any]) -> bool:
    return any(e.op == "add_file" for e in edits)


def neighbours(
    spec: PatchSpec,
    version: str,
    n: int,
    list_versions: Callable[..., list[Version]] | None = None,
) -> list[Version]:
    """Up to n releases before and n after `version` (and it), as the indexes list them
    (`list_versions`: the run's `Store.list_versions`; pip's listing without one)."""
    from packaging.version import Version

    from patcher.wheels.store import Store

    list_versions = list_versions or Store.for_run().list_versions
    here = Version(version)
    listed = sorted(set(list_versions(spec.package)) | {here})
    i = listed.index(here)
    return listed[max(0, i - n) : i + n + 1]


def fits(
    spec: PatchSpec,
    versions: Sequence[Version],
    cache_root: Path | None = None,
    store: Store | None = None,
) -> matrix.Matrix:
    """The matrix of the spec's edits over `versions` (the variant's range opened up)."""
    from patcher.specs.model import copy_with
    from patcher.wheels import matrix
    from patcher.wheels.cache import Cache, default_cache
    from patcher.wheels.store import Store

    wide = copy_with(spec, variant=[copy_with(v, versions=">=0") for v in spec.variant[:1]])
    runner = matrix.Runner(
        wide,
        Cache(cache_root or default_cache(), spec.package),
        store=store if store is not None else Store.for_run(),
    )
    releases = runner.run(versions)
    return matrix.Matrix(spec.id, spec.package, releases, "neighbouring releases")


def suggest(releases: Sequence[matrix.Release], installed: str) -> str | None:
    """The widest range around the installed release in which every examined release fits
    (`would_apply` or `satisfied_upstream`), as a specifier, or None when only it fits."""
    ok = [r.outcome in ("would_apply", "satisfied_upstream") for r in releases]
    versions = [r.version for r in releases]
    if installed not in versions or not ok[versions.index(installed)]:
        return None
    i = j = versions.index(installed)
    while i > 0 and ok[i - 1]:
        i -= 1
    while j + 1 < len(ok) and ok[j + 1]:
        j += 1
    if i == j:
        return None
    upper = f"<{versions[j + 1]}" if j + 1 < len(versions) else f"<={versions[j]}"
    return f">={versions[i]},{upper}"


def _capture(args: argparse.Namespace, scans: Sequence[handedit.HostScan], store: Store) -> int:
    """capture: one group of hosts with the same edits -> the spec."""
    from patcher.authoring import handedit

    failed = [s for s in scans if s.error]
    if failed:
        raise VpatchError(
            "; ".join(str(s.error) for s in failed), failed[0].hint or "see `vpatch diff`"
        )
    groups = handedit.group(scans)
    if len(groups) > 1:
        raise UsageError(
            f"the targets differ ({len(groups)} different sets of edits: "
            + "; ".join(", ".join(g.hosts) for g in groups)
            + ")",
            "capture from one host (--host), after `vpatch diff` shows which",
        )
    from patcher.authoring.replays import Replays

    scan = groups[0].scan
    replays = Replays()  # the run's: the candidate kept is replayed again by check_spec
    from patcher.authoring.refusals import Refused

    try:
        results, notes = capture_files(scan, replays)
    except Refused as exc:
        return refuse(args, exc)
    if not results:
        raise VpatchError(
            f"no hand edit of {args.package} {scan.version} to capture"
            + (f" ({'; '.join(notes)})" if notes else ""),
            f"`vpatch diff {args.package}` shows what differs from pip's RECORD",
        )
    origin = f"vpatch capture from {', '.join(groups[0].hosts)}"
    extra = {"targets": groups[0].hosts}
    return finish(args, str(scan.version), results, notes, origin, extra, store, replays)


def finish(
    args: argparse.Namespace,
    version: str,
    results: list[FileResult],
    notes: list[str],
    origin: str,
    extra: dict[str, Any],
    store: Store | None = None,
    replays: Replays | None = None,
) -> int:
    """Write the spec (checked by replay), run the matrix over the neighbours (through the
    run's `store`), report."""
    from patcher.authoring.capture import spec_toml
    from patcher.authoring.replays import Replays
    from patcher.commands import _matrixview
    from patcher.output.report import emit
    from patcher.result import SCHEMA_VERSION

    versions = args.versions or f"=={version}"
    summary = args.summary or f"Hand edit of {args.package} {version}, captured"
    text = spec_toml(
        args.id,
        summary,
        args.package,
        versions,
        [(r.rel, r.captured) for r in results],
        [f"{origin} ({args.package} {version}); review before use"],
    )
    spec = check_spec(text, results, replays if replays is not None else Replays())
    if args.output:
        from patcher import safewrite

        safewrite.write(args.output, text, "-o")
    table = None
    if not args.no_matrix:
        try:
            listing = store.list_versions if store is not None else None
            near = neighbours(spec, version, args.neighbours, listing)
            table = fits(spec, near, store=store)
        except VpatchError as exc:
            notes.append(f"matrix skipped: {exc.message}")
    doc = {
        "schema_version": SCHEMA_VERSION,
        "command": args.command,
        "ok": True,  # a capture that did not succeed raised: the error document says so
        "package": args.package,
        "version": version,
        **extra,
        "output": args.output,
        "files": [
            {
                "file": r.rel,
                "edits": r.captured.edits,
                "ops": [e["op"] for e in r.captured.edits],
                "bytes_identical": r.identical,
            }
            for r in results
        ],
        "notes": notes,
        "spec": text,
        "matrix": table.to_json() if table is not None else None,
        "suggested_versions": suggest(table.releases, version) if table is not None else None,
    }
    if args.json:
        emit(doc)
        return ExitCode.OK
    if not args.output:
        # the spec's bytes as they are when redirected (they are the spec); on a terminal,
        # what a host's file put in them is shown escaped (patcher.output.inert)
        sys.stdout.write(clean(text) if sys.stdout.isatty() else text)
    out = sys.stderr if not args.output else sys.stdout
    for r in results:
        ops = ", ".join(e["op"] for e in r.captured.edits)
        same = "same bytes" if r.identical else "same AST (layout differs)"
        print(line(f"captured {r.rel}: {ops}; replayed on pip's bytes: {same}"), file=out)
    for n in notes:
        print(clean(f"note: {n}"), file=out)
    if args.output:
        print(line(f"wrote {args.output}"), file=out)
    if table is not None:
        _matrixview.render_human(table, out)
        wider = doc["suggested_versions"]
        if wider and not args.versions:
            print(
                line(
                    f"hint: the edits fit every release in {wider}: rerun with --versions "
                    f"'{wider}' (or edit the variant's versions) after checking them"
                ),
                file=out,
            )
    return ExitCode.OK


def backport(args: argparse.Namespace) -> int:
    """A unified diff made against release V -> V's pristine files patched -> captured."""
    from packaging.version import InvalidVersion, Version

    from patcher.authoring import udiff
    from patcher.authoring.backport import capture_diff, refused, summary
    from patcher.authoring.replays import Replays
    from patcher.wheels.store import Store

    validate(args)
    try:
        version = Version(args.from_version)
    except InvalidVersion:
        raise UsageError(
            f"--from-version {args.from_version!r} is not a PEP 440 version", "e.g. 0.16.0"
        ) from None
    try:
        raw = sys.stdin.read() if args.diff == "-" else Path(args.diff).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{args.diff}: cannot read the diff ({exc})", "pass a diff file") from None
    try:
        patches = udiff.parse(raw)
    except udiff.PatchError as exc:
        raise UsageError(f"{args.diff}: {exc}", "pass a unified diff (git diff, diff -u)") from None
    store = Store.for_run(args.wheelhouse, refresh=args.refresh)  # one wheel open, every file
    replays = Replays()

    def read(rel: str) -> str:
        data = store.wheel(args.package, version).read(rel)
        if data is None:
            raise UsageError(
                f"{rel} is not in the {args.package} {version} wheel",
                "paths are relative to site-packages (pkg/module.py); is --from-version right?",
            )
        return data.decode("utf-8")

    done = capture_diff(patches, read, replays, f"{args.package} {version}")
    if done.refused:
        return refuse(args, refused(done))
    results = [FileResult(*f) for f in done.files]
    if not results:
        raise UsageError(f"{args.diff}: nothing to capture ({'; '.join(done.notes)})", "")
    origin = f"vpatch backport of {Path(args.diff).name}"
    args.summary = args.summary or summary(args.diff, args.package, str(version))
    extra = {"diff": args.diff}
    return finish(args, str(version), results, done.notes, origin, extra, store, replays)


def refuse(args: argparse.Namespace, exc: Refused) -> int:
    """Every hunk the spec cannot carry, one `error:` line each, then the hint; with --json
    the error document, with them all in `refused`. Nothing is written."""
    from patcher.output.report import emit, error_document

    for r in exc.refused:
        print(line(f"error: {r.text()}"), file=sys.stderr)
    print(line(f"hint: {exc.hint}"), file=sys.stderr)
    if args.json:
        more = {"refused": [r.to_json() for r in exc.refused]}
        emit(error_document(exc.message, exc.hint, args.command, **more))
    return exc.exit_code
