"""pip's configuration read without pip (patcher.wheels.pipfiles) and the index client's pure
decisions (patcher.wheels.listing): the files in pip's order, PIP_* over files, uv's settings
only where pip's say nothing, pip's own default index read from its source; project pages,
the releases pip lists and the wheel it picks, freshness from Cache-Control.

The agreement test runs the dev venv's real pip (`pip config list`) on the same files and
environment: what pip prints is what vpatch reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.tags import sys_tags
from packaging.version import Version

from patcher.wheels import listing, pipconf, pipfiles
from patcher.wheels.listing import File

SHA = "cd" * 32


def _layout(tmp: Path) -> dict[str, str]:
    """A HOME, XDG dirs, a venv prefix and an env file, each with its own pip.conf."""
    (tmp / "xdg-dirs" / "pip").mkdir(parents=True)
    (tmp / "xdg-dirs" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = http://127.0.0.1:1/global\ntimeout = 7\n"
    )
    (tmp / "home" / ".pip").mkdir(parents=True)
    (tmp / "home" / ".pip" / "pip.conf").write_text(
        "[global]\nindex_url = http://127.0.0.1:2/legacy\nfind-links = /srv/legacy\n"
    )
    (tmp / "xdg-home" / "pip").mkdir(parents=True)
    (tmp / "xdg-home" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = http://127.0.0.1:3/user\n"
        "[install]\ntrusted-host = 127.0.0.1\n"
        "[download]\nextra-index-url = http://127.0.0.1:4/dl\n"
        "[freeze]\nindex-url = http://127.0.0.1:9/never\n"
    )
    (tmp / "venv").mkdir()
    (tmp / "venv" / "pip.conf").write_text("[global]\ncert = /etc/ssl/venv.pem\n")
    return {
        "HOME": str(tmp / "home"),
        "XDG_CONFIG_DIRS": str(tmp / "xdg-dirs"),
        "XDG_CONFIG_HOME": str(tmp / "xdg-home"),
        "VIRTUAL_ENV": str(tmp / "venv"),
        "PIP_EXTRA_INDEX_URL": "http://127.0.0.1:5/env",
        "UV_NO_CONFIG": "1",
    }


def test_files_in_pips_order_and_env_over_files(tmp_path: Path) -> None:
    env = _layout(tmp_path)
    values = pipfiles.read(env)
    config = pipconf.decide(values, None)
    assert config.index_urls == ("http://127.0.0.1:3/user", "http://127.0.0.1:5/env")
    assert config.timeout == 7.0 and config.cert == "/etc/ssl/venv.pem"
    assert config.trusted_hosts == ("127.0.0.1",)  # [install]: where the hosts' files came from
    assert [str(p) for p in config.local_dirs] == ["/srv/legacy"]
    assert not any("never" in v for v in values.values())  # [freeze] is not read
    env_file = tmp_path / "only.conf"
    env_file.write_text("[global]\nindex-url = http://127.0.0.1:6/only\n")
    only = pipfiles.read({**env, "PIP_CONFIG_FILE": str(env_file)})
    assert pipconf.setting(only, "index-url") == "http://127.0.0.1:6/only"
    assert pipconf.setting(only, "find-links") is None  # user files skipped, as pip does
    assert pipfiles.read({**env, "PIP_CONFIG_FILE": os.devnull}) == {
        ":env:.extra-index-url": "http://127.0.0.1:5/env",
        ":env:.config-file": os.devnull,
    }


def test_what_pip_config_list_prints_is_what_vpatch_reads(tmp_path: Path) -> None:
    """The real pip on the same files and environment: every global/download/env value it
    prints, vpatch reads the same (install: vpatch's addition; other sections: not read)."""
    env = {**_layout(tmp_path), "PATH": os.environ.get("PATH", "")}
    env["VIRTUAL_ENV"] = sys.prefix  # pip reads its own prefix's pip.conf
    res = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=tmp_path,
    )
    read = (":env:.", "global.", "download.")  # what pip's download reads
    theirs = {k: v for k, v in pipconf.parse_config_list(res.stdout).items() if k.startswith(read)}
    ours = {k: v for k, v in pipfiles.read(env).items() if not k.startswith("install.")}
    assert theirs and ours == theirs


def test_uv_settings_only_where_pip_says_nothing() -> None:
    doc = {
        "index-url": "http://127.0.0.1:1/uv-file",
        "index": [
            {"name": "extra", "url": "http://127.0.0.1:2/uv-extra"},
            {"name": "main", "url": "http://127.0.0.1:3/uv-default", "default": True},
        ],
    }
    values = pipfiles.uv_values({}, doc)
    assert values["uv.index-url"] == "http://127.0.0.1:3/uv-default"
    assert values["uv.extra-index-url"] == "http://127.0.0.1:2/uv-extra"
    env = pipfiles.uv_values({"UV_DEFAULT_INDEX": "http://127.0.0.1:4/d"}, doc)
    assert env["uv.index-url"] == "http://127.0.0.1:4/d"
    named = pipfiles.uv_values({"UV_INDEX": "corp=http://127.0.0.1:5/c"}, {})
    assert named["uv.extra-index-url"] == "http://127.0.0.1:5/c"
    both = {**values, "global.index-url": "http://127.0.0.1:6/pip"}
    assert pipconf.decide(both, None).index_urls[0] == "http://127.0.0.1:6/pip"
    assert pipconf.decide(values, "https://127.0.0.1/default").index_urls[0] == (
        "http://127.0.0.1:3/uv-default"
    )


def test_pips_default_index_is_read_from_its_source_never_run() -> None:
    src = 'PyPI = PackageIndex("https://127.0.0.1/", file_storage_domain="x")\n'
    assert pipfiles.default_index_in(src) == "https://127.0.0.1/simple"
    assert pipfiles.default_index_in("import os\n") is None
    assert pipfiles.default_index_in("def (:\n") is None


def _tag() -> str:
    best = next(iter(sys_tags()))
    return f"{best.interpreter}-{best.abi}-{best.platform}"


def test_page_json_and_html_with_requires_python_and_yanked() -> None:
    doc = {
        "meta": {"api-version": "1.1"},
        "files": [
            {"filename": "demo-1.0.tar.gz", "url": "../f/demo-1.0.tar.gz", "hashes": {}},
            {
                "filename": "demo-2.0-py3-none-any.whl",
                "url": "https://127.0.0.1/f/demo-2.0-py3-none-any.whl",
                "hashes": {"sha256": SHA.upper()},
                "requires-python": ">=3.99",
            },
            {"filename": "demo-1.5-py3-none-any.whl", "url": "x", "yanked": "broken"},
        ],
    }
    files = listing.parse_page(
        json.dumps(doc).encode(),
        "application/vnd.pypi.simple.v1+json",
        "http://127.0.0.1:8/simple/demo/",
    )
    assert files[0] == File("demo-1.0.tar.gz", "http://127.0.0.1:8/simple/f/demo-1.0.tar.gz")
    assert files[1].sha256 == SHA and files[1].requires_python == ">=3.99"
    assert files[2].yanked
    assert listing.versions(files, "Demo") == [Version("1.0")]  # 2.0 needs Python 3.99
    html = (
        '<a href="/f/demo-3.0-py3-none-any.whl#sha256=' + SHA + '" '
        'data-requires-python="&gt;=3.0">demo-3.0-py3-none-any.whl</a>'
        '<a href="/f/demo-3.1-py3-none-win32.whl">x</a>'
        '<a href="/f/demo-4.0rc1-py3-none-any.whl">y</a>'
    ).encode()
    got = listing.parse_page(html, "text/html", "http://127.0.0.1:8/simple/demo/")
    assert got[0].requires_python == ">=3.0" and got[0].sha256 == SHA
    assert listing.versions(got, "demo") == [Version("3.0")]  # win32 only: not here
    assert listing.versions(got, "demo", pre=True) == [Version("3.0"), Version("4.0rc1")]
    assert listing.versions(got, "demo", platforms=["win32"]) == [Version("3.0"), Version("3.1")]


def test_the_wheel_pip_picks() -> None:
    here = File(f"demo-1.0-{_tag()}.whl", "u1")
    generic = File("demo-1.0-py3-none-any.whl", "u2")
    yanked_here = File(f"demo-1.0-{_tag()}.whl", "u3", yanked=True)
    sdist = File("demo-1.0.tar.gz", "u4")
    assert listing.best_wheel([sdist, generic, here], "demo", Version("1.0")) == here
    assert listing.best_wheel([yanked_here, generic], "demo", Version("1.0")) == generic
    assert listing.best_wheel([yanked_here], "demo", Version("1.0")) == yanked_here
    assert listing.best_wheel([sdist], "demo", Version("1.0")) is None


def test_freshness_from_cache_control() -> None:
    assert listing.cache_control_max_age("max-age=600, public") == 600
    assert listing.cache_control_max_age("no-cache") == 0
    assert listing.cache_control_max_age("max-age=0") == 0
    assert listing.cache_control_max_age(None) == listing.DEFAULT_FRESH


def test_a_python_without_pip_still_knows_pips_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """No pip installed anywhere (a uv-managed Python): the pip wheel ensurepip bundles names
    the default index; with none of either, there is no default (the hint asks for one)."""
    monkeypatch.setattr(pipfiles, "_pip_index_module", list)
    bundled = pipfiles._bundled_pip_source()
    if bundled is None:
        pytest.skip("this Python bundles no pip wheel")
    got = pipfiles.pip_default_index()
    assert got is not None and got.startswith("https://") and got.endswith("/simple")
    monkeypatch.setattr(pipfiles, "_bundled_pip_source", lambda: None)
    assert pipfiles.pip_default_index() is None
