"""A stand-in vLLM endpoint for rollout tests that need no vLLM: `/health` answers 200 and
`/metrics` serves vLLM's counter names, growing with wall time at a fixed draft acceptance rate.

It listens on 127.0.0.1 only (the sshd lab hosts share the test's network namespace, so a
target's agent reaches it as the serving host's own endpoint). Counters only grow unless the
test restarts the engine (`serve(restarts=...)`): a gate's "restarted since the window" check
sees a live server; `rate` is the acceptance every window
measures, so a test picks a gate that it fails or passes.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DRAFTS_PER_S = 200.0
TOKENS_PER_DRAFT = 3
GENERATION_PER_S = 400.0


def metrics_text(seconds: float, rate: float) -> str:
    drafts = DRAFTS_PER_S * seconds
    draft_tokens = drafts * TOKENS_PER_DRAFT
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts:.1f}',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {draft_tokens:.1f}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {draft_tokens * rate:.1f}',
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0"}} {GENERATION_PER_S * seconds:.1f}',
        "",
    ]
    return "\n".join(lines)


@contextmanager
def serve(
    rate: float,
    lived: float = 0.0,
    restarts: Callable[[], bool] | None = None,
    down: Callable[[], bool] | None = None,
    sick: Callable[[], bool] | None = None,
) -> Iterator[str]:
    """Serve until the block ends; yields the base URL (http://127.0.0.1:PORT). `lived`: the
    counters start as if the engine had served that many seconds already. `restarts`: asked
    at each /metrics request; True: the engine restarted right after the previous scrape
    (its counters start again from zero then, and this scrape shows only what it counted
    since), as a data-parallel engine that died and came back between two scrapes. `down`:
    asked at each /metrics request first; True: the engine is away (503, no counters), as
    one whose restart outlasts a scrape. `sick`: asked at each /health request; True: 503,
    as a server that is up but not ready."""
    state = {"started": time.monotonic() - lived, "last": time.monotonic()}
    lock = threading.Lock()

    def text() -> bytes:
        with lock:
            now = time.monotonic()
            if restarts is not None and restarts():
                state["started"] = state["last"]
            state["last"] = now
            return metrics_text(now - state["started"], rate).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health" and sick is not None and sick():
                body, status = b"not ready", 503
            elif self.path == "/health":
                body, status = b"ok", 200
            elif self.path == "/metrics" and down is not None and down():
                body, status = b"restarting", 503
            elif self.path == "/metrics":
                body, status = text(), 200
            else:
                body, status = b"not found", 404
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
