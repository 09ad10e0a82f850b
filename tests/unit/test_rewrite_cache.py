"""The on-disk rewrite cache: exact keys, never trusted when unsafe or corrupt, never fails a
run; and a run whose rewrites are all cached never imports libcst."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from patcher.caches import rewrites
from patcher.rewrite import apply_edits
from patcher.specs.model import PatchSpec, load_spec
from tests.conftest import REPO, Env, vpatch
from tests.support.standin_specs import REL, SPEC_A, spec_a

SOURCE = 'class SpecConfig:\n    def verify(self):\n        supported = ["llama", "qwen"]\n'


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("VPATCH_CACHE_DIR", str(d))
    monkeypatch.delenv("VPATCH_NO_CACHE", raising=False)
    return d / "rewrites"


def spec(tmp_path: Path, text: str = SPEC_A) -> PatchSpec:
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return load_spec(p)


def sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def test_round_trip_and_exact_keys(tmp_path: Path, cache_dir: Path) -> None:
    s = spec(tmp_path)
    res = apply_edits(SOURCE, s.variant[0].edit)
    assert res.status == "changed" and "kimi_k2" in res.source
    assert rewrites.get(sha(SOURCE), s, 0) is None
    assert not rewrites.covers([s])
    assert not cache_dir.parent.exists()  # reading creates nothing; the first write does
    rewrites.put(sha(SOURCE), s, 0, res)
    assert rewrites.get(sha(SOURCE), s, 0) == res
    assert rewrites.covers([s])
    assert oct(cache_dir.stat().st_mode & 0o777) == "0o700"
    # Any other input is another key: text, variant, spec content.
    assert rewrites.get(sha(SOURCE + "\n"), s, 0) is None
    assert rewrites.get(sha(SOURCE), s, 1) is None
    other = spec(tmp_path, spec_a(values=["kimi_k25"]))
    assert rewrites.get(sha(SOURCE), other, 0) is None
    assert not rewrites.covers([s, other])
    # Only results a run acts on are kept.
    missing = apply_edits("x = 1\n", s.variant[0].edit)
    assert missing.status == "anchor_missing"
    rewrites.put(sha("x = 1\n"), s, 0, missing)
    assert rewrites.get(sha("x = 1\n"), s, 0) is None


def test_new_rewrite_code_is_a_new_key(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = spec(tmp_path)
    rewrites.put(sha(SOURCE), s, 0, apply_edits(SOURCE, s.variant[0].edit))
    assert rewrites.get(sha(SOURCE), s, 0) is not None
    monkeypatch.setattr(rewrites, "code_version", lambda: "0123456789abcdef")
    assert rewrites.get(sha(SOURCE), s, 0) is None


def test_code_version_follows_the_rewrite_sources() -> None:
    """It hashes the files that compute rewrites (and libcst's version), not a release number:
    an edited rewrite module in a dev checkout cannot be served a stale entry."""
    rewrites.code_version.cache_clear()
    before = rewrites.code_version()
    real = Path.read_bytes

    def edited(self: Path) -> bytes:
        data = real(self)
        return data + b"# edited\n" if self.name == "elements.py" else data

    try:
        Path.read_bytes = edited  # type: ignore[method-assign]
        rewrites.code_version.cache_clear()
        after = rewrites.code_version()
    finally:
        Path.read_bytes = real  # type: ignore[method-assign]
        rewrites.code_version.cache_clear()
    assert len(before) == 16 and after != before


@pytest.mark.parametrize(
    "damage",
    [
        lambda e: "{not json",
        lambda e: json.dumps([e]),
        lambda e: json.dumps({**e, "status": "anchor_missing"}),
        lambda e: json.dumps({**e, "source": 42}),
        lambda e: json.dumps({**e, "spec": "0" * 16}),
        lambda e: json.dumps({**e, "status": "unchanged"}),  # unchanged = the input itself
        lambda e: json.dumps({**e, "source": e["source"] + "import evil\n"}),  # not its sha256
        lambda e: json.dumps({k: v for k, v in e.items() if k != "source_sha256"}),
    ],
)
def test_damaged_entries_are_misses(tmp_path: Path, cache_dir: Path, damage: object) -> None:
    s = spec(tmp_path)
    rewrites.put(sha(SOURCE), s, 0, apply_edits(SOURCE, s.variant[0].edit))
    [entry] = list(cache_dir.glob("*.json"))
    entry.write_text(damage(json.loads(entry.read_text())))  # type: ignore[operator]
    assert rewrites.get(sha(SOURCE), s, 0) is None


def test_unsafe_or_unusable_directory_is_not_used(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = spec(tmp_path)
    res = apply_edits(SOURCE, s.variant[0].edit)
    rewrites.put(sha(SOURCE), s, 0, res)
    cache_dir.chmod(0o777)  # anyone could plant code here: ignored
    assert rewrites.directory() is None and rewrites.get(sha(SOURCE), s, 0) is None
    cache_dir.chmod(0o700)
    os.chown(cache_dir, 4242, 4242)  # someone else's
    assert rewrites.directory() is None and rewrites.get(sha(SOURCE), s, 0) is None
    os.chown(cache_dir, os.geteuid(), os.getegid())
    assert rewrites.get(sha(SOURCE), s, 0) == res
    monkeypatch.setenv("VPATCH_NO_CACHE", "1")
    assert rewrites.directory() is None and rewrites.get(sha(SOURCE), s, 0) is None
    # A path that cannot be a directory: no cache, no error, nothing written.
    monkeypatch.delenv("VPATCH_NO_CACHE")
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("VPATCH_CACHE_DIR", str(blocker))
    rewrites.put(sha(SOURCE), s, 0, res)
    assert rewrites.get(sha(SOURCE), s, 0) is None and blocker.read_text() == ""


def test_prune_keeps_the_newest(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rewrites, "KEEP", 8)
    s = spec(tmp_path)
    texts = [SOURCE + f"# {i}\n" for i in range(9)]
    for i, text in enumerate(texts):
        rewrites.put(sha(text), s, 0, apply_edits(text, s.variant[0].edit))
        entry = cache_dir / rewrites._name(sha(text), s, 0)
        os.utime(entry, (1_000_000 + i, 1_000_000 + i))  # the order of writes, in mtimes
    left = [t for t in texts if rewrites.get(sha(t), s, 0) is not None]
    assert left == texts[-len(left) :] and len(left) == 6  # 9 > 8: down to 3/4 of KEEP
    assert not list(cache_dir.glob(".tmp-*"))


def test_second_run_needs_no_libcst(tmp_path: Path, standin_env: Env) -> None:
    """CLI level: apply, rollback, apply again with a cache dir: the second apply parses nothing
    and never imports libcst (python -X importtime lists every import on stderr)."""
    a = tmp_path / "a.toml"
    a.write_text(SPEC_A)
    env = {"VPATCH_CACHE_DIR": str(tmp_path / "cache"), "VPATCH_NO_CACHE": ""}
    py = ["--python", str(standin_env.python)]
    first = vpatch("apply", a, *py, "--json", env=env)
    assert first.code == 0, first.out + first.err
    assert first.doc["stats"] == {
        "libcst_parses": 1,
        "rewrite_cache_hits": 0,
        "agent_exchanges": 2,  # inspect; commit + the check + a closing inspect
        "planned_ahead": 0,
    }
    assert vpatch("rollback", *py, env=env).code == 0
    pristine = standin_env.file(REL).read_text()

    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "patcher.cli", "apply", str(a), *py, "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    # The run plans on the two states the first apply saw (patcher/caches/facts.py): pristine
    # (a rewrite: one hit) and patched (nothing to rewrite). The full rollback asked for other
    # files (a state remembered apart), so neither matched; the plan on the host's answer is
    # the second hit.
    assert doc["stats"] == {
        "libcst_parses": 0,
        "rewrite_cache_hits": 2,
        "agent_exchanges": 2,
        "planned_ahead": 0,
    }
    [p] = doc["hosts"][0]["patches"]
    assert p["outcome"] == "applied" and [pr["ok"] for pr in p["probes"]] == [True]
    assert '"kimi_k2",' in standin_env.file(REL).read_text() != pristine
    imported = [line.split("|")[-1].strip() for line in proc.stderr.splitlines()]
    assert "patcher.run.engine" in imported and "libcst" not in imported
    # Without the cache (the suite's default), the same run parses again.
    assert vpatch("rollback", *py).code == 0
    again = vpatch("apply", a, *py, "--json")
    assert (again.doc["stats"]["libcst_parses"], again.doc["stats"]["rewrite_cache_hits"]) == (1, 0)


def test_rollback_needs_no_libcst(tmp_path: Path, standin_env: Env) -> None:
    """Rolling everything back restores the backup's bytes; its diff is made from the text
    inspect sends (the file as it is now), not by re-running the edits: no libcst at all."""
    a = tmp_path / "a.toml"
    a.write_text(SPEC_A)
    py = ["--python", str(standin_env.python)]
    assert vpatch("apply", a, *py).code == 0
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "patcher.cli", "rollback", *py, "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    [p] = json.loads(proc.stdout)["hosts"][0]["patches"]
    [f] = p["files"]
    assert p["outcome"] == "rolled_back" and '-            "kimi_k2",\n' in f["diff"], f["diff"]
    imported = [line.split("|")[-1].strip() for line in proc.stderr.splitlines()]
    assert "patcher.run.engine" in imported and "libcst" not in imported


@pytest.mark.parametrize(
    "plant",
    [
        lambda p: os.chown(p, 4242, 4242),  # another user's entry
        lambda p: os.chmod(p, 0o666),  # one anyone could have rewritten
        lambda p: os.link(p, p.with_name("other")),  # a second name somebody else may hold
        lambda p: (os.rename(p, p.with_name("real")), os.symlink(p.with_name("real"), p)),
        lambda p: (os.unlink(p), os.mkfifo(p)),  # opening it must not hang
        lambda p: os.chmod(p.parent.parent, 0o777),  # the directory holding the cache
    ],
    ids=["owner", "mode", "hardlink", "symlink", "fifo", "parent-mode"],
)
def test_a_poisoned_entry_is_never_used(tmp_path: Path, cache_dir: Path, plant: Any) -> None:
    """An entry that says it is the rewrite of pip's bytes but holds a backdoor, planted where
    the user would not have put it: a miss, and the run computes the rewrite itself."""
    s = spec(tmp_path)
    res = apply_edits(SOURCE, s.variant[0].edit)
    rewrites.put(sha(SOURCE), s, 0, res)
    [entry] = list(cache_dir.glob("*.json"))
    doc = json.loads(entry.read_text())
    evil = doc["source"] + "__import__('os').system('id')\n"
    entry.write_text(json.dumps({**doc, "source": evil, "source_sha256": sha(evil)}))
    poisoned = rewrites.get(sha(SOURCE), s, 0)
    assert poisoned is not None and poisoned.source == evil  # the user's own entry: used
    plant(entry)
    assert rewrites.get(sha(SOURCE), s, 0) is None
    assert rewrites.Caches().rewrite(SOURCE, s, 0, REL, s.variant[0].edit) == res


def test_the_run_keeps_texts_only_under_their_own_sha256() -> None:
    texts = rewrites.Texts()
    texts[sha(SOURCE)] = SOURCE
    with pytest.raises(ValueError, match="does not hash"):
        texts[sha(SOURCE + "x")] = SOURCE  # a host naming another file's hash for its text
    with pytest.raises(ValueError):
        texts.setdefault(sha("a"), "b")
    with pytest.raises(ValueError):
        texts[sha("\udc80")] = "\udc80"  # no file holds a lone surrogate
    assert dict(texts) == {sha(SOURCE): SOURCE}
