"""A Prometheus endpoint whose spec-decode counters come from vLLM's OWN code (run in a vLLM env).

Run as `ENV/bin/python tests/vllm_metrics_server.py`. It imports the real
`vllm.v1.spec_decode.metrics` from the installed wheel, feeds vLLM's `SpecDecodingStats` through
vLLM's `SpecDecodingProm.observe` with known per-draft acceptance counts, and serves
`prometheus_client.generate_latest()` over http.server on 127.0.0.1 (an ephemeral port, printed
as a `PORT n` line on stdout once ready). No metric text is written by hand: if vLLM renames a
counter or changes its labels, the vpatch tests see exactly what a real server would expose.

Paths (one registry each, through `_counter_cls`, the extension point vLLM itself uses for Ray):
    /good   100 drafts of 3 tokens: 50 accept 3, 30 accept 2, 20 accept 0 -> 70 %, length 3.10
    /bad    100 drafts of 3 tokens: 35 accept 1, 5 accept 2, 60 accept 0  -> 15 %, length 1.45
    /zero   speculative decoding configured, no draft yet
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
from types import SimpleNamespace

import prometheus_client
from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingStats

K = 3  # num_speculative_tokens
GOOD = [3] * 50 + [2] * 30 + [0] * 20
BAD = [1] * 35 + [2] * 5 + [0] * 60


def prom(registry: prometheus_client.CollectorRegistry, engines: int) -> SpecDecodingProm:
    class Prom(SpecDecodingProm):
        _counter_cls = functools.partial(prometheus_client.Counter, registry=registry)

    # SpecDecodingProm reads only `num_speculative_tokens` from the SpeculativeConfig.
    config = SimpleNamespace(num_speculative_tokens=K)
    labels = {i: ["eagle3-test-model", str(i)] for i in range(engines)}
    return Prom(config, ["model_name", "engine"], labels)


def stats(accepted: list[int]) -> SpecDecodingStats:
    s = SpecDecodingStats.new(K)
    for n in accepted:
        s.observe_draft(num_draft_tokens=K, num_accepted_tokens=n)
    return s


def registries() -> dict[str, prometheus_client.CollectorRegistry]:
    out = {}
    for path, engines, feeds in (
        ("/good", 1, [GOOD]),
        ("/bad", 1, [BAD]),
        ("/zero", 1, []),
    ):
        reg = prometheus_client.CollectorRegistry()
        p = prom(reg, engines)
        for engine, accepted in enumerate(feeds):
            p.observe(stats(accepted), engine_idx=engine)
        out[path] = reg
    return out


def main() -> None:
    regs = registries()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reg = regs.get(self.path)
            if reg is None:
                self.send_error(404)
                return
            body = prometheus_client.generate_latest(reg)
            self.send_response(200)
            self.send_header("Content-Type", prometheus_client.CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("PORT", server.server_address[1], flush=True)
    # Stop when the test closes our stdin (or dies): never outlive the suite.
    threading.Thread(target=lambda: (sys.stdin.read(), server.shutdown()), daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
