"""Host CPU of `vpatch diff`'s scan of a large installed package, against hashing the same
files in one plain Python process.

    python -m bench.scancpu --python ENV/bin/python --package torch --reps 5
    python -m bench.scancpu ... --agent-from /tmp/old-checkout   # another tree's agent

Each rep runs, interleaved: `python -I -c pass` (start-up), one agent session exactly as the
transports start it (`python -I -c BOOT`, bundle line, one `scan` request for every file,
EOF), and the floor: one `python -I` that reads the package's RECORD and hashes every listed
file under the scan's size bound with hashlib, one `open().read()` each. CPU is user + sys
of the child from wait4's rusage (threads included); medians. The wall time is printed too,
but on a shared machine it is the load's more than the code's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from patcher.transports.bundle import BOOT, request_line

# The floor: every file RECORD lists with a hash, up to the scan's bound, read and hashed.
FLOOR = r"""
import csv, hashlib, os, sys
root, info, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = 0
with open(os.path.join(info, "RECORD"), newline="") as fh:
    for row in csv.reader(fh):
        if len(row) < 2 or not row[1] or row[0].startswith("../"):
            continue
        path = os.path.join(root, row[0])
        try:
            if os.stat(path).st_size > limit:
                continue
            with open(path, "rb") as f:
                hashlib.sha256(f.read()).hexdigest()
        except OSError:
            continue
        n += 1
print(n)
"""


def _spawn(argv: list[str], stdin: bytes = b"") -> tuple[float, float, bytes]:
    """(CPU seconds of the child from wait4, wall seconds, its stdout)."""
    start = time.perf_counter()
    r, w = os.pipe()
    inr, inw = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(inr, 0)
        os.dup2(w, 1)
        os.closerange(3, 256)
        os.execv(argv[0], argv)
    os.close(w)
    os.close(inr)
    _write_all(inw, stdin)
    os.close(inw)
    chunks = []
    while True:
        b = os.read(r, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _pid, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if status:
        raise SystemExit(f"{argv[:3]} failed: {status}")
    return usage.ru_utime + usage.ru_stime, wall, b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _bundle(agent_from: str) -> bytes:
    """The agent bundle of this checkout, or of the tree at `agent_from` (its patcher/)."""
    if not agent_from:
        from patcher.transports.bundle import agent_bundle

        return agent_bundle()
    code = (
        "import sys; from patcher.transports.bundle import agent_bundle;"
        "sys.stdout.buffer.write(agent_bundle())"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=agent_from, capture_output=True, check=True
    ).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="the env's python with the package")
    ap.add_argument("--package", default="torch")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--agent-from", default="", help="a checkout whose agent to run instead")
    ap.add_argument("--max-bytes", type=int, default=16 * 1024 * 1024)
    args = ap.parse_args()
    py = args.python
    bundle = _bundle(args.agent_from)
    req = {"op": "scan", "package": args.package, "files": [], "state_dir": None, "known": []}
    where = subprocess.run(
        [py, "-I", "-c", "import importlib.metadata as m, sys; d = m.distribution(sys.argv[1]);"
         "print(d.locate_file('')); print(d._path)", args.package],
        capture_output=True, text=True, check=True,
    ).stdout.split("\n")  # fmt: skip
    root, info = where[0], where[1]
    rows: dict[str, list[tuple[float, float]]] = {"start-up": [], "agent scan": [], "floor": []}
    answer: dict[str, object] = {}
    counted = 0
    for _ in range(args.reps):
        cpu, wall, _out = _spawn([py, "-I", "-c", "pass"])
        rows["start-up"].append((cpu, wall))
        cpu, wall, out = _spawn([py, "-I", "-c", BOOT], bundle + request_line(req))
        rows["agent scan"].append((cpu, wall))
        answer = json.loads(out)
        cpu, wall, out = _spawn([py, "-I", "-c", FLOOR, root, info, str(args.max_bytes)])
        rows["floor"].append((cpu, wall))
        counted = int(out)
    assert answer.get("ok"), answer
    print(f"{args.package} {answer.get('version')}: {counted} files hashed by the floor, "
          f"{len(answer.get('skipped') or [])} skipped by the scan, "  # type: ignore[arg-type]
          f"{len(answer.get('files') or [])} not as RECORD says; "  # type: ignore[arg-type]
          f"{os.cpu_count()} cores; bundle {len(bundle)} bytes")  # fmt: skip
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
           for k, v in rows.items()}  # fmt: skip
    for k, (cpu, wall) in med.items():
        print(f"  {k:<12} CPU {cpu * 1000:8.1f} ms   wall {wall * 1000:8.1f} ms")
    floor, up = med["floor"][0], med["start-up"][0]
    scan = med["agent scan"][0]
    print(f"  agent scan / floor (CPU): {scan / floor:.2f}x; "
          f"minus start-up: {(scan - up) / (floor - up):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
