"""The rollout lab's load client: steady traffic to one lab server (tests/rollout_server.py).

Run on the host as `python3 tests/rollout_load.py PORT [STREAMS]` (stdlib only). Each stream
POSTs /v1/completions for 32 tokens, back to back; while the server restarts, a refused or
broken request is retried after 0.2 s, as a real client's retry would.

Traffic that changes: while LAB_DIR/streams holds a number, that many streams run (read every
0.2 s; a stream above it stops after its current request), so a test doubles or halves the
load of every host at the moment it chooses (a rollout's restart), as a fleet's load moves.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import threading
import time
from pathlib import Path

STREAMS_FILE = Path(os.environ.get("LAB_DIR", "/root/lab")) / "streams"


def wanted(default: int) -> int:
    try:
        return max(0, int(STREAMS_FILE.read_text().strip()))
    except (OSError, ValueError):
        return default


def stream(port: int, index: int, target: list[int]) -> None:
    body = json.dumps({"max_tokens": 32})
    while index < target[0]:
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
    default = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    target = [wanted(default)]
    running: dict[int, threading.Thread] = {}
    while True:
        target[0] = wanted(default)
        for i in range(target[0]):
            if i not in running or not running[i].is_alive():
                running[i] = threading.Thread(target=stream, args=(port, i, target), daemon=True)
                running[i].start()
        time.sleep(0.2)


if __name__ == "__main__":
    main()
