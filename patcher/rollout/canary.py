"""`vpatch rollout`'s canary analysis at the edge: the scrapes of a host's metrics endpoints
(several per host, summed like engines), the control hosts scraped in the same windows as
the canary. The options that turn it on are patcher/rollout/settings.py's; what the numbers
mean and how a gate decides is the serving room's (patcher/serving/); the step machine is
patcher/rollout/decide.py's.

A control host is only ever scraped: no apply, no restart, no lease, no journal entry; its
agent is asked `fetch` and nothing else (test: tests/unit/test_canary.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from patcher.errors import HostError, UsageError
from patcher.result import HostResult
from patcher.rollout.settings import Settings, urls
from patcher.serving import judging
from patcher.serving.gates import BASELINE, CONTROL, Gates
from patcher.serving.measures import Measures
from patcher.serving.model import PROFILES, Counters, ScrapeRefused, parse

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.run.exchange import RunContext
    from patcher.transports import Transport


class ScrapeFailed(HostError):
    """A scrape that gave no counters. Of a control host, it fails the canary's window step
    (the walk takes any HostError as the step's failure): without the control there is
    nothing to compare with, and no evidence never reads as good."""


# What to check when the agent refuses a scrape and its error kind names nothing (a bad URL).
METRICS_HINT = (
    "check --metrics or the inventory host's `metrics`: a URL the agent fetches on the host"
)


def scrape(
    transport: Transport,
    endpoints: Sequence[str],
    profile: str,
    ctx: RunContext | None = None,
    missed: list[str] | None = None,
) -> tuple[Counters, float]:
    """Every endpoint of one host, by its agent, joined (each endpoint's series named by its
    place and URL, so that one engine's restart resets its own series only) and summed:
    (counters, the controller's monotonic time after the last one). Each fetch is one
    exchange of the rollout's run `ctx` (patcher.run.exchange: counted, shown by -v; a
    refusal an AgentError).

    `missed`: a scrape inside a window, where an engine that does not answer (restarting on
    its own) is one whose series are absent from this scrape, not a failed window, as long as
    another endpoint of the host answered: its URL is added to `missed`. Its series count
    what they counted until it went and, when it is back lower, from zero (model.increases).
    A scrape that reached an endpoint and read something wrong (over the bounds, not
    Prometheus text) fails all the same."""
    from patcher.run import exchange
    from patcher.serving import metrics

    total = Counters()
    gone: list[str] = []
    for i, url in enumerate(endpoints):
        said = f"cannot scrape {url}: agent refused"
        got = metrics.scrape(exchange.Counted(transport, ctx, said, METRICS_HINT), url)
        if got.text is None:
            if missed is None:
                raise ScrapeFailed(f"cannot scrape {url}: {got.error}")
            gone.append(f"{url} ({got.error})")
            continue
        try:
            c = parse(got.text, PROFILES[profile])
        except ScrapeRefused as exc:
            raise ScrapeFailed(f"{url} sent a scrape over vpatch's bounds: {exc}") from None
        except ValueError:
            size = len(got.text.encode())
            raise ScrapeFailed(
                f"{url} did not serve Prometheus text ({size} bytes; body not shown)"
            ) from None
        total = total.plus(c.tagged(f"#{i} {url}"))
    if gone and len(gone) == len(endpoints):
        raise ScrapeFailed(f"cannot scrape {'; '.join(gone)}")
    if missed is not None:
        missed += gone
    return total, time.monotonic()


@dataclass
class Controls:
    """The control hosts of a rollout: scraped, joined (series named by host) and summed, in
    the canary's windows. Hosts in
    flight at once share them (a lock: one scrape of the controls at a time)."""

    targets: list[Target]
    open_transport: Callable[[Target], Transport]
    default_metrics: str | None
    ctx: RunContext | None = None  # the rollout's run: its scrapes are exchanges of it
    transports: dict[str, Transport] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    scrapes: int = 0

    def names(self) -> list[str]:
        return [t.name for t in self.targets]

    def scrape(self, cfg: Settings) -> tuple[Counters, float]:
        """Every control host once (under the lock: hosts in flight share the scrapes);
        their counters joined once the lock is let go."""
        parts = []
        with self.lock:
            for t in self.targets:
                try:
                    tr = self.transports.get(t.name)
                    if tr is None:
                        tr = self.transports[t.name] = self.open_transport(t)
                    found = urls(t.metrics or self.default_metrics)
                    c, _at = scrape(tr, found, cfg.profile, self.ctx)
                except HostError as exc:
                    raise ScrapeFailed(f"control host {t.name}: {exc.message}") from None
                parts.append(c.tagged(t.name))
            self.scrapes += 1
            at = time.monotonic()
        total = Counters()
        for c in parts:
            total = total.plus(c)
        return total, at

    def close(self) -> None:
        for tr in self.transports.values():
            tr.close()


def extend(gates: Gates, judged: Callable[[], Sequence[judging.Gate]]) -> bool:
    """Whether a window that reached its length goes on: only with --confidence, while a
    gate's evidence is short and none has failed on evidence already. `judged`: the gates as
    they stand on the window so far (SoFar.judged: asked only with --confidence)."""
    if gates.confidence is None:
        return False
    return judging.undecided(list(judged()))


class SoFar:
    """A window as its last scrape left it, measured (`measure`: its scrapes, (counters,
    time) in order, to measures) and judged as it stands (the window not over:
    judging.judge's `last=False`) at most once each, whoever asks first: the decision to
    extend the window (extend) and the live view's evidence (walk.Host.seen) read the same
    scrape. `cseries`: the control hosts' scrapes (None: no control)."""

    def __init__(
        self,
        before: Measures | None,
        gates: Gates,
        measure: Callable[[list[tuple[Counters, float]]], Measures],
        series: list[tuple[Counters, float]],
        cseries: list[tuple[Counters, float]] | None,
    ) -> None:
        self._before, self._gates, self._measure = before, gates, measure
        # copies: the window's lists grow at its next scrape, after which this one is old
        self._series = list(series)
        self._cseries = list(cseries) if cseries is not None else None

    @cached_property
    def after(self) -> Measures:
        return self._measure(self._series)

    @cached_property
    def control(self) -> Measures | None:
        return self._measure(self._cseries) if self._cseries is not None else None

    def judged(self) -> list[judging.Gate]:
        return self._judgement

    @cached_property
    def _judgement(self) -> list[judging.Gate]:
        return judging.judge(self._before, self.after, self._gates, self.control, last=False)


def describe_latency(m: Measures) -> list[str]:
    """'TTFT p50/p99 40.0/95.0 ms' parts for a phase's detail."""
    names = {"ttft": "TTFT", "tpot": "per output token", "itl": "ITL per step", "e2e": "e2e"}
    out = []
    for key, qs in m.latency.items():
        if "p50" in qs and "p99" in qs:
            out.append(
                f"{names.get(key, key)} p50/p99 {qs['p50'] * 1000:.1f}/{qs['p99'] * 1000:.1f} ms"
            )
    return out


def report_of(control: Measures | None, controls: Controls | None) -> dict[str, Any]:
    """A host's report keys of the comparison: which one the ratio gates used, and the
    control hosts' window beside the host's."""
    if controls is None:
        return {"compared_with": BASELINE, "control": None}
    return {
        "compared_with": CONTROL,
        "control": {"hosts": controls.names(), **(control.to_json() if control else {})},
    }


def split(targets: list[Target], k: int) -> tuple[list[Target], list[Target]]:
    """(the hosts this rollout patches, its K control hosts: the last K targets)."""
    if k <= 0:
        return targets, []
    if k >= len(targets):
        raise UsageError(
            f"--control {k} leaves no host to patch ({len(targets)} target(s))",
            "control hosts are the last K targets: give more hosts, or a smaller --control "
            "(or the inventory's [defaults] control)",
        )
    return targets[:-k], targets[-k:]


def control_result(name: str, ids: list[tuple[str, str]], scrapes: int) -> HostResult:
    """A control host in the rollout's result: ok, nothing written, its part said."""
    from patcher.run import fleet

    host = fleet.skipped(name, ids, "control host: scraped, never written")
    host.ok = True
    host.notes.append(
        f"control host: scraped {scrapes} time(s) in the canaries' windows; never written, "
        "restarted or leased"
    )
    host.rollout = {"verdict": "control", "control": True, "scrapes": scrapes}
    return host


def controls_of(
    targets: list[Target], cfg: Settings, open_transport: Callable[[Target], Transport]
) -> tuple[list[Target], Controls | None]:
    """(the hosts to patch, the control hosts) of a rollout, checked before any host is
    contacted: --control K (or [defaults] control) leaves a host to patch, and every control
    host has a metrics endpoint."""
    patched, control = split(targets, cfg.control)
    if not control:
        return patched, None
    if not all(t.metrics or cfg.metrics for t in control):
        raise UsageError(
            "a control host has no metrics endpoint",
            "give --metrics URL (or the control hosts' inventory `metrics`)",
        )
    return patched, Controls(control, open_transport, cfg.metrics)


def closed(
    controls: Controls | None, hosts: list[HostResult], ids: list[tuple[str, str]]
) -> list[HostResult]:
    """The rollout's hosts, then its control hosts' lines; their sessions closed."""
    if controls is None:
        return hosts
    controls.close()
    return hosts + [control_result(t.name, ids, controls.scrapes) for t in controls.targets]
