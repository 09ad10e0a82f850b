"""`vpatch rollout`: the decisions, pure. Which step a host takes next, and whether the live
numbers after the restart are good enough to keep the patch.

A patch can load and still serve worse: the EAGLE-3 whitelist patch loaded, vLLM then accepted
~15 % of the drafts and served 0.66x the tokens/s. So a rollout does, per host,

    baseline (scrape, window, scrape) -> apply (+ verify) -> restart -> health
        -> window (scrape, wait, scrape) -> gates (still healthy, not restarted since) -> kept
    any failure after apply -> rollback -> restart -> health -> rolled_back

and judges the gates from counter DELTAS of two scrapes, never from one scrape's lifetime
totals: the server restarted, and what it did before the restart is the baseline, not the
patch. A measure that cannot be computed (no drafts, no baseline tokens) is a FAILED gate
with that reason unless `--allow-no-traffic`: "no evidence" must never read as "good".

Everything here is data in, data out (golden cases in tests/cases/rollout/; resuming from a
report and the hosts' journals: patcher/rollout/resume.py); the executor
(patcher/rollout/walk.py) scrapes, restarts and polls, and asks these functions what follows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from patcher.agent import protocol
from patcher.errors import UsageError

# Steps, in the order a host takes them; the last three only after a failure. The names are
# the journal's (protocol.ROLLOUT_STEPS): the agent checks a step entry by them.
STEPS = protocol.ROLLOUT_STEPS
(
    BASELINE,
    APPLY,
    RESTART,
    HEALTH,
    WINDOW,
    GATES,
    ROLLBACK,
    ROLLBACK_RESTART,
    ROLLBACK_HEALTH,
) = STEPS

# Verdicts: what a host ended as (protocol.ROLLOUT_VERDICTS, the same order).
VERDICTS = protocol.ROLLOUT_VERDICTS
(
    KEPT,  # patched, restarted, healthy, gates passed
    ROLLED_BACK,  # a step failed; the patch is out again, restarted and healthy
    NOT_APPLIED,  # apply failed (its transaction left the files as they were)
    UNTOUCHED,  # the baseline failed: nothing was written, nothing restarted
    ATTENTION,  # a step failed and so did the way back, or the records disagree: a person
    INTERRUPTED,  # stopped between two steps (Ctrl-C): `vpatch rollout --resume` continues
) = VERDICTS

# vLLM's counter names (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py).
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
GENERATION = "vllm:generation_tokens_total"
FINISHED = "vllm:request_success_total"  # labelled finished_reason: stop|length|abort|error
ERROR_REASONS = frozenset({"abort", "error"})
_COUNTED = (DRAFTS, DRAFT_TOKENS, ACCEPTED, GENERATION, FINISHED)


# ---------------------------------------------------------------------------------------------
# The step machine


@dataclass(frozen=True)
class Plan:
    """What this rollout does on a host: which optional steps exist."""

    metrics: bool
    restart: bool
    health: bool

    def forward(self) -> list[str]:
        steps = [BASELINE] if self.metrics else []
        steps.append(APPLY)
        steps += [RESTART] if self.restart else []
        steps += [HEALTH] if self.health else []
        steps += [WINDOW, GATES] if self.metrics else []
        return steps

    def back(self) -> list[str]:
        steps = [ROLLBACK]
        steps += [ROLLBACK_RESTART] if self.restart else []
        steps += [ROLLBACK_HEALTH] if self.health else []
        return steps


@dataclass
class Phase:
    """One step as it ran on one host: the JSON document carries every one, with its times."""

    step: str
    ok: bool
    detail: str = ""
    started: str = ""  # UTC, ISO 8601
    seconds: float = 0.0


def next_step(plan: Plan, done: Sequence[tuple[str, bool]]) -> str | None:
    """The step after `done` ((step, ok) in the order they ran); None: the host is finished.

    A failure before anything was written (baseline) or inside apply's own transaction (apply
    undoes its writes when its verify fails) ends the host there: there is nothing to roll
    back. A failure after the write starts the way back; a failure on the way back stops it
    (the host keeps whatever it has, and the verdict asks for a person)."""
    if not done:
        return plan.forward()[0]
    last, ok = done[-1]
    if last in plan.back():
        if not ok:
            return None
        back = plan.back()
        i = back.index(last) + 1
        return back[i] if i < len(back) else None
    if not ok:
        return None if last in (BASELINE, APPLY) else ROLLBACK
    forward = plan.forward()
    i = forward.index(last) + 1
    return forward[i] if i < len(forward) else None


def verdict(done: Sequence[tuple[str, bool]]) -> tuple[str, str]:
    """(the step the host reached, its verdict): the first failed step, else the last one."""
    failed = [step for step, ok in done if not ok]
    reached = failed[0] if failed else (done[-1][0] if done else BASELINE)
    if not failed:
        return reached, KEPT
    if any(step == ROLLBACK for step, _ in done) and failed[-1] not in (
        ROLLBACK,
        ROLLBACK_RESTART,
        ROLLBACK_HEALTH,
    ):
        return reached, ROLLED_BACK
    if failed[0] == BASELINE:
        return reached, UNTOUCHED
    if failed[0] == APPLY:
        return reached, NOT_APPLIED
    return reached, ATTENTION


NOTHING = "-"  # the step reached by a host that has not finished one


def outcome(plan: Plan, done: Sequence[tuple[str, bool]]) -> tuple[str, str]:
    """(step reached, verdict) of a host that may have stopped early: a walk the machine
    would still continue is INTERRUPTED at its last step (nothing is assumed of the next),
    and so is one stopped before its first step (NOTHING reached)."""
    if next_step(plan, done) is not None:
        return (done[-1][0] if done else NOTHING), INTERRUPTED
    return verdict(done)


def stopped(
    plan: Plan, done: Sequence[tuple[str, bool]], current: str | None, running: bool
) -> str | None:
    """What a report says of a host whose walk is not over (None: it is over): `current` the
    step it is in (None: between two). `running`: the report is written while the rollout
    runs, after every step (rolloutreport.LiveReport), so that a controller lost right then
    (killed, its machine gone) still leaves a report that says where each host is; else the
    rollout stopped on a Ctrl-C."""
    if next_step(plan, done) is None:
        return None
    reached = done[-1][0] if done else None
    where = (
        f"in the {current} step"
        if current
        else (f"after the {reached} step" if reached else "before its first step")
    )
    if running:
        return (
            f"running: {where} when this report was written (a controller lost then left "
            "it there: --resume continues from the host's journal)"
        )
    return f"interrupted (Ctrl-C) {where}"


def is_walk(plan: Plan, done: Sequence[tuple[str, bool]]) -> bool:
    """Whether `done` is a walk this plan's machine could have taken, step by step."""
    return all(next_step(plan, done[:i]) == step for i, (step, _ok) in enumerate(done))


# ---------------------------------------------------------------------------------------------
# Counters and windows


@dataclass(frozen=True)
class Counters:
    """The counters of one scrape, summed over engines and models. `spec_decode`: the server
    exposes spec-decode counters at all (a server without speculation has none)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    generation_tokens: float = 0.0
    finished: float = 0.0
    errors: float = 0.0
    spec_decode: bool = False

    def values(self) -> tuple[float, ...]:
        return (
            self.drafts,
            self.draft_tokens,
            self.accepted,
            self.generation_tokens,
            self.finished,
            self.errors,
        )

    def since(self, before: Counters) -> Counters:
        """The increase from an earlier scrape of the same endpoint. Any counter lower than
        before means the server restarted in between: all it counts now is new (Prometheus'
        `increase()` rule), so the later scrape is the increase."""
        if any(now < then for now, then in zip(self.values(), before.values(), strict=True)):
            return self
        d = [now - then for now, then in zip(self.values(), before.values(), strict=True)]
        return Counters(d[0], d[1], d[2], d[3], d[4], d[5], self.spec_decode)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Counters:
        return cls(**data)


def parse(text: str) -> Counters:
    """The counters in a Prometheus scrape (prometheus_client's parser, as `verify --metrics`
    uses). Raises ValueError when the text is not exposition format."""
    from patcher.serving import promtext

    sums = dict.fromkeys(_COUNTED, 0.0)
    errors = 0.0
    spec = False
    for family in promtext.families(text):
        for sample in family.samples:
            name = sample.name  # OpenMetrics exposition may escape ':' to '_'
            name = "vllm:" + name[5:] if name.startswith("vllm_") else name
            if name not in sums or not math.isfinite(sample.value):
                continue
            sums[name] += sample.value
            spec = spec or name in (DRAFTS, DRAFT_TOKENS, ACCEPTED)
            if name == FINISHED and sample.labels.get("finished_reason") in ERROR_REASONS:
                errors += sample.value
    return Counters(
        sums[DRAFTS],
        sums[DRAFT_TOKENS],
        sums[ACCEPTED],
        sums[GENERATION],
        sums[FINISHED],
        errors,
        spec,
    )


@dataclass(frozen=True)
class Measures:
    """What a window showed; None where it cannot be computed (said in `why`)."""

    seconds: float
    drafts: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    tokens_per_s: float | None
    error_rate: float | None
    why: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "drafts": self.drafts,
            "acceptance_rate": _round(self.acceptance_rate),
            "mean_acceptance_length": _round(self.mean_acceptance_length),
            "tokens_per_s": _round(self.tokens_per_s),
            "error_rate": _round(self.error_rate),
            "why": dict(self.why),
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def measure(start: Counters, end: Counters, seconds: float) -> Measures:
    """The measures of the window between two scrapes `seconds` apart."""
    d = end.since(start)
    why: dict[str, str] = {}
    rate = length = tps = err = None
    if not end.spec_decode:
        why["acceptance"] = "the endpoint serves no vllm:spec_decode_* counters"
    elif d.draft_tokens <= 0 or d.drafts <= 0:
        why["acceptance"] = f"no drafts in the {seconds:.1f} s window"
    else:
        rate = d.accepted / d.draft_tokens
        length = 1 + d.accepted / d.drafts
    if seconds <= 0:
        why["tokens_per_s"] = "an empty window"
    elif d.generation_tokens <= 0:
        why["tokens_per_s"] = f"no generation tokens in the {seconds:.1f} s window"
    else:
        tps = d.generation_tokens / seconds
    if d.finished <= 0:
        why["error_rate"] = f"no finished requests in the {seconds:.1f} s window"
    else:
        err = d.errors / d.finished
    return Measures(seconds, d.drafts, rate, length, tps, err, why)


def restarted_since(end: Counters, now: Counters) -> bool:
    """Whether a later scrape shows the server restarted after `end` (a counter went down):
    the process the window measured is gone (it crashed, or something restarted it)."""
    return any(n < e for n, e in zip(now.values(), end.values(), strict=True))


def window_done(start: Counters, now: Counters, elapsed: float, window: float, drafts: int) -> bool:
    """The window closes when it has lasted `window` seconds or `drafts` drafts were seen."""
    return elapsed >= window or now.since(start).drafts >= drafts > 0


# ---------------------------------------------------------------------------------------------
# Gates


@dataclass(frozen=True)
class Gates:
    """The thresholds a host's after-window must meet (None: not checked)."""

    min_acceptance_rate: float | None = None
    min_mean_acceptance_length: float | None = None
    min_tokens_per_s_ratio: float | None = None
    max_error_rate: float | None = None
    allow_no_traffic: bool = False

    @classmethod
    def of(
        cls,
        tables: Iterable[Any],
        min_acceptance: float | None = None,
        min_ratio: float | None = None,
        allow_no_traffic: bool = False,
    ) -> Gates:
        """The specs' `[metrics]` tables (each may be None), the strictest of each threshold
        (every spec of the rollout is on the same server), the command line's overrides."""
        rows = [t for t in tables if t is not None]

        def most(name: str, pick: Any) -> float | None:
            vals = [getattr(t, name, None) for t in rows]
            vals = [v for v in vals if v is not None]
            return pick(vals) if vals else None

        return cls(
            min_acceptance if min_acceptance is not None else most("min_acceptance_rate", max),
            most("min_mean_acceptance_length", max),
            min_ratio if min_ratio is not None else most("min_tokens_per_s_ratio", max),
            most("max_error_rate", min),
            allow_no_traffic,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "min_acceptance_rate": self.min_acceptance_rate,
            "min_mean_acceptance_length": self.min_mean_acceptance_length,
            "min_tokens_per_s_ratio": self.min_tokens_per_s_ratio,
            "max_error_rate": self.max_error_rate,
            "allow_no_traffic": self.allow_no_traffic,
        }


@dataclass(frozen=True)
class Gate:
    name: str
    ok: bool
    value: float | None
    threshold: float
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "value": _round(self.value),
            "threshold": self.threshold,
            "detail": self.detail,
        }


def pct(x: float) -> str:
    return f"{x * 100:.1f}".rstrip("0").rstrip(".") + " %"


def judge(before: Measures | None, after: Measures, gates: Gates) -> list[Gate]:
    """Every gate that is set, judged on the after-window (and the baseline for the ratio)."""
    out: list[Gate] = []

    def gate(name: str, value: float | None, limit: float, low: bool, show: Any, why: str) -> None:
        if value is None:
            ok = gates.allow_no_traffic
            text = f"cannot be computed: {why}" + ("; allowed (--allow-no-traffic)" if ok else "")
            out.append(Gate(name, ok, None, limit, text))
            return
        ok = value >= limit if low else value <= limit
        sign = (">=" if ok else "<") if low else ("<=" if ok else ">")
        out.append(Gate(name, ok, value, limit, f"{show(value)} {sign} {show(limit)}"))

    if gates.min_acceptance_rate is not None:
        gate(
            "acceptance",
            after.acceptance_rate,
            gates.min_acceptance_rate,
            True,
            pct,
            after.why.get("acceptance", ""),
        )
    if gates.min_mean_acceptance_length is not None:
        gate(
            "mean_acceptance_length",
            after.mean_acceptance_length,
            gates.min_mean_acceptance_length,
            True,
            lambda x: f"{x:.2f}",
            after.why.get("acceptance", ""),
        )
    if gates.min_tokens_per_s_ratio is not None:
        ratio, why = None, after.why.get("tokens_per_s", "")
        if before is None or before.tokens_per_s is None:
            why = "no baseline tokens/s" + (
                f" ({before.why.get('tokens_per_s', '')})" if before is not None else ""
            )
        elif after.tokens_per_s is not None:
            ratio = after.tokens_per_s / before.tokens_per_s
        gate(
            "tokens_per_s_ratio",
            ratio,
            gates.min_tokens_per_s_ratio,
            True,
            lambda x: f"{x:.2f}x",
            why,
        )
    if gates.max_error_rate is not None:
        gate(
            "error_rate",
            after.error_rate,
            gates.max_error_rate,
            False,
            pct,
            after.why.get("error_rate", ""),
        )
    return out


def gates_detail(results: Sequence[Gate]) -> tuple[bool, str]:
    """(all passed, one line): the failed gates first, they are what the operator reads."""
    if not results:
        return True, "no gate set (the spec's [metrics] table or --min-acceptance ...)"
    failed = [g for g in results if not g.ok]
    parts = [f"{g.name} {g.detail}" for g in failed + [g for g in results if g.ok]]
    return not failed, ("serves worse: " if failed else "") + "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# Command-line values


def _number(text: str, percent: bool = False) -> float:
    """A float (nan when it is none); with `percent`, `95%` is 0.95."""
    raw = text.strip()
    try:
        if percent and raw.endswith("%"):
            return float(raw[:-1]) / 100
        return float(raw)
    except ValueError:
        return math.nan


def parse_ratio(text: str) -> float:
    """`--min-throughput-ratio R`: after/before tokens/s, a positive number (0.95, or 95%)."""
    value = _number(text, percent=True)
    if not 0 < value <= 100:
        raise UsageError(
            f"--min-throughput-ratio {text!r} is not a positive ratio",
            "e.g. --min-throughput-ratio 0.95 (after the patch, at least 95 % of the tokens/s)",
        )
    return value


def parse_seconds(flag: str, text: str, most: float) -> float:
    value = _number(text)
    if not 0 < value <= most:
        raise UsageError(
            f"{flag} {text!r} is not a number of seconds between 0 and {most:g}",
            f"e.g. {flag} 120",
        )
    return value


def parse_drafts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"--min-drafts {text!r} is not a count", "e.g. --min-drafts 100")
    return value
