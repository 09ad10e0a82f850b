"""The golden cases of tests/cases/serving/, run through patcher.serving's pure functions."""

from __future__ import annotations

import dataclasses
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

from patcher.serving import gates, histogram, judging, measures, model
from patcher.serving.model import Counters

CASES = Path(__file__).resolve().parent.parent / "cases" / "serving"


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def gate_cases() -> list[Path]:
    return sorted((CASES / "gates").glob("*.json"))


def window(scrapes: list[list[Any]] | None) -> measures.Measures | None:
    """A recorded series of scrapes, [seconds, counters] each, as a window's measures."""
    if scrapes is None:
        return None
    return measures.measure_series([(float(t), Counters.of(c)) for t, c in scrapes])


def run_gates(case: dict[str, Any]) -> dict[str, Any]:
    g = dict(case["gates"])
    confidence = g.pop("confidence", None)
    rule = g.pop("rule", gates.FIXED)  # a case of the sequential rule says so
    judged = judging.judge(
        window(case["baseline"]),
        window(case["after"]),
        dataclasses.replace(gates.Gates.make(confidence=confidence, **g), rule=rule),
        window(case["control"]),
        last=case["last"],
    )
    ok, detail = judging.gates_detail(judged)
    return {
        "ok": ok,
        "extend": judging.undecided(judged),
        "detail": detail,
        "compared_with": sorted({j.compared_with for j in judged if j.compared_with}),
    }


# tests/cases/serving/series/: a window of scrapes of one host, written as what each
# endpoint's engines count ({endpoint: {engine: {quantity: value, "ttft": bucket counts}}}),
# rendered as vLLM's exposition text and read as the rollout reads a host.
TTFT_BOUNDS = ("0.05", "0.1", "0.5", "+Inf")


def series_cases() -> list[Path]:
    return sorted((CASES / "series").glob("*.json"))


def render(engines: dict[str, dict[str, Any]]) -> str:
    """One endpoint's engines as vLLM's text (the `engine` label tells them apart)."""
    names = {
        "generation": "vllm:generation_tokens",
        "drafts": "vllm:spec_decode_num_drafts",
        "accepted": "vllm:spec_decode_num_accepted_tokens",
        "finished": "vllm:request_success",
    }
    lines = []
    for key, name in names.items():
        lines.append(f"# TYPE {name} counter")
        lines += [f'{name}_total{{engine="{e}"}} {v[key]}' for e, v in engines.items()]
    ttft = "vllm:time_to_first_token_seconds"
    lines.append(f"# TYPE {ttft} histogram")
    for e, v in engines.items():
        lines += [
            f'{ttft}_bucket{{engine="{e}",le="{b}"}} {c}'
            for b, c in zip(TTFT_BOUNDS, v["ttft"], strict=True)
        ]
        lines += [f'{ttft}_count{{engine="{e}"}} {v["ttft"][-1]}', f'{ttft}_sum{{engine="{e}"}} 1']
    return "\n".join([*lines, ""])


def host_scrape(endpoints: dict[str, dict[str, dict[str, Any]]]) -> Counters:
    """A host's endpoints joined as the rollout joins them (each endpoint's series its own)."""
    total = Counters()
    for name, engines in sorted(endpoints.items()):
        total = total.plus(model.parse(render(engines)).tagged(name))
    return total


def run_series(scrapes: list[list[Any]]) -> dict[str, Any]:
    """What a window of those scrapes measures, and which intervals saw a restart."""
    got = [(float(t), host_scrape(eps)) for t, eps in scrapes]
    m = measures.measure_series(got)
    return {
        "generation_tokens": m.tokens_per_s * m.seconds if m.tokens_per_s else 0.0,
        "drafts": m.drafts,
        "mean_acceptance_length": m.mean_acceptance_length,
        "finished": m.finished,
        "ttft_count": histogram.count(m.buckets["ttft"]) if "ttft" in m.buckets else 0.0,
        "samples": list(m.samples),
        "restarted": [c1.reset_since(c0) for (_, c0), (_, c1) in pairwise(got)],
    }
