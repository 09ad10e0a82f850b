"""Authoring with pip's bytes: `vpatch capture` cold and warm, and `vpatch wheel`, on one env.

    python -m bench.wheels                # real vLLM 0.16.0 env, wheel from the test cache
    python -m bench.wheels --standin      # the stand-in package (seconds; a smoke test)
    python -m bench.wheels --configured-index   # + capture against pip's configured index

Rows (wall and CPU of the whole command's process tree, bench/timing.py; medians):
- capture-cold   `vpatch capture PACKAGE FILE --id ... --no-matrix --wheelhouse WHEEL` with an
                 empty wheel store: the wheel is read from the wheelhouse into the store, the
                 file's pristine bytes taken from it (checked against RECORD) and the spec made
- capture-warm   the same with the store filled by the cold run: what every later authoring
                 command pays
- capture-cold-ranges  the same capture with an empty store and no wheelhouse, pip's index a
                 real server on 127.0.0.1 (tests/support/rangeindex.py) that answers Range:
                 only the members needed are read (patcher.wheels.remote); `ranges_kb` is
                 what the server sent (median)
- wheel-build    `vpatch wheel SPEC --package NAME==VER --from-wheel WHEEL -o DIR`: the patched
                 wheel, RECORD regenerated (the catalog spec on vLLM; SPEC_A on the stand-in)
- capture-index-cold / capture-index-warm (only with --configured-index: it reaches whatever
                 index pip's configuration names, the network included): `vpatch capture
                 vllm FILE --id ...` as a user runs it, no wheelhouse, WITH its matrix of the
                 neighbouring releases; cold: empty wheel store, matrix and rewrite caches;
                 warm: the same command again (kept pages, kept members, kept verdicts and
                 replays: no request). Each sample carries the load average it ran under.

The env is a private copy (tests/envs.py clone, or a stand-in venv) with one hand edit: a line
appended to the file by rename (never into a hard-linked template file). No network: the
wheel comes from the wheelhouse given (or, for the ranges row, from the index on 127.0.0.1), so
the figures are the store's and not a remote index's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.measured import vpatch_argv
from bench.timing import Timed, child_env, summary, timed
from tests import envs, standin
from tests.support import rangeindex
from tests.support.standin_specs import SPEC_A

REPO = Path(__file__).resolve().parent.parent
VLLM_VERSION = "0.16.0"
VLLM_FILE = "vllm/config/speculative.py"
VLLM_SPEC = REPO / "patches" / "vllm-eagle3-mla-targets.toml"
REPS = 3
EDIT = "\nVPATCH_BENCH_HAND_EDIT = 1\n"


class WheelsError(RuntimeError):
    """A command did not do its job: no figure is reported."""


def _vpatch(*argv: str, cache: Path) -> list[str]:
    return [*vpatch_argv(), *argv]


def _edit(path: Path) -> None:
    """Append EDIT by writing a new file and renaming it over the old (a hard-linked template
    keeps its bytes)."""
    tmp = path.with_name(path.name + ".vpatch-bench")
    tmp.write_text(path.read_text() + EDIT)
    os.replace(tmp, path)


def _setup(work: Path, use_standin: bool) -> dict[str, Any]:
    if use_standin:
        python = standin.make_env(work / "env")
        wheel = next(work.glob(f"{standin.PACKAGE}-*.whl"))
        rel, spec = f"{standin.PACKAGE}/config.py", work / "servekit-kimi.toml"
        spec.write_text(SPEC_A)
        package, version = standin.PACKAGE, "1.0.0"
    else:
        env = envs.clone(VLLM_VERSION, work / "env")
        python = env / "bin" / "python"
        found = sorted(envs.CACHE.glob(f"wheels/vllm-{VLLM_VERSION}-*.whl"))
        if not found:
            raise WheelsError(f"no vllm {VLLM_VERSION} wheel under {envs.CACHE}/wheels")
        wheel, rel, spec = found[0], VLLM_FILE, VLLM_SPEC
        package, version = "vllm", VLLM_VERSION
    site = envs.site_packages(python.parent.parent)
    _edit(site / rel)
    return {
        "python": str(python),
        "wheel": str(wheel),
        "file": rel,
        "spec": str(spec),
        "package": package,
        "version": version,
    }


def _run(argv: list[str], cache: Path, what: str, extra: dict[str, str] | None = None) -> Timed:
    env = child_env(
        {
            "VPATCH_CACHE_DIR": str(cache / "rewrites"),
            "VPATCH_WHEEL_STORE": str(cache / "wheels"),
            "XDG_CACHE_HOME": str(cache / "xdg"),
            **(extra or {}),
        }
    )
    t = timed(argv, env=env, cwd=str(REPO), timeout=1800)
    if t.code != 0:
        tail = (t.err.strip() or t.out.strip())[-1500:]
        raise WheelsError(f"{what}: exit {t.code}\n{tail}")
    return t


def measure(work: Path, use_standin: bool, reps: int) -> dict[str, Any]:
    s = _setup(work, use_standin)
    capture = [
        "capture",
        s["package"],
        s["file"],
        "--id",
        "bench-capture",
        "--no-matrix",
        "--python",
        s["python"],
        "--wheelhouse",
        s["wheel"],
    ]
    rows: dict[str, list[Timed]] = {
        "capture-cold": [],
        "capture-warm": [],
        "capture-cold-ranges": [],
        "wheel-build": [],
    }
    sent: list[int] = []
    for rep in range(reps):
        cache = work / f"cache-{rep}"  # cold: nothing stored yet
        t = _run(_vpatch(*capture, cache=cache), cache, "capture (cold)")
        if "VPATCH_BENCH_HAND_EDIT" not in t.out:
            raise WheelsError(f"capture (cold): the spec does not carry the hand edit:\n{t.out}")
        rows["capture-cold"].append(t)
        t = _run(_vpatch(*capture, cache=cache), cache, "capture (warm)")
        rows["capture-warm"].append(t)
        with rangeindex.serve([Path(s["wheel"])]) as index:
            cold = work / f"cache-ranges-{rep}"
            extra = {
                **rangeindex.pip_env(index),
                "VPATCH_WHEELHOUSE": "",
                "VPATCH_MATRIX_WHEELS": "",
            }
            t = _run(_vpatch(*capture[:-2], cache=cold), cold, "capture (cold, ranges)", extra)
            sent.append(index.sent)
        if "VPATCH_BENCH_HAND_EDIT" not in t.out:
            raise WheelsError(f"capture (ranges): the spec does not carry the hand edit:\n{t.out}")
        rows["capture-cold-ranges"].append(t)
        out = work / f"wheel-{rep}"
        argv = ["wheel", s["spec"], "--package", f"{s['package']}=={s['version']}"]
        argv += ["--from-wheel", s["wheel"], "-o", str(out)]
        t = _run(_vpatch(*argv, cache=cache), cache, "vpatch wheel")
        if not list(out.glob("*+vpatch.*.whl")):
            raise WheelsError(f"vpatch wheel wrote no patched wheel in {out}")
        rows["wheel-build"].append(t)
    wheel_mb = Path(s["wheel"]).stat().st_size / 2**20
    return {
        "env": "standin" if use_standin else f"vllm {VLLM_VERSION}",
        "file": s["file"],
        "wheel_mib": round(wheel_mb, 1),
        "reps": reps,
        "ranges_kb": round(summary([float(b) for b in sent])["median"] / 1e3, 1),
        "rows": {
            name: {
                "wall_s": round(summary([t.wall for t in ts])["median"], 3),
                "cpu_s": round(summary([t.cpu for t in ts])["median"], 3),
                "samples_wall_s": [round(t.wall, 3) for t in ts],
            }
            for name, ts in rows.items()
        },
    }


def measure_index(work: Path, reps: int) -> dict[str, Any]:
    """capture cold then warm against pip's configured index (module docstring)."""
    env = envs.clone(VLLM_VERSION, work / "index-env")
    _edit(envs.site_packages(env) / VLLM_FILE)
    python = str(env / "bin" / "python")
    argv = _vpatch(
        "capture", "vllm", VLLM_FILE, "--id", "bench-index", "--python", python, cache=work
    )
    nothing = {"VPATCH_WHEELHOUSE": "", "VPATCH_MATRIX_WHEELS": ""}
    rows: dict[str, list[dict[str, float]]] = {"capture-index-cold": [], "capture-index-warm": []}
    for rep in range(reps):
        cache = work / f"index-cache-{rep}"  # cold: nothing kept yet
        for name in ("capture-index-cold", "capture-index-warm", "capture-index-warm"):
            load = os.getloadavg()[0]
            t = _run(argv, cache, name, nothing)
            if "VPATCH_BENCH_HAND_EDIT" not in t.out:
                raise WheelsError(f"{name}: the spec does not carry the hand edit:\n{t.out}")
            rows[name].append({"wall_s": t.wall, "cpu_s": t.cpu, "load": load})
    return {
        name: {
            "wall_s": round(summary([r["wall_s"] for r in rs])["median"], 3),
            "cpu_s": round(summary([r["cpu_s"] for r in rs])["median"], 3),
            "samples": [{k: round(v, 3) for k, v in r.items()} for r in rs],
        }
        for name, rs in rows.items()
    }


def run(use_standin: bool = False, reps: int = REPS, index: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="vpatch-bench-wheels-"))
    try:
        doc = measure(work, use_standin, reps)
        if index:
            doc["rows"].update(measure_index(work, reps))
        return doc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def text(doc: dict[str, Any]) -> str:
    lines = [
        f"authoring on {doc['env']} ({doc['file']}; wheel {doc['wheel_mib']} MiB, from a "
        f"wheelhouse), median of {doc['reps']}:"
    ]
    for name, r in doc["rows"].items():
        load = [x["load"] for x in r.get("samples", [])]
        under = f"   load {min(load):.1f}-{max(load):.1f}" if load else ""
        lines.append(f"  {name:<19} wall {r['wall_s']:7.3f} s   CPU {r['cpu_s']:7.3f} s{under}")
    if "ranges_kb" in doc:
        lines.append(f"  capture-cold-ranges moved {doc['ranges_kb']:.0f} KB from the index")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wheels", description=__doc__.split("\n")[0])
    p.add_argument("--standin", action="store_true", help="the stand-in package, not vLLM")
    p.add_argument("--reps", type=int, default=REPS)
    p.add_argument("--json", action="store_true", help="print the JSON document")
    p.add_argument(
        "--configured-index",
        action="store_true",
        help="also capture (with its matrix) against the index pip's configuration names",
    )
    args = p.parse_args(argv)
    if args.configured_index and args.standin:
        p.error("--configured-index measures vLLM, not the stand-in")
    try:
        doc = run(args.standin, args.reps, args.configured_index)
    except WheelsError as exc:
        print(f"bench.wheels: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else text(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
