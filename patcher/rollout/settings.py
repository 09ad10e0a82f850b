"""`vpatch rollout`'s options: the one place they are parsed and checked. The CLI
(patcher/commands/rollout.py) and the Ansible module hand over the strings they were given;
`make_settings` turns them into `Settings` before any host is contacted (a bad value is a
UsageError: exit 2, nothing asked of any host). Everything here is pure: the step machine
(patcher/rollout/decide.py), the executor (walk.py), the canary's scrapes (canary.py) and
the lease (lease.py) read a `Settings` and never an option string.

Per-host values from the inventory (`restart`, `health`, `metrics`) win over the flags; their
URLs are checked here too (`check_targets`), with the flags'.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from patcher.errors import UsageError
from patcher.serving.gates import FIXED, RULES, SEQUENTIAL, Gates
from patcher.serving.metrics import check_url, parse_rate
from patcher.serving.model import PROFILES

if TYPE_CHECKING:
    from patcher.inventory.targets import Target

DEFAULT_WINDOW = 120.0  # --window's default, seconds
MOST_SECONDS = 86400.0  # the longest --window, --max-window and timeout a rollout takes


@dataclass(frozen=True)
class Settings:
    """A rollout's options, checked. Canary analysis (docs/rollout.md, "Control hosts and
    confidence"): None/0 = off."""

    restart: str | None
    restart_timeout: float
    health: str | None
    health_timeout: float
    metrics: str | None  # the endpoints, whitespace-separated (`urls`)
    window: float
    min_drafts: int
    min_acceptance: float | None
    min_ratio: float | None
    allow_no_traffic: bool
    confidence: float | None = None  # --confidence: gates decide on evidence at this level
    max_window: float | None = None  # --max-window: how long a window may extend for it
    scrape_every: float | None = None  # --scrape-every: the window's series of scrapes
    control: int = 0  # --control K: the last K targets are scraped, never written
    profile: str = "vllm"  # --metrics-profile: whose counter names (serving.model.PROFILES)
    rule: str = FIXED  # --rule: how a gate with a confidence decides at each look (gates.RULES)
    window_given: bool = True  # --window given: by the sequential rule, the least after-window

    @property
    def least_after(self) -> float:
        """The after-window's least length before a look may end it: --window, except by the
        sequential rule (valid at every look) without a --window given: none."""
        if self.rule == SEQUENTIAL and self.confidence is not None and not self.window_given:
            return 0.0
        return self.window


def make_settings(
    *,
    restart: str | None,
    restart_timeout: str,
    health: str | None,
    health_timeout: str,
    metrics: str | None,
    window: str | None,
    min_drafts: str,
    min_acceptance: str | None,
    min_throughput_ratio: str | None,
    allow_no_traffic: bool,
    **canary: str | float | None,
) -> Settings:
    """The rollout options as given (the CLI's strings, or the Ansible module's), checked
    before any host is contacted (UsageError: exit 2). Keyword-only: several are `str | None`,
    and a swap would still type-check. `window`: None when not given (DEFAULT_WINDOW; by the
    sequential rule no least after-window). `canary`: canary_options' keywords."""
    rate = parse_rate(min_acceptance) if min_acceptance is not None else None
    ratio = parse_ratio(min_throughput_ratio) if min_throughput_ratio is not None else None
    return Settings(
        restart=restart if restart else None,
        restart_timeout=parse_seconds("--restart-timeout", restart_timeout),
        health=health_url("--health", health) if health else None,
        health_timeout=parse_seconds("--health-timeout", health_timeout),
        metrics=" ".join(check_url(u) for u in urls(metrics)) or None,
        window=parse_seconds("--window", window) if window is not None else DEFAULT_WINDOW,
        min_drafts=parse_drafts(min_drafts),
        min_acceptance=rate,
        min_ratio=ratio,
        allow_no_traffic=allow_no_traffic,
        **canary_options(window=window, **canary),
    )


# canary_options' keywords: the CLI's flags of the canary analysis (None: not given).
CANARY = ("control", "confidence", "max_window", "scrape_every", "metrics_profile", "rule")


def canary_options(*, window: str | float | None, **given: str | float | None) -> dict[str, Any]:
    """The canary analysis' options (Settings' last fields) from CANARY's keywords, with
    their defaults: `--control K` alone judges at confidence 0.95; with a confidence, a
    window extends up to 3x its length, is scraped 20 times a window, and is judged by the
    sequential rule; that rule's least after-window is --window where it was given, else
    none (the first look after one interval)."""
    unknown = set(given) - set(CANARY)
    if unknown:
        raise TypeError(f"no such canary option: {sorted(unknown)}")
    count = parse_control(given.get("control"))
    level = _within("--confidence", given.get("confidence"), 0.5, 0.9999, "0.95", percent=True)
    if level is None and count:
        level = 0.95
    length = float(window or DEFAULT_WINDOW)
    longest = _within("--max-window", given.get("max_window"), 0, MOST_SECONDS, "600")
    if longest is None and level is not None:
        longest = 3 * length
    if longest is not None and longest < length:
        raise UsageError(
            f"--max-window {longest:g} is shorter than --window {length:g}"
            + ("" if window is not None else " (its default: the baseline's length)"),
            "the window extends up to --max-window: give one at least as long",
        )
    every = _within("--scrape-every", given.get("scrape_every"), 0, 3600, "5")
    if every is None and level is not None:
        every = max(0.5, length / 20)  # 20 intervals a window: enough for a rank test
    profile = str(given.get("metrics_profile") or "vllm")
    if profile not in PROFILES:
        raise UsageError(
            f"--metrics-profile {profile!r} is not one of {', '.join(sorted(PROFILES))}",
            f"e.g. --metrics-profile {sorted(PROFILES)[0]}",
        )
    rule = str(given.get("rule") or SEQUENTIAL)
    if rule not in RULES:
        raise UsageError(f"--rule {rule!r} is not one of {', '.join(RULES)}", "e.g. --rule fixed")
    return {
        "confidence": level,
        "max_window": longest,
        "scrape_every": every,
        "control": count,
        "profile": profile,
        "rule": rule,
        "window_given": window is not None,
    }


def urls(metrics: str | None) -> list[str]:
    """A host's metrics endpoints: one URL, or several separated by whitespace (the TOML
    inventory's `metrics = [URL, ...]` is kept so; `--metrics 'URL URL'`)."""
    return metrics.split() if metrics else []


def looks(
    window: float, max_window: float | None, every: float | None, confidence: float | None
) -> int:
    """How many times a window may be judged: at its length, then at each scrape until
    --max-window (serving.gates.Gates.looks: each look tests at its share of the error)."""
    if confidence is None:
        return 1
    if not max_window or not every or max_window <= window:
        return 1
    return 1 + math.ceil((max_window - window) / every)


def gates_of(tables: Sequence[Any], cfg: Settings) -> Gates:
    """The specs' `[metrics]` tables and the flags' overrides (looks: Bonferroni)."""
    over = {"min_acceptance_rate": cfg.min_acceptance, "min_tokens_per_s_ratio": cfg.min_ratio}
    n = looks(cfg.window, cfg.max_window, cfg.scrape_every, cfg.confidence)
    return replace(Gates.of(tables, over, cfg.allow_no_traffic, cfg.confidence, n), rule=cfg.rule)


def check_targets(targets: Sequence[Target], restart: str | None = None) -> None:
    """Per-host URLs from the inventory are checked like the flags, before any host is asked;
    and each container's restart (the host's own, else `restart`, the flag's): one that
    re-creates the container would throw the patch away (rollout/persist.py)."""
    from patcher.rollout import persist

    persist.check_restarts(targets, restart)
    for t in targets:
        if t.health:
            health_url("--health (inventory `health`)", t.health)
        for url in urls(t.metrics):
            check_url(url)


def report_options(target: Target, cfg: Settings, gates: Gates) -> dict[str, Any]:
    """A host's rollout as the options made it (its report's keys): its restart, URLs,
    window, canary analysis and thresholds."""
    return {
        "restart": target.restart or cfg.restart,
        "health": target.health or cfg.health,
        "metrics": target.metrics or cfg.metrics,
        "window": cfg.window,
        "min_drafts": cfg.min_drafts,
        "confidence": cfg.confidence,
        "rule": cfg.rule,
        "max_window": cfg.max_window,
        "scrape_every": cfg.scrape_every,
        "control_hosts": cfg.control,
        "metrics_profile": cfg.profile,
        "thresholds": gates.to_json(),
    }


# ---------------------------------------------------------------------------------------------
# One option each


def _number(text: str | float, percent: bool = False) -> float:
    """A float (nan when it is none); with `percent`, `95%` is 0.95."""
    raw = str(text).strip()
    try:
        if percent and raw.endswith("%"):
            return float(raw[:-1]) / 100
        return float(raw)
    except ValueError:
        return math.nan


def _within(
    flag: str,
    text: str | float | None,
    low: float,
    high: float,
    example: str,
    percent: bool = False,
) -> float | None:
    """An optional number in (low, high]; None when not given."""
    if text is None:
        return None
    value = _number(text, percent)
    if not low < value <= high:
        raise UsageError(
            f"{flag} {text!r} is out of range ({low:g} < value <= {high:g})",
            f"e.g. {flag} {example}",
        )
    return value


def parse_ratio(text: str) -> float:
    """`--min-throughput-ratio R`: after/before tokens/s, a positive number (0.95, or 95%)."""
    value = _number(text, percent=True)
    if not 0 < value <= 100:
        raise UsageError(
            f"--min-throughput-ratio {text!r} is not a positive ratio",
            "e.g. --min-throughput-ratio 0.95 (after the patch, at least 95 % of the tokens/s)",
        )
    return value


def parse_seconds(flag: str, text: str, most: float = MOST_SECONDS) -> float:
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


def parse_control(text: str | float | None) -> int:
    """`--control K` (or the inventory's `[defaults] control`): a count of hosts, 0 if none."""
    if text is None:
        return 0
    try:
        value = int(str(text))
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"--control {text!r} is not a count of hosts", "e.g. --control 1")
    return value


def health_url(flag: str, url: str) -> str:
    """A health URL must be http(s) with a host: the agent GETs it on the target."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{flag} {url!r} is not an http:// or https:// URL",
            f"e.g. {flag} http://localhost:8000/health (fetched on each target host)",
        )
    return url
