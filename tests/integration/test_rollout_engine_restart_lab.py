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

from tests import sshd as harness
from tests.conftest import vpatch
from tests.support import gateserver
from tests.support.standin_specs import SPEC_A

PY = "/root/ml-env/bin/python"
RESTART = "#!/bin/sh\necho restarted >> /root/restarts\n"
TRUE_RATE = 2 * gateserver.GENERATION_PER_S  # two engines' generation tokens/s


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
    [host] = lab.hosts
    script = host.home / "restart.sh"
    script.write_text(RESTART)
    script.chmod(0o755)
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    restarts = _Restarts(host.home / "restarts")
    # A has served ~28 h, B ~3 h: their lifetimes dwarf any window's tokens.
    with (
        gateserver.serve(rate=0.7, lived=100_000) as a,
        gateserver.serve(rate=0.7, lived=10_000, restarts=restarts) as b,
    ):
        inv = tmp_path / "hosts.toml"
        inv.write_text(
            f"[defaults]\npython = '{PY}'\n\n[[host]]\nname = '{host.name}'\n"
            f"address = '{host.name}'\nmetrics = ['{a}/metrics', '{b}/metrics']\n"
        )
        res = vpatch(
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
            "--window",
            "2",
            "--scrape-every",
            "0.4",
            "--min-drafts",
            "0",
            "--min-throughput-ratio",
            "0.8",
        )
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
        assert TRUE_RATE / 2 < tps < TRUE_RATE * 2, (window, tps)
        assert r[window]["acceptance_rate"] == 0.7, r[window]
