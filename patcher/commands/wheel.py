"""`vpatch wheel`: a patched wheel of a release (patcher.wheels.build), for images, lock files and
indexes. Exit 0 with the wheel written; 1 when a spec does not fit the release or no wheel can
be had; 2 for bad input."""

from __future__ import annotations

import argparse

from patcher.commands import _targets
from patcher.commands._help import SPEC_HELP
from patcher.errors import VpatchError
from patcher.exitcodes import ExitCode


def add_options(wp: argparse.ArgumentParser, name: str) -> None:
    wp.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    wp.add_argument(
        "--package", required=True, metavar="NAME==VERSION", help="the release, e.g. vllm==0.16.0"
    )
    wp.add_argument(
        "-o", "--output-dir", default=".", metavar="DIR", help="write the wheel here (default: .)"
    )
    wp.add_argument(
        "--from-wheel", metavar="FILE", help="patch this wheel file (default: the release's wheel)"
    )
    _targets.platform_option(wp)
    _targets.wheelhouse_option(wp)
    _targets.json_option(wp)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from patcher.specs import catalog
    from patcher.wheels import build, wheelhouse
    from patcher.wheels.store import Store, progress_for
    from patcher.wheels.wheel import CorruptWheel

    package, version = build.parse_package(args.package)
    if args.from_wheel:
        wheelhouse.checked([args.from_wheel])
    specs = catalog.load_all(args.specs)
    build.check_package(specs, package, version)
    # the whole wheel: every member is copied into the patched one (no ranged reads)
    store = Store.for_run(
        args.wheelhouse, args.platform, progress_for(args.json), partial=False, refresh=args.refresh
    )
    if args.from_wheel:
        store.sources = [Path(args.from_wheel)]
    try:
        wheel = store.wheel(package, version)
    except CorruptWheel as exc:
        raise VpatchError(exc.message, "pass pip's wheel of the release") from None
    baked = build.decide(specs, version, wheel)
    path, sha = build.write(wheel, package, version, baked, Path(args.output_dir))
    store.close()
    if args.json:
        from patcher.output.report import emit
        from patcher.result import SCHEMA_VERSION

        emit(
            {
                "schema_version": SCHEMA_VERSION,
                "command": "wheel",
                "ok": True,
                "wheel": str(path),
                "sha256": sha,
                "package": package,
                "version": str(version),
                "baked_version": baked.version,
                "specs": baked.specs,
            }
        )
        return ExitCode.OK
    from patcher.output.inert import line

    for entry in baked.specs:  # names from specs, wheels and the command line: escaped
        files = ", ".join(f["file"] for f in entry["files"]) or "-"
        print(line(f"{entry['id']}: {entry['outcome']} ({files})"))
    print(line(f"wrote {path}"))
    return ExitCode.OK
