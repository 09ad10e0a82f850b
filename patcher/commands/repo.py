"""The patch repository's tools, offline (no host): `vpatch check` (validate spec files, for
patch repos and pre-commit), `vpatch catalog` (the ids SPEC can name) and `vpatch schema` (the
JSON Schemas of the spec format and of the result document)."""

from __future__ import annotations

import argparse
import json
import sys

from patcher.commands import _targets
from patcher.exitcodes import ExitCode


def add_options(p: argparse.ArgumentParser, name: str) -> None:
    if name == "check":
        p.add_argument(
            "paths", nargs="+", metavar="SPEC_OR_DIR", help="spec files, or directories of them"
        )
    if name == "schema":
        p.add_argument(
            "--result",
            action="store_true",
            help="the schema of the --json result document instead (apply, verify, ...)",
        )
        return
    _targets.json_option(p)


def run(args: argparse.Namespace) -> int:
    if args.command == "schema":
        from patcher.commands import _schema

        print(
            json.dumps(_schema.result_schema() if args.result else _schema.spec_schema(), indent=2)
        )
        return ExitCode.OK
    if args.command == "catalog":
        _catalog(args.json)
        return ExitCode.OK
    from patcher.output.report import emit
    from patcher.specs import check

    report = check.check(args.paths)
    if args.json:
        emit(check.to_json(report))
    check.render(report, None if args.json else sys.stdout, sys.stderr)
    return ExitCode.OK if report.ok else ExitCode.USAGE


def _catalog(as_json: bool) -> None:
    """`vpatch catalog`: each id once, from the first catalog that has it (what SPEC loads)."""
    from patcher.output.inert import line
    from patcher.output.report import emit
    from patcher.result import SCHEMA_VERSION
    from patcher.specs import catalog

    catalogs = catalog.Catalog()  # listed once: ./patches's warning said once
    found = catalogs.entries()
    if as_json:
        emit(
            {
                "schema_version": SCHEMA_VERSION,
                "command": "catalog",
                "ok": True,
                "sources": [{"source": s, "path": str(d)} for s, d in catalogs.sources()],
                "specs": [
                    {
                        "id": e.id,
                        "source": e.source,
                        "path": str(e.path),
                        "shadows": [str(p) for p in e.shadows],
                    }
                    for e in found
                ],
            }
        )
        return
    if not found:
        print("no catalog ids (set $VPATCH_CATALOG or run where ./patches is)", file=sys.stderr)
    width = max((len(e.id) for e in found), default=0)
    for e in found:
        hidden = f"  (overrides {', '.join(map(str, e.shadows))})" if e.shadows else ""
        print(line(f"{e.id:<{width}}  {e.source:<15}  {e.path}{hidden}"))
