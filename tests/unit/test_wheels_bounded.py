"""Bounded input from an index (issue 37 item 8), against a hostile index on 127.0.0.1
(tests/support/rangeindex.py): a 206 that is not the range asked for is refused before its body
is read, and no zip member (RECORD included) is inflated past its RECORD size or vpatch's cap.

Memory is measured as a fact (tracemalloc's peak of Python allocations), never a timing."""

from __future__ import annotations

import os
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from patcher.wheels import pipconf, remote
from patcher.wheels.wheel import MAX_RECORD, CorruptWheel, Wheel
from tests.support import rangeindex, wheellab

BOMB = 24 * 1024 * 1024  # inflates to this; deflated it is ~24 KB


def _bomb_wheel(dest: Path, record_size: int | None = 300_000, record_bomb: bool = False) -> Path:
    """A wheel whose bomb/big.py inflates to BOMB bytes of zeros while RECORD says
    `record_size`; with record_bomb, RECORD itself is the bomb (padded past MAX_RECORD)."""
    info = "bomb-1.0.dist-info"
    zeros = bytes(BOMB)
    rows = [f"bomb/__init__.py,sha256={wheellab.b64(b'')},0"]
    size = "" if record_size is None else str(record_size)
    rows.append(f"bomb/big.py,sha256={wheellab.b64(zeros)},{size}")
    rows.append(f"{info}/RECORD,,")
    record = "\n".join(rows) + "\n"
    if record_bomb:
        record += "#" * (MAX_RECORD + 1)
    path = dest / "bomb-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb/__init__.py", b"")
        zf.writestr("bomb/big.py", zeros)
        zf.writestr(f"{info}/RECORD", record)
    path.chmod(0o644)
    return path


def _peak(fn: Callable[[], object]) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        fn()
        err: BaseException | None = None
    except Exception as exc:  # the test reads it
        err = exc
    finally:
        _cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return err, peak


def test_a_suffix_range_answered_with_the_whole_file_is_refused_unread(tmp_path: Path) -> None:
    """`206 bytes 0-(N-1)/N` to `Range: bytes=-TAIL`: before, accepted and read whole (N bytes
    of controller memory for one diff); now refused before the body is read."""
    big = tmp_path / "big-1.0-py3-none-any.whl"
    big.write_bytes(os.urandom(remote.TAIL * 8))
    with rangeindex.serve([big], whole_tail=True) as index:
        config = pipconf.IndexConfig(index_urls=(index.url,), timeout=10)
        moved = remote.Moved()
        client = remote.Client(config, moved)
        url = index.url.replace("/simple/", f"/files/{big.name}")
        with pytest.raises(remote.NoRanges) as got:
            remote.RangeFile(client, url)
    assert "asked for bytes=-" in got.value.message
    assert moved.bytes == 0 and moved.requests == 0


def test_a_zip_bomb_member_served_by_the_index_is_refused_uninflated(tmp_path: Path) -> None:
    """A member of 24 MiB of zeros whose RECORD says 300,000 bytes, read by ranges from the
    index: refused from the zip's declared size, nothing inflated (peak far below 24 MiB)."""
    bomb = _bomb_wheel(tmp_path)
    with rangeindex.serve([bomb]) as index:
        config = pipconf.IndexConfig(index_urls=(index.url,), timeout=10)
        got, fh = remote.open_ranged(config, "bomb", Version("1.0"), remote.Moved())
        wheel = Wheel(Path(got.filename), fh, "index", None, got.filename)
        err, peak = _peak(lambda: wheel.read("bomb/big.py"))
        wheel.close()
    assert isinstance(err, CorruptWheel) and "RECORD: 300000" in err.message, err
    assert peak < 4 * 1024 * 1024, peak


def test_a_member_without_a_record_size_is_bounded_by_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No size in RECORD: the cap bounds it (lowered here to 1 MiB so the test stays cheap);
    a member that inflates past what its zip entry declares is refused as well."""
    monkeypatch.setattr("patcher.wheels.wheel.MAX_READ", 1024 * 1024)
    path = _bomb_wheel(tmp_path, record_size=None)
    with path.open("rb") as fh:
        wheel = Wheel(path, fh, "wheelhouse")
        err, peak = _peak(lambda: wheel.read("bomb/big.py"))
    assert isinstance(err, CorruptWheel) and "allowed" in err.message, err
    assert peak < 4 * 1024 * 1024, peak


def test_a_record_bomb_is_refused_when_the_wheel_is_opened(tmp_path: Path) -> None:
    path = _bomb_wheel(tmp_path, record_bomb=True)
    with path.open("rb") as fh:
        err, peak = _peak(lambda: Wheel(path, fh, "wheelhouse"))
    assert isinstance(err, CorruptWheel) and "RECORD" in err.message, err
    assert peak < 4 * 1024 * 1024, peak


def test_an_honest_wheel_still_reads(tmp_path: Path) -> None:
    path = wheellab.fake_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b"X = 1\n"})
    with path.open("rb") as fh:
        wheel = Wheel(path, fh, "wheelhouse")
        assert wheel.read("demo/__init__.py") == b"X = 1\n"
        assert wheel.check_member("demo/__init__.py").file_size == 6


def test_a_busy_index_is_retried_a_garbled_page_is_one_clean_error(tmp_path: Path) -> None:
    """pip's retries on a 503 (two busy answers, then the page); a page that says JSON and is
    not: a NoRanges naming it (the command's one error line), never a traceback."""
    from patcher.wheels import indexclient

    wheel = wheellab.fake_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b""})
    with rangeindex.serve([wheel]) as index:
        config = pipconf.IndexConfig(index_urls=(index.url,), timeout=10, retries=2)
        index.failing = 2
        client = indexclient.Client(config, tmp_path / "store")
        assert client.versions("demo") == [Version("1.0")]
        assert index.requests.count("GET /simple/demo/") == 3
        index.failing = 1
        once = indexclient.Client(
            pipconf.IndexConfig(index_urls=(index.url,), timeout=10, retries=0),
            tmp_path / "store2",
        )
        with pytest.raises(remote.NoRanges, match="HTTP 503"):
            once.versions("demo")
        index.garbled = True
        bad = indexclient.Client(config, tmp_path / "store3")
        with pytest.raises(remote.NoRanges, match="not a project page"):
            bad.versions("demo")


def test_credentials_and_the_whole_wheels_hash(tmp_path: Path) -> None:
    """An index that asks for credentials: the index URL's `user:password@` opens it, for the
    page and the whole wheel (streamed to disk, its sha256 the page's); without them, one
    clean error; a wheel that is not the page's sha256 is refused and not left on disk."""
    from patcher.wheels import indexclient

    wheel = wheellab.fake_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b"X = 1\n"})
    with rangeindex.serve([wheel], auth=("u", "p w")) as index:
        url = index.url.replace("http://", "http://u:p%20w@")
        config = pipconf.IndexConfig(index_urls=(url,), timeout=10, retries=0)
        client = indexclient.Client(config, tmp_path / "store")
        dest = tmp_path / "dest"
        dest.mkdir()
        got = client.download("demo", Version("1.0"), dest)
        assert got.read_bytes() == wheel.read_bytes()
        anonymous = pipconf.IndexConfig(index_urls=(index.url,), timeout=10, retries=0)
        with pytest.raises(remote.NoRanges, match="HTTP 401"):
            indexclient.Client(anonymous, tmp_path / "store2").versions("demo")
        wheel.write_bytes(wheel.read_bytes() + b"\0")  # the server now sends other bytes
        again = tmp_path / "again"
        again.mkdir()
        fresh = indexclient.Client(config, tmp_path / "store3")
        with pytest.raises(remote.NoRanges, match="sha256"):
            fresh.download("demo", Version("1.0"), again)
        assert list(again.iterdir()) == []


def test_an_index_gone_offline_leaves_the_kept_page_in_use(tmp_path: Path) -> None:
    """A kept page its server said not to reuse (max-age=0): with the index answering, one
    request; with nothing listening any more, the kept page as it was (a laptop offline can
    still list what it saw); --refresh insists on the index and says it cannot be reached."""
    from patcher.wheels import indexclient

    wheel = wheellab.fake_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b""})
    store = tmp_path / "store"
    with rangeindex.serve([wheel], cache_control="max-age=0") as index:
        config = pipconf.IndexConfig(index_urls=(index.url,), timeout=10, retries=0)
        assert indexclient.Client(config, store).versions("demo") == [Version("1.0")]
    offline = indexclient.Client(config, store)
    assert offline.versions("demo") == [Version("1.0")]
    assert offline.asked.stale == 1 and offline.asked.requests == 0
    with pytest.raises(remote.Unreachable):
        indexclient.Client(config, store, refresh=True).versions("demo")
