"""`vpatch diff` and `vpatch capture`: what was changed by hand in an installed package, on
every target, against the bytes pip installed; and the spec that reproduces it.

The agent's `scan` op lists the distribution's files whose bytes are not RECORD's (modified,
missing, or added under the package's directories). The pristine side of each diff is
vpatch's own backup when the journal has one (vpatch wrote the change), else the file as the
wheel of that exact release ships it (`patcher.wheels`: a wheelhouse, or pip's wheel fetched
once into the wheel store, every file checked against the wheel's RECORD). Hosts whose
changed files have the same hashes form one group: a fleet edited the same way prints one diff.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, TextIO

from packaging.version import InvalidVersion

from patcher.authoring import sysdiff
from patcher.caches import rewrites
from patcher.errors import HostError, VpatchError
from patcher.output.inert import clean, line
from patcher.output.lines import put
from patcher.plan import fastdiff
from patcher.result import SCHEMA_VERSION
from patcher.run import exchange
from patcher.transports import Transport

VPATCH = "vpatch"  # the pristine side is vpatch's own backup (the journal's base)
WHEEL = "wheel"  # ... the file in the release's wheel
NONE = "none"  # ... nothing: the file is not in RECORD (added)
UNAVAILABLE = "unavailable"  # ... could not be had (no wheel, not text)


@dataclass
class FileDiff:
    rel: str
    path: str
    state: str  # modified | missing | added
    sha256: str | None
    record_sha256: str | None
    pristine_from: str
    before: str | None  # pristine text
    after: str | None  # text on the host
    note: str = ""
    early: sysdiff.Unified | None = field(default=None, repr=False, compare=False)

    def start(self) -> None:
        """Start the system's diff of a big file now, its texts just here: it runs while the
        rest of the scan finishes (the host's connection closing), and `diff` takes it."""
        texts = self._texts()
        if self.early is None and texts is not None:
            names = f"a/{self.rel}", f"b/{self.rel}"
            self.early = sysdiff.Unified(*texts, *names, small=fastdiff.SMALL)

    def _texts(self) -> tuple[str, str] | None:
        """(pristine, on the host) to diff, or None where there is no diff to make."""
        if self.before is None or (self.after is None and self.state != "missing"):
            return None
        return self.before, self.after or ""

    @cached_property
    def diff(self) -> str:
        """The unified diff (made once: the report and --json both print it)."""
        texts = self._texts()
        if texts is None:
            return ""
        before, after = texts
        fromfile, tofile = f"a/{self.rel}", f"b/{self.rel}"
        job, self.early = self.early, None
        if job is None or job.texts[0] is not before or job.texts[1] is not after:
            job = sysdiff.Unified(before, after, fromfile, tofile, small=fastdiff.SMALL)
        got = job.text()
        if got is not None:  # a big file: diff's changes
            return got
        a, b = fastdiff.split_lines(before), fastdiff.split_lines(after)
        return "".join(
            fastdiff.unified_diff(
                a,
                b,
                fromfile=fromfile,
                tofile=tofile,
                matcher=sysdiff.matching_blocks,  # a stretch without anchors: the system's diff
            )
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.rel,
            "path": self.path,
            "state": self.state,
            "sha256": self.sha256,
            "record_sha256": self.record_sha256,
            "pristine": self.pristine_from,
            "note": self.note,
            "diff": self.diff,
        }


@dataclass
class HostScan:
    target: str
    version: str | None = None
    files: list[FileDiff] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None
    hint: str | None = None
    unsupported: bool = False  # an editable install: the CLI exits 2 (errors.Unsupported)
    baked: list[str] = field(default_factory=list)  # spec ids `vpatch wheel` baked in

    @property
    def key(self) -> tuple[Any, ...]:
        files = tuple((f.rel, f.state, f.sha256) for f in self.files)
        return (self.version, files, tuple(self.skipped), tuple(self.baked))


@dataclass
class Group:
    hosts: list[str]
    scan: HostScan


class Pristine:
    """Pip's bytes of (version, file), fetched once per run (thread-safe); None if unknown."""

    def __init__(self, package: str, fetch: Callable[[str, str], bytes | None] | None = None):
        self.package = package
        self._fetch = fetch
        self._got: dict[tuple[str, str], tuple[bytes | None, str]] = {}
        self._lock = threading.Lock()
        # why a release's wheel could not be had (no wheelhouse, no index): the command's error
        self.failures: dict[str, VpatchError] = {}

    def get(self, version: str, rel: str) -> tuple[bytes | None, str]:
        """(bytes, why-not) of the file in the wheel."""
        with self._lock:
            if (version, rel) not in self._got:
                self._got[(version, rel)] = self._load(version, rel)
            return self._got[(version, rel)]

    def _load(self, version: str, rel: str) -> tuple[bytes | None, str]:
        try:
            if self._fetch is None:  # a wheel store of this Pristine's own (its run's)
                from patcher.wheels.store import Store

                self._fetch = partial(Store.for_run().file, self.package)
            return self._fetch(version, rel), ""
        except InvalidVersion:
            return None, f"{version} is not a PEP 440 version"
        except VpatchError as exc:  # no wheel to be had, or a store that is not safe
            self.failures.setdefault(version, exc)
            return None, exc.message
        except OSError as exc:
            return None, f"wheel store: {exc}"


def scan_host(
    transport: Transport,
    package: str,
    files: Sequence[str],
    state_dir: str | None,
    pristine: Pristine,
    texts: dict[str, str],
) -> HostScan:
    """One host: the agent's scan, then the pristine side of every file."""
    out = HostScan(transport.target)
    res = exchange.call(  # the agent call of every command: one error shape for all
        transport,
        {
            "op": "scan",
            "package": package,
            "files": list(files),
            "state_dir": state_dir,
            "known": sorted(texts.copy()),  # other hosts add to it meanwhile
        },
    )
    out.version = res.get("version")
    if out.version is None:
        out.error = f"{transport.target}: package {package} is not installed"
        out.hint = "check the package name and --python (the interpreter of that environment)"
        return out
    if res.get("editable"):
        out.error = (
            f"{transport.target}: {package} is an editable install (pip install -e "
            f"{res['editable']}): its code is that source tree, not pip's RECORD files, so "
            "vpatch cannot tell what differs"
        )
        out.hint = "diff the source tree with its own VCS (`git diff` there)"
        out.unsupported = True
        return out
    out.skipped = list(res.get("skipped") or [])
    out.baked = [str(x) for x in res.get("baked") or []]
    bases = res.get("journal") or {}
    for info in res.get("files") or []:
        sha = info.get("sha256")
        if info.get("text") is not None:
            _keep(transport.target, texts, f"{package}/{info.get('rel')}", sha, info["text"])
        after = texts.get(sha) if sha else None
        f = FileDiff(
            str(info["rel"]),
            str(info["path"]),
            str(info["state"]),
            sha,
            info.get("record_sha256"),
            UNAVAILABLE,
            None,
            after,
        )
        base = bases.get(f.path)
        # vpatch's backup is the pristine side only when it IS pip's bytes (or vpatch created
        # the file): after `apply --force` the base is the hand-edited file, and a diff against
        # it would hide that hand edit. Then the wheel's bytes are the pristine side.
        own = base and (base.get("created") or base.get("base") == f.record_sha256)
        if base and own:
            text = base.get("base_text")
            if text is not None:
                _keep(transport.target, texts, f"{f.path} (its backup)", base.get("base"), text)
            f.before = "" if base.get("created") else texts.get(str(base.get("base")))
            f.pristine_from = VPATCH
        elif f.state == "added":
            f.before, f.pristine_from = "", NONE
        else:
            data, why = pristine.get(out.version, f.rel)
            if data is None:
                f.note = why or "not in the release's wheel"
            else:
                try:
                    f.before, f.pristine_from = data.decode("utf-8"), WHEEL
                except UnicodeDecodeError:
                    f.note = "not UTF-8 text"
        if sha and after is None:
            f.note = f.note or "not UTF-8 text, or too large to show"
        out.files.append(f)
    return out


def _keep(target: str, texts: dict[str, str], where: str, sha: Any, text: Any) -> None:
    """A host's text joins the run's texts only under its own sha256 (rewrite_cache.Texts):
    another host's diff never shows this host's bytes."""
    try:
        texts[sha] = text
    except (TypeError, ValueError):
        raise exchange.forged(target, where) from None


def group(scans: Sequence[HostScan]) -> list[Group]:
    """Hosts with the same version and the same changed files (by hash) share one group."""
    groups: dict[tuple[Any, ...], Group] = {}
    for s in scans:
        if s.error:
            continue
        g = groups.get(s.key)
        if g is None:
            groups[s.key] = Group([s.target], s)
        else:
            g.hosts.append(s.target)
    return list(groups.values())


def label(f: FileDiff, package: str, version: str | None) -> str:
    return {
        VPATCH: "pristine side: vpatch's own (the backup the journal's base names)",
        WHEEL: f"pristine side: {package} {version} wheel (pip's RECORD bytes)",
        NONE: "not in pip's RECORD: added on the host",
        UNAVAILABLE: f"pristine side unavailable: {f.note}",
    }[f.pristine_from]


def to_json(package: str, scans: Sequence[HostScan]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "diff",
        "package": package,
        "ok": all(s.error is None for s in scans),
        "groups": [
            {
                "hosts": g.hosts,
                "version": g.scan.version,
                "files": [f.to_json() for f in g.scan.files],
                "skipped": g.scan.skipped,
                "baked": g.scan.baked,
            }
            for g in group(scans)
        ],
        "errors": [
            {"target": s.target, "error": s.error, "hint": s.hint} for s in scans if s.error
        ],
    }


def render(package: str, scans: Sequence[HostScan], out: TextIO | None = None) -> None:
    """For people: every string here but the counts came from a host (patcher.output.inert)."""
    out = out or sys.stdout  # looked up now: a default would keep the stream of import time
    for g in group(scans):
        s = g.scan
        who = line(", ".join(g.hosts))
        package, version = line(package), line(s.version)
        count = f"{len(g.hosts)} host{'s' if len(g.hosts) != 1 else ''}"
        if s.baked:  # RECORD is the patched wheel's: "pip's" would hide the baked specs
            ids, out_how = line(", ".join(s.baked)), line(_taken_out(package, s.version))
            say = f"{ids} baked into the installed wheel by `vpatch wheel`: its files are not "
            put(f"# {count} ({who}): {package} {version}: {say}pip's; {out_how}", out)
        whose = "the installed wheel's" if s.baked else "pip's"
        if not s.files and not s.skipped:
            put(f"# {count} ({who}): {package} {version}: every file is {whose}", out)
            continue
        if not s.files:
            put(
                f"# {count} ({who}): {package} {version}: every file checked is {whose}; "
                f"{line(_unchecked(s.skipped))}",
                out,
            )
            continue
        changed = len(s.files)
        put(
            f"# {count} ({who}): {package} {version}: {changed} file(s) differ from {whose} RECORD",
            out,
        )
        for f in s.files:
            put(line(f"# {f.rel}: {f.state}; {label(f, package, s.version)}"), out)
            text = clean(f.diff)
            if text:
                out.write(text if text.endswith("\n") else text + "\n")
        if s.skipped:
            put(line(f"# {_unchecked(s.skipped)}"), out)


def _taken_out(package: str, version: str | None) -> str:
    from patcher.plan.base import baked_release

    note = baked_release(version, package)
    return note.partition("; ")[2] or note


def _unchecked(skipped: Sequence[str]) -> str:
    """Which files the scan did not hash (over its size limit, or not a plain file it may read:
    a link, a foreign hard link, a `..` RECORD line): named, never counted as pip's."""
    shown = ", ".join(skipped[:10]) + (
        f" and {len(skipped) - 10} more" if len(skipped) > 10 else ""
    )
    why = "larger than the scan's limit or not a plain file"
    return f"NOT checked ({why}): {len(skipped)} file(s): {shown}"


def scan_all(
    package: str,
    files: Sequence[str],
    targets: Sequence[Any],
    open_transport: Callable[[Any], Transport],
    state_dir: str | None,
    parallel: int,
    pristine: Pristine | None = None,
    early: bool = False,
) -> list[HostScan]:
    """Every target, `parallel` at a time, in target order. `early`: each big file's diff
    started as its host's scan ends (`FileDiff.start`), for a command that prints the diffs of
    every host's files (one host: no two hosts' diffs of the same texts)."""
    pristine = pristine or Pristine(package)
    texts: dict[str, str] = rewrites.Texts()

    def one(target: Any) -> HostScan:
        try:
            transport = open_transport(target)
        except HostError as exc:
            return HostScan(target.name, error=exc.message, hint=exc.hint or None)
        try:
            scan = scan_host(transport, package, files, state_dir, pristine, texts)
            if early:
                for f in scan.files:
                    f.start()  # a big file's diff runs while this host's connection closes
            return scan
        except VpatchError as exc:
            return HostScan(target.name, error=exc.message, hint=exc.hint or None)
        finally:
            transport.close()

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets)))) as pool:
        return list(pool.map(one, targets))
