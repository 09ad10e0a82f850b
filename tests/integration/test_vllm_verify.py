"""`vpatch verify --metrics` against counters produced by vLLM's own exporter, on real vLLM 0.16.

One module-wide set-up (vLLM imports cost ~8 s each): a private clone of the vLLM 0.16.0 env,
a "server" process in it that imports vLLM and serves vLLM's `SpecDecodingProm` counters fed
with known acceptance counts (tests/vllm_metrics_server.py), THEN the EAGLE-3 patch applied
while that server runs. So the same set-up also proves restart-required on a real vLLM process:
it imported `vllm.config.speculative` before the write.

Verify runs at --level static here: the catalog probe is proven both ways in
test_vllm_local.py; these tests are about the live numbers, and each import would cost ~8 s.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import envs
from tests.conftest import REPO, SPEC, Env, Run, vpatch
from tests.support.rolloutlab import prometheus_client_dir

pytestmark = pytest.mark.vllm
SERVER = REPO / "tests" / "vllm_metrics_server.py"


@dataclass
class Served:
    env: Env
    base: str  # http://127.0.0.1:PORT
    server: subprocess.Popen[str]
    applied: Run

    def verify(self, path: str, *args: str) -> Run:
        return vpatch(
            "verify",
            SPEC,
            "--python",
            self.env.python,
            "--level",
            "static",
            "--metrics",
            self.base + path,
            *args,
        )


def _wait_port(proc: subprocess.Popen[str], log: Path, timeout: float = 180) -> int:
    """The server's `PORT n` line (vLLM's logger also writes to stdout before it)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        line = proc.stdout.readline() if ready else ""
        if line.startswith("PORT "):
            return int(line.split()[1])
        if not line:
            break
        seen.append(line)
    proc.kill()
    raise AssertionError(f"metrics server did not start: {seen[-20:]} {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("vllm-metrics")
    root = envs.clone("0.16.0", work / "vllm-0.16.0")
    env = Env(root, root / "bin" / "python")
    (env.site / "_vpatch_test_prometheus.pth").write_text(f"{prometheus_client_dir()}\n")
    log = work / "server.log"
    with open(log, "w") as err:
        server = subprocess.Popen(
            [str(env.python), str(SERVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
        )
    try:
        port = _wait_port(server, log)
        applied = vpatch("apply", SPEC, "--python", env.python, "--level", "static", "--json")
        yield Served(env, f"http://127.0.0.1:{port}", server, applied)
    finally:
        assert server.stdin is not None
        server.stdin.close()  # the server stops when its stdin closes
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def metrics_probe(run: Run) -> dict[str, Any]:
    [probe] = [p for p in run.patch()["probes"] if p["name"] == "metrics"]
    return probe


def test_good_acceptance_passes_and_the_old_server_is_restart_required(served: Served) -> None:
    assert served.applied.code == 0, served.applied.out + served.applied.err
    assert served.applied.patch()["outcome"] == "applied"
    listed = {p["pid"]: p for p in served.applied.doc["hosts"][0]["restart_required"]}
    assert listed[served.server.pid]["cmdline"] == f"{served.env.python} {SERVER}"

    res = served.verify("/good", "--json")
    assert res.code == 0, res.out + res.err
    assert res.patch()["outcome"] == "applied"
    # verify says it too: the server still runs the module it imported before the write.
    assert served.server.pid in [p["pid"] for p in res.doc["hosts"][0]["restart_required"]]
    probe = metrics_probe(res)
    assert probe["ok"]
    assert probe["detail"].startswith(
        "acceptance 70 % >= 40 %, mean acceptance length 3.10, per position 0.80/0.80/0.50 "
        "(100 drafts, 300 draft tokens, 210 accepted)"
    )
    assert "started before the patch was written" in probe["detail"]


def test_bad_acceptance_fails_and_says_what_it_means(served: Served) -> None:
    res = served.verify("/bad", "--json")
    assert res.code == 1
    p = res.patch()
    assert p["outcome"] == "failed"
    expected = (
        "patch is loaded but speculative decoding is not paying: acceptance 15 % < 40 %; "
        "mean acceptance length 1.45, per position 0.40/0.05/0.00 "
        "(100 drafts, 300 draft tokens, 45 accepted)"
    )
    assert not metrics_probe(res)["ok"] and metrics_probe(res)["detail"].startswith(expected)
    assert p["message"].startswith(f"metrics: {expected}")


def test_no_drafts_yet_is_inconclusive(served: Served) -> None:
    res = served.verify("/zero", "--json")
    assert res.code == 1
    probe = metrics_probe(res)
    assert not probe["ok"] and probe["detail"].startswith("inconclusive: no drafts counted yet")


def test_min_acceptance_overrides_the_spec(served: Served) -> None:
    lenient = served.verify("/bad", "--min-acceptance", "0.1", "--json")
    assert lenient.code == 0 and "acceptance 15 % >= 10 %" in metrics_probe(lenient)["detail"]
    strict = served.verify("/good", "--min-acceptance", "80%", "--json")
    assert strict.code == 1 and "acceptance 70 % < 80 %" in metrics_probe(strict)["detail"]
