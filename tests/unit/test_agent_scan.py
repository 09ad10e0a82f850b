"""The agent's `scan` op and the commit's backup seeds (apply --adopt), in process, on a fake
site-packages: a dist-info with a real RECORD, files edited, removed and added."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from pathlib import Path

import pytest

from patcher import agent


def _digest(data: bytes) -> str:
    raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={raw}"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    files = {"toy/__init__.py": b"X = 1\n", "toy/a.py": b"A = [1]\n", "toy/b.py": b"B = 2\n"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    info = root / "toy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy\nVersion: 1.0\n\n")
    rows = [f"{rel},{_digest(d)},{len(d)}" for rel, d in files.items()]
    (info / "RECORD").write_text("\n".join([*rows, "toy-1.0.dist-info/RECORD,,"]) + "\n")
    monkeypatch.setattr(sys, "path", [str(root)])
    return root


def test_scan_lists_modified_missing_and_added(site: Path, tmp_path: Path) -> None:
    (site / "toy/a.py").write_bytes(b"A = [1, 2]\n")
    (site / "toy/b.py").unlink()
    (site / "toy/hack.py").write_bytes(b"H = 1\n")
    (site / "toy/__pycache__").mkdir()
    (site / "toy/__pycache__/a.cpython-311.pyc").write_bytes(b"\0")
    res = agent.handle({"op": "scan", "package": "toy", "state_dir": str(tmp_path / "st")})
    assert res["ok"] and res["version"] == "1.0"
    got = {f["rel"]: (f["state"], f["text"]) for f in res["files"]}
    assert got == {
        "toy/a.py": ("modified", "A = [1, 2]\n"),
        "toy/b.py": ("missing", None),
        "toy/hack.py": ("added", "H = 1\n"),
    }
    only = agent.handle({"op": "scan", "package": "toy", "files": ["toy/a.py"]})
    assert [f["rel"] for f in only["files"]] == ["toy/a.py"]
    known = hashlib.sha256(b"A = [1, 2]\n").hexdigest()
    cached = agent.handle({"op": "scan", "package": "toy", "known": [known], "files": ["toy/a.py"]})
    assert cached["files"][0]["text"] is None  # the controller has these bytes


def test_scan_bounds_reads(site: Path) -> None:
    (site / "toy/a.py").write_bytes(b"A = 1\n" * 100)
    res = agent.handle({"op": "scan", "package": "toy", "max_bytes": 64})
    assert "toy/a.py" in res["skipped"] and not res["files"]
    none = agent.handle({"op": "scan", "package": "nope"})
    assert none["ok"] and none["version"] is None


def test_commit_seeds_backups_checked_by_hash(tmp_path: Path) -> None:
    sdir = tmp_path / "state"
    text = "X = 1\n"
    sha = hashlib.sha256(text.encode()).hexdigest()
    bad = agent.handle(
        {"op": "commit", "writes": [], "journal": [], "state_dir": str(sdir),
         "backups": [{"sha256": "0" * 64, "text": text}]}
    )  # fmt: skip
    assert not bad["ok"] and bad["kind"] == "input"
    assert not (sdir / "backups" / ("0" * 64)).exists()
    good = agent.handle(
        {"op": "commit", "writes": [], "journal": [], "state_dir": str(sdir),
         "backups": [{"sha256": sha, "text": text}]}
    )  # fmt: skip
    assert good["ok"], good
    backup = sdir / "backups" / sha
    assert backup.read_text() == text and oct(os.stat(backup).st_mode & 0o777) == "0o600"


def test_namespace_directory_of_another_dist_is_not_added(site: Path) -> None:
    (site / "toy/sub").mkdir()
    (site / "toy/sub/other.py").write_bytes(b"O = 1\n")  # not in a directory of toy's files
    (site / "other_dist").mkdir()
    (site / "other_dist/x.py").write_bytes(b"")
    res = agent.handle({"op": "scan", "package": "toy"})
    assert res["files"] == []


def test_large_scan_answers_as_a_small_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hashed.check with OpenSSL's sha256 (forced here: threshold 2 files) gives what the
    agent's own sha256 gives, entry for entry, on a tree with every kind of file: same,
    edited, gone, a gone directory, a link, a FIFO, a file over the bound, a link as a
    directory, a RECORD `..`."""
    from patcher.agent import fdwalk, fsops, hashed

    root = tmp_path / "dist"
    items = []
    for d in range(6):
        for f in range(5):
            p = root / f"pkg/d{d}" / f"m{f}.py"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"x = %d\n" % (d * 10 + f))
            items.append((f"pkg/d{d}/m{f}.py", fsops.sha256_bytes(p.read_bytes())))
    (root / "pkg/d0/m1.py").write_bytes(b"edited\n")
    (root / "pkg/d0/m2.py").unlink()
    (root / "pkg/d1/m0.py").unlink()
    (root / "pkg/d1/m0.py").symlink_to(root / "pkg/d1/m1.py")
    (root / "pkg/d1/m2.py").unlink()
    os.mkfifo(root / "pkg/d1/m2.py")
    (root / "pkg/d2/m0.py").write_bytes(b"#" * 100)
    for f in range(5):
        (root / "pkg/d3" / f"m{f}.py").unlink()
    (root / "pkg/d3").rmdir()
    (root / "pkg/d4").rename(root / "pkg/real4")
    (root / "pkg/d4").symlink_to(root / "pkg/real4")
    items.append(("pkg/../../etc/passwd", "0" * 64))
    with fdwalk.open_root(os.path.realpath(root)) as top:
        assert hashed._sha256(False) is fsops.SHA256
        one = hashed.check(top, items, 64)
        monkeypatch.setattr(hashed, "OPENSSL_FILES", 2)
        assert hashed._sha256(True) is not fsops.SHA256
        large = hashed.check(top, items, 64)
    assert large == one
    states = {rel: state for rel, (state, _data) in one.items()}
    assert states["pkg/d0/m0.py"] == hashed.SAME and one["pkg/d0/m0.py"][1] is None
    assert one["pkg/d0/m1.py"] == (hashed.MODIFIED, b"edited\n")
    assert states["pkg/d0/m2.py"] == states["pkg/d3/m4.py"] == hashed.MISSING
    for rel in ("pkg/d1/m0.py", "pkg/d1/m2.py", "pkg/d2/m0.py", "pkg/d4/m0.py"):
        assert states[rel] == hashed.SKIPPED, rel
    assert states["pkg/../../etc/passwd"] == hashed.SKIPPED
    assert len(one) == len(items)
