"""The pure parts of privilege separation (patcher/agent/privsep.py): the layout read from
pyvenv.cfg, and who the agent works as, from lstat facts."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from patcher.agent import privsep

if TYPE_CHECKING:
    from patcher.agent.closure import Fact

DIR, FILE, LINK = stat.S_IFDIR | 0o755, stat.S_IFREG | 0o644, stat.S_IFLNK | 0o777


def test_pyvenv_cfg_is_read_as_site_reads_it() -> None:
    text = (
        "# made by venv\n"
        "home = /usr/bin\n"
        "Include-System-Site-Packages = true\n"
        "version = 3.11.2\n"
        "executable = /usr/bin/python3.11\n"
        "command = /usr/bin/python3 -m venv --system-site-packages /srv/env\n"
        "junk line\n"
        "home = /evil\n"  # the first one counts
    )
    cfg = privsep.parse_pyvenv(text)
    assert cfg["home"] == "/usr/bin"
    assert cfg["include-system-site-packages"] == "true"
    assert cfg["version"] == "3.11.2"
    assert cfg["command"].endswith("--system-site-packages /srv/env")  # split at the first =
    assert "junk line" not in cfg


def test_prefix_is_pyvenv_cfgs_dir_else_the_installations() -> None:
    venv = privsep.env_prefix("/srv/env/bin/python", lambda d: d == "/srv/env")
    assert venv == "/srv/env"
    assert privsep.env_prefix("/opt/x/python", lambda d: d == "/opt/x") == "/opt/x"
    assert privsep.env_prefix("/nonexistent/bin/python3", lambda d: False) == "/nonexistent"


def chain(*items: tuple[str, int, int]) -> list[Fact]:
    return [(p, uid, 0, mode, None, False) for p, uid, mode in items]


ROOT_ENV = chain(
    ("/", 0, DIR),
    ("/opt", 0, DIR),
    ("/opt/env", 0, DIR),
    ("/opt/env/bin/python", 0, LINK),
    ("/usr/bin/python3.11", 0, FILE | 0o111),
)


def test_not_root_never_drops() -> None:
    assert privsep.decide(1000, chain(("/home/u/env", 1000, DIR))) is None


def test_root_owned_env_stays_root() -> None:
    assert privsep.decide(0, ROOT_ENV) is None


def test_any_component_of_another_user_makes_it_the_owner() -> None:
    """The venv's bin/python link, or any directory above it: owning a directory is owning
    what is below it."""
    cfg: Fact = ("/opt/env/pyvenv.cfg", 1001, 1001, FILE, None, False)
    assert privsep.decide(0, [*ROOT_ENV, cfg]) == 1001
    home = chain(("/", 0, DIR), ("/home/u", 1001, DIR), ("/home/u/env", 0, DIR))
    assert privsep.decide(0, home) == 1001


def test_two_owners_are_refused() -> None:
    facts = chain(("/", 0, DIR), ("/home/a", 1001, DIR), ("/home/a/env", 1002, DIR))
    with pytest.raises(privsep.Refusal, match="more than one user: uid 1001: /home/a; uid 1002"):
        privsep.decide(0, facts)


def test_run_as_is_the_operators_choice() -> None:
    facts = chain(("/", 0, DIR), ("/home/a", 1001, DIR), ("/home/a/env", 1002, DIR))
    assert privsep.decide(0, facts, run_as=1002) == 1002
    assert privsep.decide(0, ROOT_ENV, run_as=0) is None


NO_SUCH_GID = 54321  # no group of this host: its members cannot be told


@pytest.mark.parametrize(
    ("mode", "gid", "refused"),
    [
        (DIR | 0o777, 0, True),  # others may write: whoever they are owns it
        (DIR | 0o775, NO_SUCH_GID, True),  # a group whose members cannot be told
        (DIR | 0o775, 0, False),  # root's group, whose only member is root here
        (DIR | 0o1777, 0, False),  # sticky, like /tmp: entries stay their owners'
        (LINK, NO_SUCH_GID, False),  # a link's mode means nothing
    ],
)
def test_root_owned_but_writable_by_others(mode: int, gid: int, refused: bool) -> None:
    facts = [*ROOT_ENV, ("/opt/env/lib", 0, gid, mode, None, False)]
    if refused:
        with pytest.raises(privsep.Refusal, match="can be changed by"):
            privsep.decide(0, facts)
        assert "writable by" in privsep.trusted_problem(facts)
    else:
        assert privsep.decide(0, facts) is None
        assert privsep.trusted_problem(facts) == ""


def test_trusted_interpreter_must_be_roots() -> None:
    assert privsep.trusted_problem(ROOT_ENV) == ""
    bad = [*ROOT_ENV, ("/home/u/python3", 1001, 1001, FILE, None, False)]
    assert privsep.trusted_problem(bad) == "/home/u/python3 is owned by uid 1001, not root"


def test_the_version_whose_standard_library_is_walked() -> None:
    """pyvenv.cfg's `version` (or uv's `version_info`), else the interpreter's own name,
    picks the one `lib/pythonX.Y` of a `home` that holds several; unknown: all of them."""
    assert [privsep._version(t) for t in ("3.11.2", "python3.12", "3.13.0rc1")] == [
        "3.11",
        "3.12",
        "3.13",
    ]
    assert privsep._version("python3") == privsep._version("") == ""


def test_stdlib_is_found_as_getpath_finds_it(tmp_path: Path) -> None:
    from patcher.agent import closurefacts

    for v in ("3.11", "3.12"):
        (tmp_path / "lib" / f"python{v}").mkdir(parents=True)
        (tmp_path / "lib" / f"python{v}" / "os.py").write_text("")
    (tmp_path / "bin").mkdir()
    found = closurefacts.stdlib_dirs(str(tmp_path / "bin"), "3.12")
    assert found == [str(tmp_path / "lib" / "python3.12")]
    assert len(closurefacts.stdlib_dirs(str(tmp_path / "bin"))) == 2


def test_run_as_names_a_user_and_is_not_dropped_through_ray() -> None:
    """--run-as is checked before any host is contacted: a user name or a uid; --ray starts
    agents by an argv of its own that does not carry it, so the two are refused together."""
    from patcher.commands import _targets
    from patcher.errors import UsageError

    assert _targets._run_as("svc-vllm", False) == "svc-vllm"
    assert _targets._run_as("1001", False) == "1001"
    assert _targets._run_as("", True) == ""
    assert _targets._run_as("Svc_1", False) == "Svc_1"
    for bad in ("svc;id", "-x", "a b", "x" * 40):
        with pytest.raises(UsageError, match="is not a user name or uid"):
            _targets._run_as(bad, False)
    with pytest.raises(UsageError, match="not passed to agents started through --ray"):
        _targets._run_as("svc", True)
