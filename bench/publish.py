"""bench/results.json as markdown: bench/results.md, and the copy docs/scale.md shows.

    python -m bench.publish                      # results.json -> results.md (again)
    python -m bench.publish --docs               # ... and the block in docs/scale.md

`python -m bench.run` calls it after every run; the docs block is only replaced by a run of the
default schedule (every host count, every row), so a quick or partial run never stands in for
the published figures. Everything here reads the JSON document only: the tables can be rebuilt
from a kept results.json without the lab.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
DOCS = HERE.parent / "docs" / "scale.md"
BEGIN = "<!-- bench:begin (written by python -m bench.run; edit bench/publish.py instead) -->"
END = "<!-- bench:end -->"

# Row names as the tables show them, in their order.
LABELS = {
    "floor": "floor: `ssh host sed -i` (xargs -P N)",
    "ansible": "ansible-core, `replace` backup=yes",
    "ansible-pipelining": "ansible-core, pipelining on",
    "pyinfra": "pyinfra, `files.replace` backup=True",
    "vpatch-apply": "**vpatch apply** --level static",
    "vpatch-apply-cold": "vpatch apply, no rewrite cache",
    "vpatch-rollback": "vpatch rollback",
    "floor-mux": "floor over shared connections (ControlPersist, warm)",
    "vpatch-apply-mux": "vpatch apply over shared connections (ControlPersist, warm)",
}
SINGLE = {
    "vpatch-startup": "`vpatch --version` (start-up)",
    "vpatch-check": "`vpatch check SPEC` (start-up + spec load)",
    "vpatch-verify-import": "`vpatch verify --level import`",
    "bare-import": "`ssh h python -I -c 'import MODULE'`",
}


def _rows(doc: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """The rows of the run's last RTT (a run of several RTTs has a table of its own for them,
    `rtt_table`; the last one holds the import rows)."""
    last = (doc.get("rtt_ms") or [0.0])[-1]
    return {(r["name"], int(r["hosts"])): r for r in doc["rows"] if r.get("rtt_ms", 0.0) == last}


RTT_ROWS = ["floor", "ansible-pipelining", "pyinfra", "vpatch-apply", "floor-mux"]
RTT_ROWS += ["vpatch-apply-mux"]


def rtt_table(doc: dict[str, Any]) -> list[str]:
    """Every RTT's wall, x floor, round trips and CPU: one line per (row, hosts, RTT)."""
    body = []
    rows = [r for r in doc["rows"] if r["name"] in RTT_ROWS]
    floors = {(int(r["hosts"]), r.get("rtt_ms", 0.0)): r for r in rows if r["name"] == "floor"}
    for r in sorted(
        rows, key=lambda r: (r.get("rtt_ms", 0.0), r["hosts"], RTT_ROWS.index(r["name"]))
    ):
        key = (int(r["hosts"]), r.get("rtt_ms", 0.0))
        floor = _median(floors.get(key))
        trips = r.get("round_trips", {}).get("median")
        body.append(
            [
                r["name"],
                str(r["hosts"]),
                f"{r.get('rtt_ms', 0.0):g}",
                f"{_median(r):.3f}",
                f"{_median(r) / floor:.2f}" if floor == floor and r["name"] != "floor" else "",
                "" if trips is None else f"{trips:g}",
                f"{_median(r, 'controller_cpu_s'):.3f}",
                f"{_median(r, 'hosts_cpu_s'):.3f}",
            ]
        )
    head = ["row", "hosts", "RTT ms", "wall s", "x floor", "round trips/host", "ctl CPU s"]
    return _table([*head, "hosts CPU s"], body)


def _median(row: dict[str, Any] | None, key: str = "wall_s") -> float:
    if row is None or key not in row:
        return math.nan
    return float(row[key]["median"])


def _cells(doc: dict[str, Any], cell: Callable[[str, int, dict[str, Any]], str]) -> list[list[str]]:
    rows = _rows(doc)
    sizes = sorted({n for name, n in rows if name in LABELS})
    out = []
    for name, label in LABELS.items():
        if not any((name, n) in rows for n in sizes):
            continue
        out.append(
            [label] + [cell(name, n, rows[(name, n)]) if (name, n) in rows else "" for n in sizes]
        )
    return out


def _table(head: list[str], body: list[list[str]], align: str = "r") -> list[str]:
    lines = ["| " + " | ".join(head) + " |"]
    lines.append("|---|" + "|".join(("---:" if align == "r" else "---") for _ in head[1:]) + "|")
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return lines


def _sizes(doc: dict[str, Any]) -> list[int]:
    return sorted({int(r["hosts"]) for r in doc["rows"] if r["name"] in LABELS})


def _hosts(n: int) -> str:
    return f"{n} host" if n == 1 else f"{n} hosts"


def machine_line(m: dict[str, Any]) -> str:
    ram = m.get("ram_gib")
    parts = [
        f"{m.get('cpu_model', '?')}, {m.get('cores', '?')} cores",
        f"{ram:.0f} GiB RAM" if isinstance(ram, (int, float)) else "RAM ?",
        str(m.get("os", m.get("platform", "?"))),
        f"kernel {m.get('kernel', '?')}",
    ]
    load = m.get("load_avg_1_5_15")
    if isinstance(load, dict):
        start, end = (", ".join(f"{x:.1f}" for x in load[k]) for k in ("start", "end"))
        parts.append(f"load average (1, 5, 15 min) {start} at the start, {end} at the end")
    return "; ".join(parts)


def markdown(doc: dict[str, Any], heading: str = "#") -> str:
    """The results as markdown; `heading` is the level of the title (sections one deeper)."""
    h2 = heading + "#"
    m = doc.get("machine", {})
    rows = _rows(doc)
    sizes = _sizes(doc)
    head = ["row"] + [_hosts(n) for n in sizes]
    reps = {
        n: max((int(r["runs"]) for (_, k), r in rows.items() if k == n), default=0) for n in sizes
    }
    out = [
        f"{heading} Bench results",
        "",
        f"`python -m bench.run` ({'quick' if doc.get('quick') else 'full'} run, "
        f"{doc.get('elapsed_s', '?')} s, {doc.get('finished', 'date not recorded')}). Every host "
        "is a real sshd on 127.0.0.1 (tests/sshd.py) sharing this machine's cores with the "
        "controller; every run is checked for the exact bytes on every host.",
        "",
        f"**Machine**: {machine_line(m)}. Controller Python {m.get('controller_python', '?')}; "
        f"hosts' Python {m.get('host_python', '?')}; {m.get('openssh', '?')}; "
        f"{m.get('vpatch', 'vpatch ?')}; ansible-core "
        f"{doc.get('settings', {}).get('ansible', {}).get('ansible-core', '?')}; pyinfra "
        f"{doc.get('settings', {}).get('pyinfra', {}).get('pyinfra', '?')}.",
        "",
        f"{h2} Wall time of the whole command, median seconds",
        "",
        "Repetitions per host count: "
        + ", ".join(f"{_hosts(n)}: {reps[n]}" for n in sizes)
        + ". An empty cell: not run at that size (above 32 hosts the schedule is shorter).",
        "",
    ]
    out += _table(head, _cells(doc, lambda name, n, r: f"{_median(r):.2f}"))
    out += [
        "",
        f"{h2} Ratios: wall / floor's wall, and wall / vpatch apply's wall",
        "",
    ]

    def ratio(name: str, n: int, r: dict[str, Any]) -> str:
        floor = _median(rows.get(("floor", n)))
        apply = _median(rows.get(("vpatch-apply", n)))
        w = _median(r)
        return f"{w / floor:.2f}x / {w / apply:.2f}x"

    out += _table(head, _cells(doc, ratio))
    out += [
        "",
        f"{h2} CPU, median seconds: controller + hosts",
        "",
        "Controller: user + system time of the command's whole process tree. Hosts: what every "
        "ssh session on the hosts used (sshd, shell, sed or python). Both share the same cores "
        "here, so (controller + hosts) / cores bounds the wall time from below.",
        "",
    ]

    def cpu(name: str, n: int, r: dict[str, Any]) -> str:
        return f"{_median(r, 'controller_cpu_s'):.2f} + {_median(r, 'hosts_cpu_s'):.2f}"

    out += _table(head, _cells(doc, cpu))
    sim = doc.get("controller_only")
    if sim:
        traced = sim.get("traced_peak_kib_per_target")
        out += [
            "",
            f"{h2} Controller only: {sim['targets']:,} simulated targets",
            "",
            "The real `vpatch apply --level static --parallel "
            f"{sim['parallel']} --json` path in one process (bench/simulate.py): inventory, "
            "scheduler, engine, planner, rewrite cache, JSON report; every agent call answered "
            "with the real agent's recorded answer to the same request. No SSH, no host.",
            "",
        ]
        out += _table(
            ["", "measured", "goal", "met"],
            [
                ["wall", f"{sim['wall_s']:.2f} s", "", ""],
                [
                    "controller CPU per target",
                    f"{sim['cpu_ms_per_target']:.3f} ms ({sim['controller_cpu_s']:.2f} s)",
                    f"<= {sim['goal']['cpu_ms_per_target']} ms",
                    "yes" if sim["met"]["cpu"] else "**no**",
                ],
                [
                    "peak RSS growth per target",
                    f"{sim['rss_kib_per_target']:.1f} KiB "
                    f"({sim['rss_peak_growth_kib'] / 1024:.1f} MiB)",
                    f"<= {sim['goal']['kib_per_target']:.0f} KiB",
                    "yes" if sim["met"]["memory"] else "**no**",
                ],
                [
                    "tracemalloc peak per target",
                    "not measured" if traced is None else f"{traced:.1f} KiB",
                    f"<= {sim['goal']['kib_per_target']:.0f} KiB",
                    ""
                    if traced is None
                    else ("yes" if traced <= sim["goal"]["kib_per_target"] else "**no**"),
                ],
                [
                    "agent calls",
                    ", ".join(f"{op} {k:,}" for op, k in sim["calls_by_op"].items()),
                    "",
                    "",
                ],
            ],
            align="l",
        )
    kept = doc.get("journal")
    if kept:
        out += [
            "",
            f"{h2} Journal: {kept['cycles']:,} reinstall + ensure cycles",
            "",
            f"One {kept['env']} env, {', '.join(kept['specs'])}; pip's bytes back before every "
            "`ensure --level static` (bench/journal.py). The start is the median of cycles "
            "2-11, the end of the last 10.",
            "",
        ]
        out += _table(
            ["", "measured", "goal", "met"],
            [
                [
                    "journal, largest",
                    f"{kept['journal_bytes_max']:,} bytes (uncompacted: "
                    f"~{kept['journal_bytes_uncompacted_estimate']:,})",
                    f"< {kept['goal']['journal_bytes_max']:,}",
                    "yes" if kept["met"]["journal"] else "**no**",
                ],
                [
                    "ensure CPU, end vs start",
                    f"{kept['ensure_cpu_s_end_median']:.3f} s vs "
                    f"{kept['ensure_cpu_s_start_median']:.3f} s "
                    f"({kept['ensure_end_vs_start']:.2f}x; wall "
                    f"{kept['ensure_wall_end_vs_start']:.2f}x)",
                    f"<= {kept['goal']['ensure_end_vs_start']}x",
                    "yes" if kept["met"]["ensure"] else "**no**",
                ],
            ],
            align="l",
        )
    authoring = doc.get("authoring")
    if authoring:
        out += [
            "",
            f"{h2} Authoring: capture and `vpatch wheel` on {authoring['env']}",
            "",
            f"`{authoring['file']}` with one hand edit; the {authoring['wheel_mib']} MiB wheel "
            "from a wheelhouse (no network); cold: an empty wheel store; warm: the store the "
            f"cold run left (bench/wheels.py, median of {authoring['reps']}).",
            "",
        ]
        out += _table(
            ["row", "wall s", "CPU s"],
            [
                [name, f"{r['wall_s']:.3f}", f"{r['cpu_s']:.3f}"]
                for name, r in authoring["rows"].items()
            ],
        )
    single = [
        [label, f"{_median(rows.get((name, 1))):.3f}", str(rows[(name, 1)]["runs"])]
        for name, label in SINGLE.items()
        if (name, 1) in rows
    ]
    if single:
        module = doc.get("import_module", "")
        out += [
            "",
            f"{h2} One host: start-up and the import check",
            "",
            f"The import rows use a {doc.get('import_env', '?')} env (`{module}`).",
            "",
        ]
        out += _table(["row", "median s", "runs"], single)
    if len(doc.get("rtt_ms") or [0.0]) > 1 or (doc.get("rtt_ms") or [0.0])[0] > 0:
        out += [
            "",
            f"{h2} Round-trip times (bench/delay.py in front of every host)",
            "",
            "Medians; round trips: the answers each host's client waited for, counted by the "
            "forwarder (none at RTT 0: no forwarder in the path).",
            "",
        ]
        out += rtt_table(doc)
    tgts = doc.get("targets", [])
    if tgts:
        out += ["", f"{h2} Targets", ""]
        for t in tgts:
            mark = {True: "met", False: "**missed**", None: "not measured"}[t["met"]]
            out.append(f"- {mark}: {t['what']}: {t['value']} (target {t['limit']})")
    return "\n".join(out) + "\n"


def update_docs(body: str, path: Path = DOCS) -> bool:
    """Replace the block between BEGIN and END in `path`; False when it has no such block."""
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        return False
    new = pattern.sub(lambda _: f"{BEGIN}\n\n{body}\n{END}", text, count=1)
    path.write_text(new)
    return True


def write(doc: dict[str, Any], md: Path, docs: bool) -> list[Path]:
    """results.md next to the JSON; the docs block too when `docs`. The paths written."""
    md.write_text(markdown(doc))
    written = [md]
    if docs and update_docs(markdown(doc, heading="###")):
        written.append(DOCS)
    return written


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.publish", description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="?", type=Path, default=RESULTS)
    p.add_argument("--docs", action="store_true", help="also the block in docs/scale.md")
    args = p.parse_args()
    doc = json.loads(args.results.read_text())
    for path in write(doc, args.results.with_suffix(".md"), args.docs):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
