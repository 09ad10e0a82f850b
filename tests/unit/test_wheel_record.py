"""RECORD read as pip installs it: the fast path for plain names gives exactly what pathlib's
normal form gives, for every name shape a RECORD can hold."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from pathlib import PurePosixPath

from patcher.wheels.wheel import record_entry, record_files

NAMES = [
    "pkg/mod.py",
    "pkg/sub/a,b.py",  # a comma: quoted in the CSV (vLLM has 514 of these)
    "pkg/.hidden.py",
    "./pkg/dot.py",
    "pkg//double.py",
    "pkg/./here.py",
    "pkg/trailing/",
    "pkg/end/.",
    "/abs/olute.py",
    "//two/slashes.py",
    "pkg/../up.py",
    "pkg-1.0.data/purelib/pkg/pure.py",
    "pkg-1.0.data/platlib/pkg/plat.so",
    "pkg-1.0.data/scripts/tool",
    "pkg-1.0.data/purelib",
    "a.data/purelib/x/y.py",
    "pkg/x.data",
    ".",
    "pkg-1.0.dist-info/RECORD",
]


def _reference(record: str) -> dict[str, str | None]:
    """record_files as it was: pathlib's normal form for every row."""
    out: dict[str, str | None] = {}
    for row in csv.reader(io.StringIO(record)):
        if not row:
            continue
        parts = PurePosixPath(row[0]).parts
        if len(parts) > 2 and parts[0].endswith(".data"):
            if parts[1] not in ("purelib", "platlib"):
                continue
            parts = parts[2:]
        digest = row[1] if len(row) > 1 else ""
        value = digest.partition("=")[2]
        out["/".join(parts)] = (
            base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
            if digest.startswith("sha256=") and value
            else None
        )
    return out


def _record() -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for n in NAMES:
        digest = base64.urlsafe_b64encode(hashlib.sha256(n.encode()).digest()).rstrip(b"=")
        w.writerow([n, "sha256=" + digest.decode(), "1"])
    w.writerow(["pkg/nohash.py", "", ""])
    w.writerow(["pkg/twice.py", "sha256=" + "A" * 43, "1"])
    w.writerow(["pkg/./twice.py", "sha256=" + "B" * 43, "1"])  # the last row wins
    return buf.getvalue()


def test_every_name_shape_reads_as_pathlib_reads_it() -> None:
    record = _record()
    got = record_files(record)
    assert got == _reference(record)
    assert got["pkg/double.py"] is not None and "pkg//double.py" not in got
    assert "pkg/pure.py" in got and "tool" not in got and "pkg-1.0.data/scripts/tool" not in got
    assert got["pkg/nohash.py"] is None


def test_one_entry_is_what_the_whole_record_says_of_it() -> None:
    record = _record()
    every = record_files(record)
    asked = [*every, "pkg/absent.py", "pkg/sub/a", "tool", "pkg-1.0.data/purelib/pkg/pure.py"]
    asked += ['pkg/"quoted".py', "pkg/", ""]
    for rel in asked:
        assert record_entry(record, rel) == (rel in every, every.get(rel)), rel
    assert record_entry(record, "pkg/twice.py")[1] == every["pkg/twice.py"]
