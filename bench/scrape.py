"""What reading one large metrics scrape costs the controller: parse + join + a window's
reduction of a 100,000-series scrape (a row of `make bench`).

    python -m bench.scrape                  # 100,000 series, 3 repetitions
    python -m bench.scrape --reps 1 --json  # the row as JSON (bench/run.py reads it)

The scrape is tests/support/hostilescrape.py's `series_100k`: 20,000 engines' generation-token
counters and TTFT histograms (3 buckets and a count each), 100,000 sample lines, 6.4 MB,
under every bound of patcher.serving.model. Per repetition, CPU seconds (time.process_time:
this process only) of

- parse    model.parse of the text (prometheus_client's parser and the series it yields)
- join     two endpoints' scrapes of it joined as a host's (Counters.tagged, plus: 80,000
           series, histograms merged by histogram.merge)
- window   measures.measure_series over three scrapes of that host: every series reduced
           by the increase rule, then summed

and the process's peak RSS once all ran. Medians; the goal is a scrape the bounds admit read
in seconds and well under the memory the hostile-scrape tests allow (512 MiB).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from patcher.serving import measures, model
from tests.support import hostilescrape

REPS = 3


def _cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def run(reps: int = REPS) -> dict[str, Any]:
    text = hostilescrape.series_100k()
    parse_s, join_s, window_s = [], [], []
    series = 0
    for _ in range(reps):
        t, c = _cpu(lambda: model.parse(text))
        parse_s.append(t)
        t, host = _cpu(lambda c=c: c.tagged("#0").plus(c.tagged("#1")))
        join_s.append(t)
        series = len(host.series) + len(host.hists)
        window = [(0.0, host), (1.0, host), (2.0, host)]
        t, _m = _cpu(lambda window=window: measures.measure_series(window))
        window_s.append(t)
    peak = _vm_hwm_mib()
    return {
        "lines": text.count("\n"),
        "chars": len(text),
        "series_joined": series,
        "reps": reps,
        "parse_cpu_s": round(statistics.median(parse_s), 3),
        "join_cpu_s": round(statistics.median(join_s), 3),
        "window_cpu_s": round(statistics.median(window_s), 3),
        "peak_rss_mib": round(peak, 1),
    }


def text(row: dict[str, Any]) -> str:
    return (
        f"scrape: {row['lines']:,} series ({row['chars'] / 1e6:.1f} MB), median of "
        f"{row['reps']}: parse {row['parse_cpu_s']:.2f} s CPU, join of two endpoints "
        f"({row['series_joined']:,} series) {row['join_cpu_s']:.2f} s, a 3-scrape window "
        f"{row['window_cpu_s']:.2f} s; peak RSS {row['peak_rss_mib']:.0f} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.scrape", description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    row = run(args.reps)
    print(json.dumps(row) if args.json else text(row))


if __name__ == "__main__":
    main()


def _vm_hwm_mib() -> float:
    """This process image's peak resident memory (VmHWM, started anew by exec; getrusage's
    ru_maxrss carries the forking parent's across it)."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kib / 1024
