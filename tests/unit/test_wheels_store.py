"""The wheel store's checks and the patched wheel's names, on small wheels made here (no pip)."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from patcher.errors import UsageError
from patcher.wheels import build
from patcher.wheels.store import StderrProgress, Store
from patcher.wheels.trust import UnsafeStore
from patcher.wheels.wheel import CorruptWheel
from tests.support import wheellab

MOD = b"X = 1\n"


def _house(tmp_path: Path) -> Path:
    house = tmp_path / "house"
    house.mkdir()
    wheellab.fake_wheel(house, "demo", "1.0", {"demo/__init__.py": MOD})
    return house


def test_wheelhouse_file_read_and_checked(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", sources=[_house(tmp_path)])
    wheel = store.wheel("demo", Version("1.0"))
    assert wheel.read("demo/__init__.py") == MOD and wheel.read("demo/absent.py") is None
    assert store.stats.wheelhouse == 1 and not (tmp_path / "store").exists()


def test_wheelhouses_belong_to_the_run_that_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs in one process (the tests, an Ansible worker) share nothing: a --wheelhouse
    given to one run's store is not seen by the next run's."""
    monkeypatch.setenv("VPATCH_WHEEL_STORE", str(tmp_path / "store"))
    for var in ("VPATCH_WHEELHOUSE", "VPATCH_MATRIX_WHEELS"):
        monkeypatch.setenv(var, "")
    monkeypatch.setenv("VPATCH_PIP", "false")  # no pip: a release is in a wheelhouse or none
    first = Store.for_run([_house(tmp_path)])
    assert first.file("demo", "1.0", "demo/__init__.py") == MOD
    second = Store.for_run()
    assert second.text("demo", "1.0", "demo/__init__.py") is None
    assert second.stats.wheelhouse == 0 and first.stats.wheelhouse == 1
    with pytest.raises(UsageError, match="--wheelhouse"):
        Store.for_run([tmp_path / "no-such-dir"])


def test_member_not_matching_record_is_refused(tmp_path: Path) -> None:
    house = _house(tmp_path)
    [path] = house.glob("*.whl")
    wheellab.rewrite_wheel(path, "demo/__init__.py", b"X = 2\n", fix_record=False)
    wheel = Store(tmp_path / "store", sources=[house]).wheel("demo", Version("1.0"))
    with pytest.raises(CorruptWheel, match="RECORD"):
        wheel.read("demo/__init__.py")


def test_writable_or_fifo_wheelhouse_entry_is_an_error_not_a_hang(tmp_path: Path) -> None:
    house = _house(tmp_path)
    [path] = house.glob("*.whl")
    path.chmod(0o666)
    with pytest.raises(UnsafeStore, match="writable by group or others"):
        Store(tmp_path / "s", sources=[house]).wheel("demo", Version("1.0"))
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(UnsafeStore, match="not a regular file"):
        Store(tmp_path / "s", sources=[house]).wheel("demo", Version("1.0"))


def test_group_writable_store_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "releases" / "demo").mkdir(parents=True)
    (root / "blobs").mkdir()
    root.chmod(0o777)
    with pytest.raises(UnsafeStore, match="writable by group or others"):
        Store(root, sources=[]).wheel("demo", Version("1.0"))


def test_a_pointer_that_is_not_a_hash_is_dropped(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for d in (root / "releases" / "demo", root / "blobs"):
        d.mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    (root / "releases").chmod(0o700)
    pointer = root / "releases" / "demo" / "1.0.json"
    pointer.write_text('{"sha256": "../../etc/passwd"}')
    pointer.chmod(0o600)
    store = Store(root, sources=[])
    assert store._stored("demo", Version("1.0")) is None
    assert not pointer.exists() and store.stats.refused == 1


def test_baked_versions_and_package_argument() -> None:
    assert build.baked_version(Version("0.16.0"), "abc") == "0.16.0+vpatch.abc"
    assert build.baked_version(Version("2.11.0+cu128"), "abc") == "2.11.0+cu128.vpatch.abc"
    assert build.parse_package("vllm==0.16.0") == ("vllm", Version("0.16.0"))
    for bad in ("vllm", "==1.0", "vllm==x.y"):
        with pytest.raises(UsageError):
            build.parse_package(bad)


def test_baked_wheel_is_a_valid_wheel(tmp_path: Path) -> None:
    """RECORD regenerated, METADATA and dist-info renamed, vpatch.json, members copied."""
    from patcher.specs.model import from_data

    spec = from_data(
        {
            "id": "demo-x",
            "summary": "x is 2",
            "package": "demo",
            "variant": [
                {
                    "versions": ">=1",
                    "file": "demo/__init__.py",
                    "edit": [{"op": "set_value", "target": "X", "value": 2}],
                }
            ],
        }
    )
    wheel = Store(tmp_path / "s", sources=[_house(tmp_path)]).wheel("demo", Version("1.0"))
    baked = build.decide([spec], Version("1.0"), wheel)
    path, _sha = build.write(wheel, "demo", Version("1.0"), baked, tmp_path / "out")
    assert path.name == f"demo-{baked.version}-py3-none-any.whl"
    assert wheellab.record_ok(path) == []
    with zipfile.ZipFile(path) as zf:
        assert zf.read("demo/__init__.py") == b"X = 2\n"
        info = f"demo-{baked.version}.dist-info"
        assert f"Version: {baked.version}".encode() in zf.read(f"{info}/METADATA")
        assert b'"demo-x"' in zf.read(f"{info}/vpatch.json")
        assert not [n for n in zf.namelist() if n.startswith("demo-1.0.dist-info")]


def test_download_goes_into_the_store_once_with_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pip stand-in that reports progress as `--progress-bar raw` does and saves the wheel:
    the wheel lands in blobs/ under its sha256, the pointer names it, a second store (another
    run) reads it without calling pip, and a slow download says so on stderr."""
    made = wheellab.fake_wheel(_house(tmp_path), "demo", "2.0", {"demo/__init__.py": MOD})
    calls = tmp_path / "calls"
    fake = tmp_path / "pip"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$1" >> {calls}\nwhile [ $# -gt 0 ]; do [ "$1" = --dest ] && d="$2"; shift; done\n'
        f'echo "Progress 0 of 10000000"; sleep 1.2; echo "Progress 10000000 of 10000000"\n'
        f'cp {made} "$d/"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("VPATCH_PIP", str(fake))
    root = tmp_path / "store"
    store = Store(root, sources=[], progress=StderrProgress())
    assert store.wheel("demo", Version("2.0")).read("demo/__init__.py") == MOD
    [blob] = (root / "blobs").glob("*.whl")
    assert blob.stem == hashlib.sha256(made.read_bytes()).hexdigest()
    assert "vpatch: downloading demo 2.0 (10 MB)\n" in capsys.readouterr().err
    again = Store(root, sources=[])
    assert again.wheel("demo", Version("2.0")).read("demo/__init__.py") == MOD
    downloads = calls.read_text().split().count("download")  # `config list`: the ranged path's
    assert again.stats.stored == 1 and downloads == 1
