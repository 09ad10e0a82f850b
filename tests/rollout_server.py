"""A serving process that behaves as the vLLM files it loaded say (the rollout lab's server).

Run as `ENV/bin/python tests/rollout_server.py PORT` in a real vLLM 0.16.0 env. At start it does
what `vllm serve --speculative-config '{"method": "eagle3", ...}'` does first for a DeepSeek-V3
target, on the host's own files:

- `SpeculativeConfig._verify_args` (imported from the env) on the target's model type. Stock
  0.16.0 refuses EAGLE-3 there: the server logs vLLM's own error and serves WITHOUT speculation
  (an operator's fallback), so a stock fleet has a baseline to compare with.
- admitted (the whitelist spec, or the back-port), it reads the env's
  `vllm/model_executor/models/deepseek_v2.py` (next to the imported package, parsed with ast,
  never imported: importing it needs the GPU stack): when `DeepseekV2ForCausalLM` lists
  `SupportsEagle3` among its bases the drafter gets the target's aux hidden states and
  accepts 70 % of the drafted tokens; without it (whitelist only: the seed) 15 %.

A decode cost: when the env holds `vllm/_lab_decode_cost.py` (a lab spec adds it with
`add_file`: tests/cases/rollout/lab/), every decoding step takes its DECODE_COST times as long:
1.25 serves 0.8x the tokens/s at equal load (a patch that slows decoding), 1.0 is neutral.

Generation is simulated in wall time: plain decoding emits one token per STEP seconds; a
speculative step costs STEP * (1 + DRAFT_COST * K) and emits 1 + accepted tokens, so 15 %
acceptance serves ~0.66x the plain tokens/s and 70 % ~1.41x. Every number is published through
vLLM's own classes (`SpecDecodingProm`, `SpecDecodingStats`; FinishReason's labels) and
prometheus_client, as tests/vllm_metrics_server.py does, on 127.0.0.1:PORT:
    GET /health   200 once loaded; 503 while loading, and for good when EAGLE-3 is admitted
                  while the file LAB/hang-health exists (a drafter that never loads)
    GET /metrics  Prometheus text
    with EAGLE-3 admitted and LAB/crash-after-window holding N: once a /metrics answer showed
    >= N drafts more than this process's first one did (the scrape that closes a rollout's
    window at --min-drafts N), the next request of any kind finds the process gone (exit 1,
    before it answers): a crash after the window
    POST /v1/completions  {"max_tokens": n}: generates, answers {"tokens": n}; the
                  time to first token and each inter-token gap go to vLLM's histograms
"""

from __future__ import annotations

import ast
import functools
import http.server
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

K = 3  # num_speculative_tokens
STEP = 0.02  # seconds per plain decoding step
DRAFT_COST = 0.4  # a speculative step costs 1 + 0.4 * K plain steps
GOOD = [3] * 50 + [2] * 30 + [0] * 20  # 70 % of drafted tokens accepted
BAD = [1] * 35 + [2] * 5 + [0] * 60  # 15 %
FINISH_REASONS = ("stop", "length", "abort", "error")
HANG = Path(os.environ.get("LAB_DIR", "/root/lab")) / "hang-health"
CRASH = Path(os.environ.get("LAB_DIR", "/root/lab")) / "crash-after-window"


def eagle3_admitted() -> str | None:
    """None when vLLM's own config check admits EAGLE-3 for deepseek_v3; else its message."""
    from vllm.config.speculative import SpeculativeConfig

    cfg = NS(
        tensor_parallel_size=None,
        num_speculative_tokens=K,
        draft_model_config=None,
        disable_by_batch_size=None,
        method="eagle3",
        target_model_config=NS(hf_text_config=NS(model_type="deepseek_v3")),
        verify_equal_vocab_size_if_draft_model=lambda: None,
    )
    try:
        SpeculativeConfig._verify_args(cfg)  # type: ignore[arg-type]
    except ValueError as exc:
        return str(exc)
    return None


def target_supports_eagle3() -> bool:
    """Does the env's DeepseekV2ForCausalLM implement SupportsEagle3 (the back-port)?"""
    import vllm  # imported already (the config check): only the package's path is read

    source = Path(vllm.__file__).parent / "model_executor" / "models" / "deepseek_v2.py"
    tree = ast.parse(source.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "DeepseekV2ForCausalLM":
            names = {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            }
            return "SupportsEagle3" in names
    return False


def decode_cost() -> float:
    """DECODE_COST of the env's `vllm/_lab_decode_cost.py` (parsed, never imported); 1.0 without."""
    import vllm

    path = Path(vllm.__file__).parent / "_lab_decode_cost.py"
    if not path.exists():
        return 1.0
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DECODE_COST":
            return float(ast.literal_eval(node.value))
    return 1.0


class Engine:
    def __init__(self) -> None:
        import prometheus_client
        from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingStats

        self.registry = prometheus_client.CollectorRegistry()
        counter = functools.partial(prometheus_client.Counter, registry=self.registry)
        refused = eagle3_admitted()
        if refused is not None:
            print(f"EAGLE-3 refused, serving without speculation: {refused}", flush=True)
            self.pattern: list[int] | None = None
        else:
            self.pattern = GOOD if target_supports_eagle3() else BAD
        labels = ["model_name", "engine"]
        self.gen = counter(
            name="vllm:generation_tokens", documentation="Generation tokens.", labelnames=labels
        ).labels("lab-model", "0")
        success = counter(
            name="vllm:request_success",
            documentation="Finished requests.",
            labelnames=[*labels, "finished_reason"],
        )
        # vLLM's latency histograms (vllm/v1/metrics/loggers.py names; 0.12+ spelling), with
        # finer buckets than vLLM's around the lab's 20-25 ms steps.
        histogram = functools.partial(prometheus_client.Histogram, registry=self.registry)
        steps = [0.005, 0.01, 0.015, 0.02, 0.0225, 0.025, 0.0275, 0.03, 0.04, 0.05, 0.075, 0.1]
        self.ttft = histogram(
            name="vllm:time_to_first_token_seconds",
            documentation="Time to first token.",
            labelnames=labels,
            buckets=[*steps, 0.25, 0.5, 1.0],
        ).labels("lab-model", "0")
        self.itl = histogram(
            name="vllm:inter_token_latency_seconds",
            documentation="Inter-token latency.",
            labelnames=labels,
            buckets=[*steps, 0.25, 0.5, 1.0],
        ).labels("lab-model", "0")
        # per finished request: its decode time / its output tokens after the first, 0 for one
        # token (vllm/v1/metrics/stats.py's mean_time_per_output_token, 0.12 on)
        self.tpot = histogram(
            name="vllm:request_time_per_output_token_seconds",
            documentation="Time per output token, per request.",
            labelnames=labels,
            buckets=[*steps, 0.25, 0.5, 1.0],
        ).labels("lab-model", "0")
        # vllm.v1.engine.FinishReason's strings (that module needs msgspec, absent on CPU).
        self.finished = {r: success.labels("lab-model", "0", r) for r in FINISH_REASONS}
        self.new_stats = functools.partial(SpecDecodingStats.new, K)
        self.prom: Any = None
        if self.pattern is not None:

            class Prom(SpecDecodingProm):
                _counter_cls = counter

            self.prom = Prom(NS(num_speculative_tokens=K), labels, {0: ["lab-model", "0"]})
        self.cost = decode_cost()
        self.lock = threading.Lock()
        self.next = 0
        self.observed = 0
        mode = (
            "plain"
            if self.pattern is None
            else "eagle3 %s" % ("70" if self.pattern is GOOD else "15")
        )
        print(f"READY pid={os.getpid()} mode={mode} cost={self.cost:g}", flush=True)

    def drafts(self) -> int:
        """Drafts the counters show (observed), not the steps still in flight."""
        with self.lock:
            return self.observed

    def generate(self, n: int) -> int:
        done = 0
        started = last = first = time.monotonic()
        while done < n:
            if self.pattern is None:
                time.sleep(STEP * self.cost)
                last = self._latency(done, started, last)
                first = last if done == 0 else first
                done += 1
                self.gen.inc(1)
                continue
            with self.lock:
                accepted = self.pattern[self.next % len(self.pattern)]
                self.next += 1
            time.sleep(STEP * self.cost * (1 + DRAFT_COST * K))
            last = self._latency(done, started, last)
            first = last if done == 0 else first
            stats = self.new_stats()
            stats.observe_draft(num_draft_tokens=K, num_accepted_tokens=accepted)
            with self.lock:
                self.prom.observe(stats, engine_idx=0)
                self.observed += 1
            done += 1 + accepted
            self.gen.inc(1 + accepted)
        self._per_token(done, first, last)
        self.finished["length"].inc()
        return done

    def _per_token(self, done: int, first: float, last: float) -> None:
        """The finished request's time per output token, as vLLM observes it: from its first
        token to its last over the tokens after the first (0 when it had one)."""
        self.tpot.observe((last - first) / (done - 1) if done > 1 else 0.0)

    def _latency(self, done: int, started: float, last: float) -> float:
        """A step's tokens are out: the request's first one (TTFT), or the gap since the
        request's previous step (inter-token latency), as vLLM's histograms observe them."""
        now = time.monotonic()
        if done == 0:
            self.ttft.observe(now - started)
        else:
            self.itl.observe(now - last)
        return now


def main() -> None:
    port = int(sys.argv[1])
    engine: list[Engine] = []
    crash_at = int(CRASH.read_text()) if CRASH.exists() else None
    window_closed = threading.Event()
    first_scrape: list[int] = []  # drafts at this process's first /metrics (a window's start)

    def crash_now() -> None:
        if window_closed.is_set():
            print("crashed after the window", flush=True)
            os._exit(1)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            crash_now()
            if self.path == "/health":
                ready = bool(engine) and not (HANG.exists() and engine[0].pattern is not None)
                self._send(200 if ready else 503, b"ok\n" if ready else b"loading\n")
            elif self.path == "/metrics" and engine:
                import prometheus_client

                seen = engine[0].drafts()  # at most what the body below shows
                body = prometheus_client.generate_latest(engine[0].registry)
                if not first_scrape:
                    first_scrape.append(engine[0].drafts())  # at least what the body shows
                elif crash_at is not None and engine[0].prom is not None:
                    if seen - first_scrape[0] >= crash_at:  # this scrape closes the window
                        window_closed.set()
                self._send(200, body, prometheus_client.CONTENT_TYPE_LATEST)
            else:
                self._send(404 if engine else 503, b"")

        def do_POST(self) -> None:
            crash_now()
            size = int(self.headers.get("Content-Length", "0"))
            req = json.loads(self.rfile.read(size) or b"{}")
            if not engine or self.path != "/v1/completions":
                self._send(503, b"")
                return
            n = engine[0].generate(int(req.get("max_tokens", 32)))
            self._send(200, json.dumps({"tokens": n}).encode(), "application/json")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    engine.append(Engine())  # loading (vLLM's imports) while /health says 503
    threading.Event().wait()


if __name__ == "__main__":
    main()
