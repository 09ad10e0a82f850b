"""Hostile Prometheus scrapes, each read by the one counter model in a process of its own
that reports what it did and its peak memory (`peak_mib`): the bounds of
patcher.serving.model must refuse each before anything it sends sizes what is built.

Run as `python -m tests.support.hostilescrape KIND`: one JSON line,
{"refused": the ScrapeRefused message or null, "maxrss_mib": peak RSS, "series": n}."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from patcher.serving import model

HIST = "vllm:time_to_first_token_seconds"


def _counter(lines: list[str]) -> str:
    return "\n".join(["# TYPE vllm:generation_tokens counter", *lines, ""])


def huge_label() -> str:
    """One series whose label value is 10 MiB (a line longer than any a parser should read)."""
    return _counter([f'vllm:generation_tokens_total{{model_name="{"m" * (10 << 20)}"}} 1'])


def long_label() -> str:
    """A label value of 8 KiB: a line the parser may read, a value over the label bound."""
    return _counter([f'vllm:generation_tokens_total{{model_name="{"m" * 8192}"}} 1'])


def many_buckets() -> str:
    """One histogram series with 100,000 `le` bounds."""
    lines = [f"# TYPE {HIST} histogram"]
    lines += [f'{HIST}_bucket{{le="{i / 1000:.3f}"}} {i}' for i in range(1, 100_000)]
    lines += [f'{HIST}_bucket{{le="+Inf"}} 100000', f"{HIST}_count 100000", f"{HIST}_sum 1"]
    return "\n".join([*lines, ""])


def million_series() -> str:
    """1,000,000 series, one short line each: fewer characters than the bytes bound."""
    return "\n".join(f'g{{e="{i:x}"}} 1' for i in range(1_000_000)) + "\n"


def huge_position() -> str:
    """One per-position series at position 10**12 (it used to size a tuple of that many)."""
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    return f'# TYPE {name} counter\n{name}_total{{position="1000000000000"}} 1\n'


def series_100k() -> str:
    """100,000 series a scrape may hold: 25,000 engines' counters and TTFT histograms."""
    lines = ["# TYPE vllm:generation_tokens counter"]
    lines += [f'vllm:generation_tokens_total{{engine="{i}"}} {i}' for i in range(20_000)]
    lines.append(f"# TYPE {HIST} histogram")
    for i in range(20_000):
        lines += [f'{HIST}_bucket{{engine="{i}",le="{b}"}} {i}' for b in ("0.1", "1.0", "+Inf")]
        lines.append(f'{HIST}_count{{engine="{i}"}} {i}')
    return "\n".join([*lines, ""])


KINDS: dict[str, Callable[[], str]] = {
    "huge_label": huge_label,
    "long_label": long_label,
    "many_buckets": many_buckets,
    "million_series": million_series,
    "huge_position": huge_position,
    "series_100k": series_100k,
}


def main(kind: str) -> dict[str, object]:
    text = KINDS[kind]()
    refused = None
    series = 0
    try:
        c = model.parse(text)
        series = len(c.series) + len(c.hists)
    except model.ScrapeRefused as exc:
        refused = str(exc)
    return {"refused": refused, "maxrss_mib": peak_mib(), "series": series}


def peak_mib() -> float:
    """This process image's peak resident memory: the kernel's VmHWM, which an exec starts
    anew. Not getrusage's ru_maxrss, which Linux carries across exec from the process that
    forked this one (a test runner's worker grown to 1.2 GB read as this parser's peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(sys.argv[1])) + "\n")
