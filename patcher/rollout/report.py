"""`vpatch rollout`'s report: written as the rollout goes (LiveReport), so that a controller
lost at any moment still leaves one, and read back for `--resume` (load_report). The
decisions about what a report and a host's journal say are patcher/rollout/resume.py's."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from patcher.errors import UsageError
from patcher.output.lines import warning
from patcher.result import HostResult, RunResult
from patcher.rollout import decide, resume, settings, steer, steering, walk
from patcher.rollout.settings import Settings
from patcher.run import fleet
from patcher.serving.gates import Gates

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.specs.model import PatchSpec


def default_report(run: str) -> str:
    """Where a rollout's report goes without --report: `$XDG_STATE_HOME/vpatch/rollouts/
    RUN.json`, else `~/.local/state/vpatch/rollouts/RUN.json`. State, not cache (deleting it
    costs --resume its starting point); the XDG rule: a relative $XDG_STATE_HOME is ignored."""
    import os

    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "vpatch", "rollouts", f"{run}.json")


class LiveReport:
    """The rollout's report on disk from its start to its end, so that a controller lost at
    any moment (SIGKILL, its machine gone: no Ctrl-C handler runs) still leaves one for
    `--resume`: written before any host is contacted (every host, the run id, the options),
    as each host begins each step (the steps before it are then in its journal) and as each
    host ends; each time whole, atomically (patcher.output.report.write_report: a temp file, fsync,
    rename). What it says of a host is only ever behind its journal, never ahead (walk
    records a step before the host's state says it is done), which is what --resume accepts
    (rolloutresume.resume). A write costs one document of the fleet and an fsync; hosts that
    ask during one share the next."""

    def __init__(
        self,
        path: str,
        targets: Sequence[Target],
        specs: Sequence[PatchSpec],
        cfg: Settings,
        run: str,
    ) -> None:
        self.path = path
        self.targets = list(targets)
        self.ids = [(s.id, s.package) for s in specs]
        tables = [s.metrics for s in specs]
        self.gates = settings.gates_of(tables, cfg)
        self.cfg = cfg
        self.run = run
        self.live: dict[int, walk.Host] = {}  # hosts that started (by target index)
        self.finished: dict[int, HostResult] = {}
        self.held: dict[int, str] = {}  # hosts a pause holds before their start: why
        self._cond = threading.Condition()
        self._asked = 0  # writes asked for
        self._written = 0  # the newest ask a finished write covered
        self._writing = False
        self._closed = False
        self._warned = False

    def hosts(self, why: str, running: bool = False) -> list[HostResult]:
        """Every host as far as it got: ended, in flight, or not started (`why`)."""
        out = []
        for i, t in enumerate(self.targets):
            if i in self.finished:
                out.append(self.finished[i])
            elif i in self.live:
                h = self.live[i]
                with h.lock:
                    out.append(walk.finish(h, running=running))
            else:
                host = fleet.skipped(t.name, self.ids, self.held.get(i, why))
                if running:  # the run and the options, before the host starts
                    host.rollout = pending(t, self.cfg, self.gates, self.run)
                out.append(host)
        return out

    def write(self, start: bool = False) -> None:
        """The report as of now, on disk when this returns. Hosts that ask while a write is
        on its way wait for the next one, which covers them all (a group commit: 8 hosts
        beginning a step cost two writes, not eight). At the start a failure is bad input
        (exit 2, no host was contacted); later, one warning: the journals have every step."""
        import os

        from patcher.output.report import write_report

        with self._cond:
            self._asked += 1
            ask = self._asked
            while self._writing and self._written < ask:
                self._cond.wait()
            if self._written >= ask or self._closed:
                return
            self._writing = True
            covers = self._asked  # every ask so far: their hosts' state is in this snapshot
            hosts = self.hosts(f"not started yet (rollout {self.run} is running)", running=True)
        try:
            if start:
                os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
            write_report(RunResult("rollout", False, hosts), self.path)
        except UsageError as exc:  # something planted at the name (patcher.safewrite)
            if start:
                raise
            if not self._warned:
                self._warned = True
                warning(f"{exc.message}; the hosts' journals record every step")
        except OSError as exc:
            why = f"cannot write the rollout's report {self.path}: {exc.strerror or exc}"
            if start:
                hint = "give --report FILE in a directory you can write"
                raise UsageError(why, hint) from None
            if not self._warned:
                self._warned = True
                warning(f"{why}; the hosts' journals record every step")
        finally:
            with self._cond:
                self._writing = False
                self._written = covers
                self._cond.notify_all()

    def start(self, resume: bool) -> steering.Steering:
        """The run's steering channel made beside the report (steering.start), then the
        report's first write, both before any host is contacted: UsageError (exit 2) else.
        The report's name is checked first and the channel made before the report is
        written, so that a refusal of either leaves nothing behind but the directory."""
        import os

        from patcher import safewrite

        try:
            os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        except OSError:
            self.write(start=True)  # says why (exit 2)
        safewrite.check(self.path)  # a link or another's file at the name: refused now
        steer = steering.start(self.path, self.run, resume)
        try:
            self.write(start=True)
        except BaseException:
            steer.channel.close()
            raise
        return steer

    def step(self, h: walk.Host) -> None:
        self.write()

    def hold(self, i: int, pause: steer.Steer) -> None:
        """Host i waits for the run's pause to end (`vpatch rollout pause`): said at once."""
        self.held[i] = (
            f"held before its start: paused ({pause.by()} at {pause.at}); it starts once "
            "`vpatch rollout resume REPORT` is written"
        )
        self.write()

    def not_started(self, i: int, aborted: steer.Steer | None) -> HostResult:
        """Host i, never started: the run was aborted (its verdict says so, nothing was
        touched), or a Ctrl-C came while a pause held it."""
        t = self.targets[i]
        if aborted is None:
            return fleet.skipped(t.name, self.ids, "interrupted (Ctrl-C) while paused: not started")
        host = fleet.skipped(
            t.name, self.ids, f"aborted ({aborted.by()} at {aborted.at}): not started"
        )
        host.rollout = {
            **pending(t, self.cfg, self.gates, self.run),
            "verdict": decide.ABORTED,
            "steers": [steer.effect(aborted, decide.NOTHING, "not started; nothing touched")],
        }
        return host

    def ended(self, i: int, result: HostResult) -> HostResult:
        self.finished[i] = result
        self.write()
        return result

    def close(self, result: RunResult) -> None:
        """The final report; no live write lands after it (a host thread still in flight
        after a second Ctrl-C writes nothing more)."""
        from patcher.output.report import write_report

        with self._cond:
            while self._writing:
                self._cond.wait()
            self._closed = True
            try:
                write_report(result, self.path)
            except UsageError as exc:  # something planted at the name (patcher.safewrite)
                warning(exc.message)
            except OSError as exc:
                why = exc.strerror or str(exc)
                warning(f"cannot write the report {self.path}: {why}")


def pending(target: Target, cfg: Settings, gates: Gates, run: str) -> dict[str, Any]:
    """A live report's `rollout` of a host not started yet: its run and options, no step."""
    return {
        "run": run,
        "verdict": None,
        "reached": decide.NOTHING,
        "stopped_in": None,
        "patched": False,
        **settings.report_options(target, cfg, gates),
        "before": None,
        "after": None,
        "gates": [],
        "phases": [],
        "steers": [],
    }


@dataclass(frozen=True)
class Reported:
    """What a report says of a rollout: its run id and, per host, the steps it ran."""

    run: str | None
    steps: dict[str, list[tuple[str, bool]] | None]


def read_document(path: str, what: str, hint: str) -> dict[str, Any]:
    """A rollout's report (its JSON document, with a `hosts` list), or exit 2 saying why not
    (`what`: the option or command that named it, for the `error:` line; "": the path alone)."""
    import json

    said = f"{what} {path}" if what else path
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not JSON"
        raise UsageError(f"{said}: {why}", hint) from None
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("command") != "rollout" or not isinstance(hosts, list):
        raise UsageError(f"{said}: not the report of a `vpatch rollout`", hint)
    return doc


def load_report(path: str, names: Sequence[str]) -> Reported:
    """--resume REPORT: a rollout's report, of these very hosts, or exit 2 before any host is
    contacted. What it says of each host is only the controller's word: every host's journal
    is asked too (rolloutresume.resume)."""
    hint = "give the --report file of this rollout (else the one it named on stderr)"
    steps, runs = _read(path, "--resume", hint)
    if sorted(steps) != sorted(names):
        raise UsageError(
            f"--resume {path}: the report is of other hosts than the targets given",
            "give the same --inventory/--group/--host as the rollout that wrote it",
        )
    if len(runs) > 1:
        raise UsageError(f"--resume {path}: the report names more than one run", hint)
    return Reported(next(iter(runs), None), steps)


def run_of(path: str) -> str:
    """The run a rollout's report names (`vpatch rollout pause REPORT` ...), or exit 2."""
    hint = "give the report of a running rollout (its --report, or the file it named)"
    runs = _read(path, "", hint)[1]
    if len(runs) != 1:
        raise UsageError(f"{path}: the report names {len(runs)} runs, not one", hint)
    return runs.pop()


def _read(
    path: str, what: str, hint: str
) -> tuple[dict[str, list[tuple[str, bool]] | None], set[str]]:
    """A rollout's report read: per host the steps it says ran, and the run ids it names;
    UsageError (`what` as read_document's) when it is not one."""
    hosts = read_document(path, what, hint)["hosts"]
    try:
        return resume.reported_steps(hosts)
    except ValueError as exc:
        said = f"{what} {path}" if what else path
        raise UsageError(f"{said}: {exc}", hint) from None
