"""The rollout lab's load client: steady traffic to one lab server (tests/rollout_server.py).

Run on the host as `python3 tests/rollout_load.py PORT [STREAMS]` (stdlib only). Each stream
POSTs /v1/completions for 32 tokens, back to back; while the server restarts, a refused or
broken request is retried after 0.2 s, as a real client's retry would.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time


def stream(port: int) -> None:
    body = json.dumps({"max_tokens": 32})
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            ok = conn.getresponse().read() and True
            conn.close()
            if not ok:
                time.sleep(0.2)
        except (OSError, http.client.HTTPException):
            time.sleep(0.2)


def main() -> None:
    port = int(sys.argv[1])
    streams = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    for _ in range(streams):
        threading.Thread(target=stream, args=(port,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
