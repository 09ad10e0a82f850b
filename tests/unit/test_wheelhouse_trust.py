"""Wheelhouse wheels (patcher/wheels/wheelhouse.py, trust.py): names parsed strictly, a fixed
order among several wheels of one release, and only wheels that the invoking user or root
owns, in a directory of the same kind, supply pristine bytes (a real second user plants
them; real wheels, real files)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from patcher.wheels import wheelhouse
from patcher.wheels.store import Store
from patcher.wheels.trust import UnsafeStore
from tests.support.stranger import Stranger, shared_dir, stranger
from tests.support.wheellab import fake_wheel

V = Version("1.0")
GOOD = {"demo/__init__.py": b"SAFE = True\n"}
EVIL = {"demo/__init__.py": b"SAFE = True  # and a backdoor the diff would not show\n"}


@pytest.fixture
def store_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VPATCH_WHEEL_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("VPATCH_WHEELHOUSE", "")
    monkeypatch.setenv("VPATCH_MATRIX_WHEELS", "")
    return tmp_path


@pytest.fixture
def user() -> Iterator[Stranger]:
    with stranger() as u:
        yield u


def _as_build(wheel: Path, build: str) -> Path:
    """The same wheel under a name with a build tag (`demo-1.0-<build>-py3-none-any.whl`)."""
    return wheel.rename(wheel.with_name(f"demo-1.0-{build}-py3-none-any.whl"))


def _read(house: Path) -> bytes:
    store = Store.for_run([house])
    try:
        return store.wheel("demo", V).read_member("demo/__init__.py")
    finally:
        store.close()


def test_a_look_alike_of_another_user_is_refused(store_env: Path, user: Stranger) -> None:
    """Another user's `demo-1.0-0-py3-none-any.whl` beside the genuine wheel: it sorted first
    and was used (mode 0644 is "not writable by others"); now it is refused aloud."""
    house = store_env / "house"
    house.mkdir()
    fake_wheel(house, "demo", "1.0", GOOD)
    (store_env / "evil").mkdir()
    evil = _as_build(fake_wheel(store_env / "evil", "demo", "1.0", EVIL), "0")
    shutil.copy(evil, house / evil.name)
    os.chown(house / evil.name, user.uid, user.gid)
    with pytest.raises(UnsafeStore, match=f"owned by uid {user.uid}"):
        _read(house)
    os.unlink(house / evil.name)
    assert _read(house) == GOOD["demo/__init__.py"]


def test_a_root_wheel_in_another_users_directory_is_refused(
    store_env: Path, user: Stranger
) -> None:
    house = store_env / "theirs"
    house.mkdir()
    fake_wheel(house, "demo", "1.0", GOOD)
    os.chown(house, user.uid, user.gid)
    with pytest.raises(UnsafeStore, match=f"its directory .* owned by uid {user.uid}"):
        _read(house)


def test_a_wheel_in_a_shared_sticky_dir_is_refused(store_env: Path) -> None:
    with shared_dir() as house:
        fake_wheel(house, "demo", "1.0", GOOD)
        with pytest.raises(UnsafeStore, match="writable by group or others"):
            _read(house)


def test_a_name_with_bytes_after_the_build_digit_is_refused(store_env: Path) -> None:
    house = store_env / "house"
    house.mkdir()
    _as_build(fake_wheel(house, "demo", "1.0", EVIL), "0\x1b]0;pwned\x07")
    with pytest.raises(UnsafeStore, match="not a wheel file name") as exc:
        _read(house)
    assert "\x1b" not in exc.value.message and "\x07" not in exc.value.message


def test_the_order_among_wheels_of_one_release_is_pips(tmp_path: Path) -> None:
    for build in ("", "2", "10", "10b"):
        d = tmp_path / f"w{build}"
        d.mkdir()
        w = fake_wheel(d, "demo", "1.0", GOOD)
        w.rename(tmp_path / (w.name if not build else f"demo-1.0-{build}-py3-none-any.whl"))
    (tmp_path / "demo-1.0-py2.py3-none-any.whl").write_bytes(b"")
    got = [p.name for p in wheelhouse.find([tmp_path], "demo", V)]
    assert got == [
        "demo-1.0-10b-py3-none-any.whl",
        "demo-1.0-10-py3-none-any.whl",
        "demo-1.0-2-py3-none-any.whl",
        "demo-1.0-py2.py3-none-any.whl",
        "demo-1.0-py3-none-any.whl",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "demo-1.0-0\x1b[31m-py3-none-any.whl",
        "demo-1.0-py3-none-any\x07.whl",
        "demo-1.0-py3-none-any.whl\n",
        "demo-1.0.whl",
    ],
)
def test_strict_names(name: str) -> None:
    assert wheelhouse.parse(name) is None
    assert wheelhouse.parse("demo-1.0+local.x-1_rc-cp311-cp311-manylinux_2_17_x86_64.whl")
