"""`vpatch rollout` on a host with two metrics endpoints (data-parallel engines, the
inventory's `metrics = [A, B]`), one of which restarts in the middle of each window: real
sshd host with the stand-in package, real agent fetches, stand-in engines
(tests/support/gateserver.py) whose counters grow with wall time, B's from zero again after
each restart (as a new process's).

The counters are reduced per series before they are summed (patcher.serving.model), so the
restarted engine counts from zero and the other keeps its increase: the windows measure the
two engines' true rate and the patch is kept, as if B had not restarted. Summed first, B's
drop read as a restart of the whole host, and the baseline counted A's whole lifetime: a
baseline millions of tokens/s "fast", and a harmless patch rolled back as serving worse.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests import sshd as harness
from tests.conftest import Run, vpatch
from tests.support import gateserver
from tests.support.standin_specs import SPEC_A

PY = "/root/ml-env/bin/python"
RESTART = "#!/bin/sh\necho restarted >> /root/restarts\n"
TRUE_RATE = 2 * gateserver.GENERATION_PER_S  # two engines' generation tokens/s
# The stand-ins count with wall time, the controller times its scrapes: on a loaded machine a
# scrape's answer and its timestamp drift apart by up to a scrape interval, so a window's rate
# is checked within 4x of the truth. The sum's reset this guards against is off by 10^4 and more.
SLACK = 4


class _Restarts:
    """Engine B restarts at its 3rd scrape (in the baseline window), and again at its 3rd
    scrape after the host's restart command ran (in the window after the patch)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.scrapes = self.after = 0
        self.done: list[str] = []
        self.lock = threading.Lock()

    def __call__(self) -> bool:
        with self.lock:
            self.scrapes += 1
            if self.marker.exists():
                self.after += 1
                if self.after == 3:
                    self.done.append("window")
                    return True
            elif self.scrapes == 3:
                self.done.append("baseline")
                return True
            return False


def test_one_engine_restarting_mid_window_reads_as_if_it_had_not(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    restarts = _Restarts(lab.hosts[0].home / "restarts")
    # A has served ~28 h, B ~3 h: their lifetimes dwarf any window's tokens.
    with (
        gateserver.serve(rate=0.7, lived=100_000) as a,
        gateserver.serve(rate=0.7, lived=10_000, restarts=restarts) as b,
    ):
        res = _rollout(tmp_path, lab, a, b, "--window", "2", "--min-throughput-ratio", "0.5")
    assert restarts.done == ["baseline", "window"], restarts.done
    assert res.code == 0, res.out + res.err
    [h] = res.doc["hosts"]
    r = h["rollout"]
    assert r["verdict"] == "kept", r["phases"]
    [gate] = [g for g in r["gates"] if g["name"] == "tokens_per_s_ratio"]
    assert gate["ok"], gate
    # Both windows measure the two engines' rate (800 tokens/s), not A's lifetime.
    for window in ("before", "after"):
        tps = r[window]["tokens_per_s"]
        assert TRUE_RATE / SLACK < tps < TRUE_RATE * SLACK, (window, tps)
        assert r[window]["acceptance_rate"] == pytest.approx(0.7, abs=1e-3), r[window]


class _Away:
    """Engine B does not answer the 3rd and 4th scrapes after the host's restart command ran
    (inside the window after the patch), then comes back restarted (counters from zero)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.after = 0
        self.away: list[int] = []
        self.lock = threading.Lock()

    def down(self) -> bool:
        with self.lock:
            if not self.marker.exists():
                return False
            self.after += 1
            if self.after in (3, 4):
                self.away.append(self.after)
                return True
            return False

    def restarted(self) -> bool:
        with self.lock:
            return self.after == 5


def test_an_engine_away_for_scrapes_mid_window_is_a_restart_not_a_failed_window(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """A real engine's restart outlasts a scrape (vLLM's takes tens of seconds): the scrapes
    it misses inside a window have its series absent, and it comes back from zero. The
    window is measured as the two engines' rate and says which engine was away; the gates'
    own scrape after the window still needs every engine."""
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    away = _Away(lab.hosts[0].home / "restarts")
    with (
        gateserver.serve(rate=0.7, lived=100_000) as a,
        gateserver.serve(rate=0.7, lived=10_000, restarts=away.restarted, down=away.down) as b,
    ):
        res = _rollout(tmp_path, lab, a, b, "--window", "3", "--min-throughput-ratio", "0.5")
    assert away.away == [3, 4], away.away
    assert res.code == 0, res.out + res.err
    [h] = res.doc["hosts"]
    r = h["rollout"]
    assert r["verdict"] == "kept", r["phases"]
    [window] = [p for p in r["phases"] if p["step"] == "window"]
    assert "did not answer some scrapes" in window["detail"], window
    assert f"{b}/metrics" in window["detail"] and "in 2 of" in window["detail"], window
    tps = r["after"]["tokens_per_s"]
    assert TRUE_RATE / SLACK < tps < TRUE_RATE * SLACK, tps  # not A's lifetime
    assert r["after"]["acceptance_rate"] == pytest.approx(0.7, abs=1e-3), r["after"]


def _rollout(tmp_path: Path, lab: harness.SshLab, a: str, b: str, *flags: str) -> Run:
    """The stand-in spec rolled out on the lab's one host, whose two engines are `a` and `b`
    (the inventory's `metrics = [A, B]`), its restart a script that leaves a mark, its health
    A's, scraped every 0.4 s; `flags`: the window and the gate."""
    [host] = lab.hosts
    script = host.home / "restart.sh"
    script.write_text(RESTART)
    script.chmod(0o755)
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    inv = tmp_path / "hosts.toml"
    inv.write_text(
        f"[defaults]\npython = '{PY}'\n\n[[host]]\nname = '{host.name}'\n"
        f"address = '{host.name}'\nmetrics = ['{a}/metrics', '{b}/metrics']\n"
    )
    return vpatch(
        "rollout",
        str(spec),
        "--inventory",
        str(inv),
        "--ssh-config",
        str(lab.ssh_config),
        "--level",
        "static",
        "--json",
        "--restart",
        "/root/restart.sh",
        "--health",
        f"{a}/health",
        "--scrape-every",
        "0.4",
        "--min-drafts",
        "0",
        *flags,
    )
