"""tests/support/users.py: the labs' real users are removed only by the block that made them,
and a name that was already a user is used and left as it was."""

from __future__ import annotations

import pwd

import pytest

from tests.support.users import lab_user


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_a_made_user_is_removed_with_its_home_and_runs_as_itself() -> None:
    with lab_user("vpu", home=True) as u:
        assert exists(u.name) and u.home.is_dir() and u.home.stat().st_uid == u.uid
        assert u.home.stat().st_mode & 0o777 == 0o755
        assert u.run("id", "-u").stdout.decode().strip() == str(u.uid)
        assert u.run("id", "-G").stdout.decode().split() == [str(u.gid)]
    assert not exists(u.name) and not u.home.exists()


def test_a_name_already_taken_is_used_and_never_deleted() -> None:
    with lab_user("vpu") as outer:
        with lab_user(name=outer.name, home=True) as again:  # created again: it exists
            assert (again.uid, again.gid) == (outer.uid, outer.gid)
        assert exists(outer.name)  # the inner block did not make it, so it kept it
        with pytest.raises(RuntimeError):
            with lab_user(name="-bad name"):
                pass
    assert not exists(outer.name)
