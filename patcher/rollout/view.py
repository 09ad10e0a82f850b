"""`vpatch rollout`'s human output: one line per finished batch on stderr, the final table
(host, step reached, acceptance and tokens/s before -> after, verdict) and the `error:` /
`hint:` lines. Every string from a host goes through patcher.output.inert.clean."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from patcher.output.lines import put
from patcher.output.progress import HostsProgress
from patcher.result import HostResult, RunResult
from patcher.rollout import decide
from patcher.run import fleet
from patcher.serving.gates import pct
from patcher.serving.judging import Gate

if TYPE_CHECKING:
    from patcher.rollout.settings import Settings

# What a host that did not keep the patch is told to do, by its verdict (hint_of).
HINTS = {
    decide.INTERRUPTED: "`vpatch rollout` with the same arguments and --resume REPORT "
    "continues from the step the host's journal records",
    decide.ROLLED_BACK: "the patch does not serve well here: see the gates and phases",
    decide.NOT_APPLIED: "apply failed and changed nothing: see the apply phase",
    decide.UNTOUCHED: "nothing was changed: see the baseline phase (what apply would refuse, "
    "or the metrics endpoint: --metrics)",
    decide.ATTENTION: "the way back failed, or the report and the host disagree: check the "
    "host (`vpatch status`, the service)",
    decide.CHANGED_SINCE: "someone changed the host during the rollout (a rollback, an apply, "
    "an upgrade, a server restart): vpatch judged nothing and touched nothing; check it "
    "(`vpatch status`), then run a new rollout",
    decide.ABORTED: "the run's owner aborted it (`vpatch rollout abort`): its hosts in flight "
    "went back, none started after; its `steers` in the report say who and when",
}


def hint_of(verdict: str, judged: Sequence[Gate], cfg: Settings) -> str:
    """The hint of a host that did not keep the patch. Not enough evidence is not "serves
    worse": it says what the gates had and how to give the next window more (longer, or
    more samples in the same time)."""
    if verdict != decide.NOT_ENOUGH_EVIDENCE:
        return HINTS.get(verdict, "")
    longest = max(cfg.window, cfg.max_window or 0.0)
    every = f"{cfg.scrape_every:g} s" if cfg.scrape_every else "the default"
    short = decide.shortfall(judged)
    return (
        f"the window ended before the evidence decided ({short or 'see the gates'}): the "
        "host was rolled back, not proven good; give the next window more time "
        f"(--max-window, {longest:g} s now) or more samples (--scrape-every, {every} now)"
    )


class BatchLines(HostsProgress):
    """One line on stderr per finished batch (the canary counts as one)."""

    def __init__(self, targets: Sequence[str], policy: fleet.Policy, out: TextIO) -> None:
        self.out = out
        self.phase_of: dict[str, int] = {}
        self.names: list[list[str]] = []
        order = list(targets)
        groups = [order[: policy.canary]] if policy.canary else []
        rest = order[policy.canary :]
        size = policy.batch or max(1, len(rest))
        groups += [rest[i : i + size] for i in range(0, len(rest), size)]
        for i, names in enumerate(groups):
            self.names.append(names)
            for n in names:
                self.phase_of[n] = i
        self.canary = bool(policy.canary)
        self.done: dict[int, list[HostResult]] = {}

    def advance(self, result: HostResult) -> None:
        i = self.phase_of.get(result.target)
        if i is None:
            return
        got = self.done.setdefault(i, [])
        got.append(result)
        if len(got) < len(self.names[i]):
            return
        label = "canary" if self.canary and i == 0 else f"batch {i + (0 if self.canary else 1)}"
        counts: dict[str, int] = {}
        for r in got:
            v = (r.rollout or {}).get("verdict", "failed")
            counts[v] = counts.get(v, 0) + 1
        tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        bad = [f"{r.target}: {r.error}" for r in got if not r.ok]
        line = f"rollout {label} ({len(got)} host(s)): {tally}"
        put(line + "".join(f"\n  {b}" for b in bad), self.out, flush=True)


def _pair(before: Any, after: Any, show: Callable[[float], str]) -> str:
    b = show(before) if before is not None else "-"
    a = show(after) if after is not None else "-"
    return f"{b} -> {a}"


def table_rows(result: RunResult) -> list[tuple[str, str, str, str, str]]:
    """host, step reached, acceptance before -> after, tokens/s before -> after, verdict."""
    rows = []
    for h in result.hosts:
        r = h.rollout
        if r is None:  # never started (the policy stopped first), or could not connect
            skipped = any(p.outcome == "skipped" for p in h.patches) or "skipped" in (h.error or "")
            rows.append((h.target, "-", "-", "-", "skipped" if skipped else "failed"))
            continue
        if r.get("control") is True:  # a control host: scraped, never written
            rows.append((h.target, "-", "-", "-", "control"))
            continue
        before, after = r["before"] or {}, r["after"] or {}
        if r.get("compared_with") == "control":  # tokens/s: the control's, then the host's
            before = {**before, "tokens_per_s": (r.get("control") or {}).get("tokens_per_s")}
        rows.append(
            (
                h.target,
                r["reached"],
                _pair(before.get("acceptance_rate"), after.get("acceptance_rate"), pct),
                _pair(before.get("tokens_per_s"), after.get("tokens_per_s"), lambda x: f"{x:.1f}"),
                r["verdict"],
            )
        )
    return rows


def render_table(result: RunResult, out: TextIO) -> None:
    head = ("host", "step reached", "acceptance", "tokens/s", "verdict")
    rows = [head, *table_rows(result)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        line = "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
        put(line.rstrip(), out)
    controls = [h.target for h in result.hosts if h.rollout and h.rollout.get("control") is True]
    hosts = [h for h in result.hosts if h.target not in controls]
    kept = [h.target for h in hosts if h.rollout and h.rollout["verdict"] in decide.PATCHED]
    started = [h for h in hosts if h.rollout is not None and h.rollout["reached"] != decide.NOTHING]
    moved = [h.target for h in started if (h.rollout or {}).get("verdict") == decide.CHANGED_SINCE]
    if any(h.rollout and h.rollout.get("compared_with") for h in hosts):
        put(
            "ratio gates compared with: "
            + (
                f"the control host(s) {', '.join(controls)} in the same windows "
                "(tokens/s: control -> host)"
                if controls
                else "each host's own baseline (tokens/s: before -> after)"
            ),
            out,
        )
    if result.ok:
        put(f"rollout: ok ({len(kept)} host(s) patched, restarted and checked)", out)
    else:
        put(
            f"rollout: not ok: {len(kept)} of {len(hosts)} host(s) patched"
            + (f" and staying patched ({', '.join(kept)})" if kept else "")
            + f"; {len(hosts) - len(started)} not started"
            + (
                f"; changed since its last step, nothing judged: {', '.join(moved)}"
                if moved
                else ""
            ),
            out,
        )


def render_problems(result: RunResult, err: TextIO) -> None:
    """`error:` per host that did not keep the patch, then the first one's `hint:`."""
    found: list[tuple[str, str]] = []
    for h in result.hosts:
        if h.ok:
            continue
        if h.error:
            found.append((f"{h.target}: {h.error}", h.hint or "run `vpatch status` on it"))
        elif h.patches:
            p = h.patches[0]
            found.append(
                (
                    f"{h.target}: {p.outcome}: {p.message}",
                    "an earlier host failed and the fleet policy stopped; fix it, run again",
                )
            )
    for msg, _hint in found:
        put(f"error: {msg.splitlines()[0]}", err)
    if found:
        put(f"hint: {found[0][1]}", err)


def stopped_note(run: str, report: str, result: RunResult) -> str:
    """What a rollout a Ctrl-C stopped says last: how to go on while a host is left mid-way
    (stopped between two steps, or never started), and that nothing is left when every host
    had already reached its verdict (a Ctrl-C in the last step)."""
    left = [
        h for h in result.hosts if (h.rollout or {}).get("verdict") in (None, decide.INTERRUPTED)
    ]
    if left:
        return (
            f"note: rollout {run} stopped by Ctrl-C; report: {report}; the same command with "
            f"--resume {report} continues it"
        )
    return (
        f"note: rollout {run} stopped by Ctrl-C after every host's last step: nothing is left "
        f"to resume; report: {report}"
    )
