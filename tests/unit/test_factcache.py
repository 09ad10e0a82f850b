"""patcher/caches/facts.py: the answers a run plans on ahead are stored per host in bucket files
(a fleet command writes each bucket once, at its end), texts once per content, and nothing read
back is used unless every text is what its sha256 says."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from patcher.agent import protocol
from patcher.caches import facts


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def answer(text: str, applied: bool = False) -> dict[str, Any]:
    path = "/env/lib/site-packages/pkg/mod.py"
    journal = {}
    if applied:
        journal[path] = {
            "applied": {"s": {"spec": "s"}},
            "base": sha("base\n"),
            "base_text": "base\n",
            "current": sha(text),
            "current_text": text,
            "expected": sha(text),
        }
    return {
        "ok": True,
        "pid": 1,
        "python": {"executable": "/env/bin/python", "version": "3.11.7"},
        "packages": {
            "pkg": {
                "version": "1.0",
                "files": {
                    "pkg/mod.py": {
                        "path": path,
                        "exists": True,
                        "sha256": sha(text),
                        "record_sha256": sha("base\n"),
                        "text": text,
                        "free": 123,
                    }
                },
            }
        },
        "journal": journal,
        "state": {"dir": "/env/.vpatch", "writable": True, "free": 5},
        "locked": False,
        "incomplete": [],
    }


REQ = {"op": "inspect", "packages": {"pkg": ["pkg/mod.py"]}, "state_dir": None, "known": []}
BARE = dict(REQ, packages={})  # `rollback ID`, `status`: no package files asked


def entry(target: str) -> str:
    """The bucket file that holds `target`'s answers to REQ."""
    return f"{facts.name(target, REQ)[:2]}.json"


def host_doc(cache: Path, target: str) -> Any:
    hosts = json.loads((cache / entry(target)).read_text())["hosts"]
    return json.loads(hosts[facts.name(target, REQ)])


def remember(target: str, answers: list[dict[str, Any]], req: dict[str, Any] = REQ) -> None:
    facts.remember(target, req, answers)


def load(target: str, req: dict[str, Any] = REQ) -> list[tuple[str, dict[str, Any]]]:
    return facts.load(target, req)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VPATCH_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("VPATCH_NO_CACHE", raising=False)
    return tmp_path / "c" / "hosts"


def test_round_trip_newest_first_one_per_fingerprint(cache: Path) -> None:
    a, b, c = answer("base\n"), answer("new\n", applied=True), answer("newer\n", applied=True)
    remember("h1", [a])
    remember("h1", [b])
    remember("h1", [copy.deepcopy(b)])  # same state again: still one entry
    got = [a for fp, a in load("h1") if fp == protocol.fingerprint(a)]
    assert [protocol.fingerprint(x) for x in got] == [
        protocol.fingerprint(b),
        protocol.fingerprint(a),
    ]
    assert got[0]["packages"]["pkg"]["files"]["pkg/mod.py"]["text"] == "new\n"
    assert got[0]["journal"]["/env/lib/site-packages/pkg/mod.py"]["base_text"] == "base\n"
    remember("h1", [c])
    assert len(load("h1")) == facts.KEEP_PER_HOST
    # The envelope is not kept; texts are stored once per content, outside the answers.
    stored = host_doc(cache, "h1")
    assert (
        "pid" not in stored["entries"][0]["answers"][0]
        and "newer" not in (cache / entry("h1")).read_text()
    )
    remember("h2", [copy.deepcopy(c)])
    assert sorted(p.name for p in (cache / "texts").iterdir()) == sorted(
        {sha(t) for t in ("base\n", "new\n", "newer\n")}
    )
    assert load("nobody") == []


def test_nothing_unverified_comes_back(cache: Path) -> None:
    remember("h", [answer("base\n")])
    (cache / "texts" / sha("base\n")).write_text("evil\n")  # not what its name says
    assert load("h") == []
    assert not (cache / "texts" / sha("base\n")).exists()  # dropped, so it is stored again
    remember("h", [answer("base\n")])
    assert len(load("h")) == 1
    os.unlink(cache / "texts" / sha("base\n"))
    assert load("h") == []  # a missing text: no guess
    broken_docs = ("{", "[]", '{"entries": [1, {"asked": 3}]}', '{"entries": [{"answers": [{}]}]}')
    for broken in (
        *broken_docs,
        json.dumps({"entries": [{"asked": facts.asked(REQ), "answers": [1, {}]}]}),
    ):
        (cache / entry("h")).write_text(broken)  # a whole bucket of nothing usable
        assert load("h") == []
        for text in (broken, json.loads(broken) if broken != "{" else 7):
            doc = {"hosts": {facts.name("h", REQ): text}}
            (cache / entry("h")).write_text(json.dumps(doc))  # the host's document broken
            assert load("h") == []


@pytest.mark.parametrize(
    "edit",
    [
        lambda a, f: f.update(text="other\n"),
        lambda a, f: f.update(text=None),
        lambda a, f: a.update(incomplete=[{"txn": "t"}]),
        lambda a, f: a.update(locked=True),
        lambda a, f: a.pop("packages"),
    ],
    ids=["text-not-its-sha", "no-text", "incomplete", "locked", "malformed"],
)
def test_unusable_answers_are_neither_stored_nor_used(cache: Path, edit: Any) -> None:
    a = answer("base\n")
    edit(a, a.get("packages", {}).get("pkg", {}).get("files", {}).get("pkg/mod.py", {}))
    assert facts.usable(a) is None
    remember("h", [a])
    assert load("h") == [] and not (cache / entry("h")).exists()


def test_a_cache_dir_others_can_write_is_not_used(cache: Path) -> None:
    remember("h", [answer("base\n")])
    assert load("h")
    os.chmod(cache, 0o777)
    assert load("h") == []
    os.chmod(cache, 0o700)
    assert load("h")


def test_key_is_who_asks_where_for_what() -> None:
    req = {"op": "inspect", "packages": {"pkg": ["pkg/mod.py"]}, "state_dir": None, "known": []}
    k = facts.key("h1", req)
    assert facts.key("h1", dict(req, known=["x"])) == k
    assert facts.key("h2", req) != k
    assert facts.key("h1", dict(req, state_dir="/s")) != k
    assert facts.key("h1", dict(req, packages={"pkg": ["pkg/other.py"]})) != k


@pytest.mark.parametrize(
    "plant",
    [
        lambda p: os.chown(p, 4242, 4242),
        lambda p: os.chmod(p, 0o646),
        lambda p: os.link(p, p.with_name("x")),
        lambda p: (os.rename(p, p.with_name("real")), os.symlink(p.with_name("real"), p)),
        lambda p: (os.unlink(p), os.mkfifo(p)),
    ],
    ids=["owner", "mode", "hardlink", "symlink", "fifo"],
)
@pytest.mark.parametrize("which", ["answer", "text"])
def test_an_entry_someone_else_could_have_planted_is_not_used(
    cache: Path, plant: Any, which: str
) -> None:
    remember("h", [answer("base\n")])
    assert load("h")
    plant(cache / entry("h") if which == "answer" else cache / "texts" / sha("base\n"))
    assert load("h") == []


def test_one_file_per_host_whatever_files_were_asked(cache: Path) -> None:
    other = dict(REQ, packages={"pkg": ["pkg/mod.py", "pkg/other.py"]})
    a, b = answer("base\n"), answer("new\n", applied=True)
    remember("h", [a])
    remember("h", [b], other)
    assert [p.name for p in cache.glob("*.json")] == [entry("h")]
    assert [fp for fp, _ in load("h")] == [protocol.fingerprint(a)]  # each its own files
    assert [fp for fp, _ in load("h", other)] == [protocol.fingerprint(b)]
    assert load("h", dict(REQ, state_dir="/elsewhere")) == []
    # Asking for no package files: every entry's answers, newest first, their files left out
    # (the journal is the same), as the agent answers such a request.
    narrowed = [dict(x, packages={}) for x in (b, a)]
    assert [fp for fp, _ in load("h", BARE)] == [protocol.fingerprint(x) for x in narrowed]
    [(_, got), _] = load("h", BARE)
    assert got["packages"] == {} and got["journal"][next(iter(b["journal"]))]["base_text"]
    # At most KEEP_ASKED sets of files per host, the oldest out first.
    for i in range(facts.KEEP_ASKED):
        remember("h", [answer(f"v{i}\n")], dict(REQ, packages={"pkg": [f"pkg/m{i}.py"]}))
    assert load("h") == [] and load("h", other) == []
    assert [p.name for p in cache.glob("*.json")] == [entry("h")]


def test_texts_the_run_checked_are_not_read_again(cache: Path) -> None:
    a = answer("base\n")
    remember("h", [a])
    os.unlink(cache / "texts" / sha("base\n"))
    assert load("h") == []  # its text is gone: no guess
    memo = facts.Memo()
    [(fp, got)] = facts.load("h", REQ, memo, {sha("base\n"): "base\n"})
    assert fp == protocol.fingerprint(a)
    assert got["packages"]["pkg"]["files"]["pkg/mod.py"]["text"] == "base\n"
    # A text is taken from `known` only under the sha256 the stored answer names.
    assert facts.load("h", REQ, facts.Memo(), {sha("other\n"): "other\n"}) == []


def targets_in_one_bucket(n: int, not_in: str = "") -> list[str]:
    """`n` target names whose answers to REQ share one bucket file."""
    out: list[str] = []
    first = ""
    for i in range(100000):
        t = f"h{i}"
        b = entry(t)
        if b == not_in:
            continue
        first = first or b
        if b == first:
            out.append(t)
            if len(out) == n:
                return out
    raise AssertionError("no such names")


def test_a_fleet_run_writes_each_bucket_once_at_its_end(cache: Path) -> None:
    """Memo.defer (a fleet command): stores are held until flush, seen meanwhile by the same
    run's loads, then written one file per bucket touched; another run's hosts in a bucket
    stay, this run's replace theirs, and a bucket keeps the KEEP_PER_BUCKET last written."""
    a, b = answer("base\n"), answer("new\n", applied=True)
    mine = targets_in_one_bucket(3)
    elsewhere = targets_in_one_bucket(1, not_in=entry(mine[0]))
    remember(mine[0], [a])  # an earlier run's, written through
    memo = facts.Memo(defer=True)
    made: list[str] = []
    real_write = facts._write

    def write(d: Path, name: str, data: bytes) -> None:
        made.append(name)
        real_write(d, name, data)

    facts._write = write  # type: ignore[assignment]
    try:
        for t in [*mine[1:], *elsewhere]:
            facts.remember(t, REQ, [b], memo)
        assert made and all(len(n) == 64 for n in made)  # texts only: no bucket written yet
        assert not (cache / entry(elsewhere[0])).exists()
        [(fp, _)] = facts.load(mine[1], REQ, memo)  # the run's own, not yet written
        assert fp == protocol.fingerprint(b)
        assert load(mine[1]) == []  # another run does not see it yet
        facts.flush(memo)
        buckets = [n for n in made if n.endswith(".json")]
        assert sorted(buckets) == sorted({entry(mine[0]), entry(elsewhere[0])})
        facts.flush(memo)  # nothing left: nothing written
        assert [n for n in made if n.endswith(".json")] == buckets
    finally:
        facts._write = real_write  # type: ignore[assignment]
    assert [fp for fp, _ in load(mine[0])] == [protocol.fingerprint(a)]  # kept from before
    assert [fp for fp, _ in load(mine[2])] == [protocol.fingerprint(b)]
    assert [fp for fp, _ in load(elsewhere[0])] == [protocol.fingerprint(b)]
    hosts = json.loads((cache / entry(mine[0])).read_text())["hosts"]
    assert list(hosts)[-2:] == [facts.name(t, REQ) for t in mine[1:]]  # newest last
    more = targets_in_one_bucket(facts.KEEP_PER_BUCKET + 3)
    memo = facts.Memo(defer=True)
    for t in more:
        facts.remember(t, REQ, [a], memo)
    facts.flush(memo)
    hosts = json.loads((cache / entry(mine[0])).read_text())["hosts"]
    assert list(hosts) == [facts.name(t, REQ) for t in more[3:]]
    assert load(more[2]) == [] and load(more[3])  # the least recently written went first


def test_host_files_of_the_older_layout_are_removed(cache: Path) -> None:
    """One file per host (the layout before the buckets) is never read, and a flush removes
    it; a bucket's names that are not name()'s are not read either."""
    remember("h", [answer("base\n")])
    old = cache / f"{facts.name('h', REQ)}.json"
    old.write_text(json.dumps(host_doc(cache, "h")))
    doc = json.loads((cache / entry("h")).read_text())
    doc["hosts"] = {"../../x": doc["hosts"][facts.name("h", REQ)]}
    (cache / entry("h")).write_text(json.dumps(doc))
    assert load("h") == []
    remember("h2", [answer("base\n")])  # a new run's flush: the old layout's file goes
    assert not old.exists()
