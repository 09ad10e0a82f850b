"""`vpatch wheel`: pip's wheel of a release with specs baked in, for immutable images.

The decision is the one `vpatch apply` makes, without a host: the variant is the planner's
(`patcher.plan.base.choose`), its edits run on the file as the release's wheel ships it
(`patcher.rewrite.apply_edits`, specs stacked in the order given, as apply stacks them). The
new wheel is the old one with:

- the patched (or added) files;
- a PEP 440 local version, `VER+vpatch.<digest>` (`VER+LOCAL.vpatch.<digest>` when the release
  has one already, e.g. torch's `+cu128`), in the file name, the dist-info directory and
  METADATA: pip and uv install it like any wheel, a lock file or a private index pins it;
- `vpatch.json` in the dist-info: each spec's id, digest, variant and outcome, and per file
  pip's sha256 and the baked one;
- RECORD regenerated (sha256 and size of every file), written by the csv module as pip and
  uv read it: vLLM 0.16.0 has 514 file names with commas (`E=1,N=14336,...json`), which only
  quoting keeps one field;

On a host, the installed file then is pip's RECORD bytes and has the spec's code, and the
version's local label says vpatch baked it: `vpatch status/verify` report the spec `applied`
(baked into the wheel), `apply`/`ensure` `already_applied`; rolling it back is installing
pip's wheel of VER. Every member copied from the source wheel is checked against its RECORD.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from patcher import safewrite
from patcher.errors import UsageError, VpatchError
from patcher.plan.base import choose, rewrite_outcome, sha256_text
from patcher.result import SCHEMA_VERSION
from patcher.rewrite import apply_edits
from patcher.specs.model import PatchSpec
from patcher.wheels.wheel import CorruptWheel, Wheel

BAKED_LABEL = "vpatch"  # the local version segment that marks a baked wheel


def parse_package(text: str) -> tuple[str, Version]:
    """`--package NAME==VERSION` (exit 2 for anything else)."""
    name, sep, version = text.partition("==")
    try:
        if not sep or not name.strip():
            raise InvalidVersion(text)
        return name.strip(), Version(version.strip())
    except InvalidVersion:
        raise UsageError(
            f"--package {text!r}: expected NAME==VERSION", "e.g. --package vllm==0.16.0"
        ) from None


def baked_version(version: Version, digest: str) -> str:
    """The patched wheel's version: a local label pip orders after VER's own wheel."""
    sep = "." if version.local else "+"
    return f"{version}{sep}{BAKED_LABEL}.{digest}"


def specs_digest(specs: list[PatchSpec]) -> str:
    blob = "\n".join(f"{s.id}:{s.digest}" for s in specs)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass
class Baked:
    """What `vpatch wheel` made: the decision per spec, the texts to write, the manifest."""

    version: str
    texts: dict[str, str] = field(default_factory=dict)  # rel -> patched text
    specs: list[dict[str, Any]] = field(default_factory=list)


def decide(specs: list[PatchSpec], version: Version, wheel: Wheel) -> Baked:
    """PURE but for reading the wheel: every spec's edits on the release's files, stacked."""
    out = Baked(baked_version(version, specs_digest(specs)))
    pristine: dict[str, bytes | None] = {}
    for spec in specs:
        res, index, variant = choose(spec, str(version))
        entry: dict[str, Any] = {
            "id": spec.id,
            "digest": spec.digest,
            "variant": index if index >= 0 else None,
            "outcome": res.outcome,
            "files": [],
        }
        out.specs.append(entry)
        if variant is None:
            if res.outcome != "satisfied_upstream":
                raise UsageError(f"{spec.id}: {res.message}", "pick a release the spec covers")
            continue
        changed = False
        for rel, edits in variant.files():
            if rel not in pristine:
                pristine[rel] = wheel.read(rel)
            data = pristine[rel]
            adds = any(e.op == "add_file" for e in edits)
            if data is None and not adds:
                raise VpatchError(
                    f"{spec.id}: {rel} is not in the {spec.package} {version} wheel",
                    f"`vpatch matrix {spec.id} --versions =={version}` says which releases fit",
                )
            try:
                before = out.texts.get(rel, (data or b"").decode("utf-8"))
            except UnicodeDecodeError:
                raise VpatchError(f"{spec.id}: {rel} is not UTF-8 text", "") from None
            rw = apply_edits(before, edits)
            verdict = rewrite_outcome(rw.status)
            if verdict not in ("would_apply", "satisfied_upstream"):
                raise VpatchError(
                    f"{spec.id}: {rel}: {rw.message} ({verdict})",
                    f"`vpatch matrix {spec.id} --versions =={version}` says which releases fit",
                )
            if rw.status == "changed":
                out.texts[rel] = rw.source
                changed = True
            entry["files"].append(
                {
                    "file": rel,
                    "pristine_sha256": None if data is None else hashlib.sha256(data).hexdigest(),
                    "sha256": sha256_text(out.texts.get(rel, before)),
                }
            )
        entry["outcome"] = "applied" if changed else "satisfied_upstream"
    if not out.texts:
        raise VpatchError(
            f"every spec is already in {specs[0].package} {version}: nothing to bake",
            "install pip's wheel as it is",
        )
    return out


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata(data: bytes, version: str) -> bytes:
    """METADATA with its Version header replaced (the header block only; the body is prose)."""
    head, sep, body = data.partition(b"\n\n")
    lines = [
        f"Version: {version}".encode() if ln.startswith(b"Version:") else ln
        for ln in head.split(b"\n")
    ]
    return b"\n".join(lines) + sep + body


def write(
    wheel: Wheel, package: str, version: Version, baked: Baked, out_dir: Path
) -> tuple[Path, str]:
    """Write the patched wheel into out_dir (atomically); its path and sha256."""
    stem = wheel.name[: -len(".whl")]
    parts = stem.split("-")
    if len(parts) not in (5, 6):
        raise CorruptWheel(f"{wheel.name}: not a wheel file name")
    dist = parts[0]
    new_ver = baked.version.replace("-", "_")
    name = "-".join([dist, new_ver, *parts[2:]]) + ".whl"
    old_info, old_data = wheel.dist_info, wheel.dist_info[: -len(".dist-info")] + ".data"
    new_info = f"{dist}-{new_ver}.dist-info"
    new_data = f"{dist}-{new_ver}.data"
    member_of = {rel: wheel.members.get(rel, rel) for rel in baked.texts}
    patched = {m: baked.texts[rel].encode("utf-8") for rel, m in member_of.items()}
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "package": package,
        "version": str(version),
        "baked_version": baked.version,
        "pristine_wheel": {"file": wheel.name, "sha256": wheel.file_sha256()},
        "specs": baked.specs,
    }

    def rename(member: str) -> str:
        top, sep, rest = member.partition("/")
        if top == old_info:
            return f"{new_info}{sep}{rest}"
        if top == old_data:
            return f"{new_data}{sep}{rest}"
        return member

    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
    record: list[tuple[str, str, str]] = []
    try:
        os.fchmod(fd, _umask_mode())
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:

            def put(info: zipfile.ZipInfo, member: str, data: bytes) -> None:
                new = zipfile.ZipInfo(member, info.date_time)
                new.external_attr, new.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
                zf.writestr(new, data)
                record.append((member, f"sha256={_b64(data)}", str(len(data))))

            seen: set[str] = set()
            for info in wheel.zip.infolist():
                member = info.filename
                if member.endswith("/") or member == wheel.record_name:
                    continue
                seen.add(member)
                if member in patched:
                    put(info, rename(member), patched[member])
                elif member == f"{old_info}/METADATA":
                    put(info, rename(member), _metadata(wheel.read_member(member), baked.version))
                else:  # checked against RECORD, then copied as stored: no recompression
                    checked = wheel.check_member(member)
                    _copy_raw(zf, wheel, checked, rename(member))
                    digest = wheel.hashes[member]
                    assert digest is not None  # check_member refused a member without one
                    b64 = base64.urlsafe_b64encode(bytes.fromhex(digest)).rstrip(b"=").decode()
                    record.append((rename(member), f"sha256={b64}", str(checked.file_size)))
            stamp = zipfile.ZipInfo("x", (2020, 1, 1, 0, 0, 0))
            stamp.external_attr = 0o644 << 16
            for member, data in patched.items():
                if member not in seen:  # added by add_file
                    put(stamp, member, data)
            doc = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
            put(stamp, f"{new_info}/vpatch.json", doc)
            record.append((f"{new_info}/RECORD", "", ""))
            new_record = zipfile.ZipInfo(f"{new_info}/RECORD", stamp.date_time)
            new_record.external_attr = stamp.external_attr
            zf.writestr(new_record, record_text(record), zipfile.ZIP_DEFLATED)
            fh.flush()
            os.fsync(fh.fileno())
        target = out_dir / name
        safewrite.check(target, "--output-dir")  # a link or a stranger's file: refused
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    h = hashlib.sha256()
    with open(target, "rb") as fh2:
        while chunk := fh2.read(1 << 20):
            h.update(chunk)
    return target, h.hexdigest()


def record_text(rows: list[tuple[str, str, str]]) -> str:
    """RECORD as the wheel spec says it is: CSV, a field quoted when it holds a comma or a
    quote (csv's minimal quoting, pip's own writer), one row a line."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _umask_mode() -> int:
    """The mode a plain `open(..., "w")` would give the wheel (0644 under umask 022):
    mkstemp's 0600 would keep the image's installer (another user, a build stage) out."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _copy_raw(zf: zipfile.ZipFile, wheel: Wheel, info: zipfile.ZipInfo, name: str) -> None:
    """Append a member's stored bytes under a new name (zipfile has no public raw copy: this
    writes the local header and data where ZipFile.writestr would, and registers the entry
    for the central directory the same way)."""
    new = zipfile.ZipInfo(name, info.date_time)
    new.compress_type, new.external_attr = info.compress_type, info.external_attr
    new.CRC, new.compress_size, new.file_size = info.CRC, info.compress_size, info.file_size
    new.create_system = info.create_system
    zf.fp.seek(zf.start_dir)  # type: ignore[union-attr]
    new.header_offset = zf.fp.tell()  # type: ignore[union-attr]
    zf.fp.write(new.FileHeader())  # type: ignore[union-attr]
    for chunk in wheel.raw(info):
        zf.fp.write(chunk)  # type: ignore[union-attr]
    zf.start_dir = zf.fp.tell()  # type: ignore[union-attr]
    zf.filelist.append(new)
    zf.NameToInfo[name] = new
    zf._didModify = True  # type: ignore[attr-defined]


def check_package(specs: list[PatchSpec], package: str, version: Version) -> None:
    """Bad input before any wheel is fetched: another package, a release no variant covers."""
    wrong = [s.id for s in specs if canonicalize_name(s.package) != canonicalize_name(package)]
    if wrong:
        raise UsageError(
            f"{', '.join(wrong)} patch another package than {package}",
            "one wheel per package: pass only that package's specs",
        )
    for spec in specs:
        res, _index, _variant = choose(spec, str(version))
        if res.outcome == "not_applicable":
            raise UsageError(f"{spec.id}: {res.message}", "pick a release the spec covers")
