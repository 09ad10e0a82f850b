"""The ranged path's pure parts: pip's settings read from `pip config list`, the index's
project page (PEP 503 HTML, PEP 691 JSON) and the wheel pip would pick for this interpreter."""

from __future__ import annotations

import json

import pytest
from packaging.tags import sys_tags
from packaging.version import Version

from patcher.wheels import pipconf, remote

SHA = "ab" * 32


def test_pip_settings_env_over_download_over_global() -> None:
    text = (
        "global.index-url='http://127.0.0.1:1/simple'\n"
        "download.index-url='http://127.0.0.1:2/simple'\n"
        "global.extra-index-url='file:///srv/idx http://127.0.0.1:4/simple'\n"
        "global.find-links='/opt/wheels'\n"
        "global.cert='/etc/ssl/ca.pem'\n"
    )
    values = pipconf.parse_config_list(text)
    config = pipconf.decide(values, None)
    assert config.supported and config.cert == "/etc/ssl/ca.pem" and config.timeout == 15.0
    assert config.index_urls == ("http://127.0.0.1:2/simple", "http://127.0.0.1:4/simple")
    assert [str(p) for p in config.local_dirs] == ["/opt/wheels", "/srv/idx"]
    env = pipconf.parse_config_list(text + ":env:.index-url='http://127.0.0.1:3/simple'\n")
    assert pipconf.decide(env, None).index_urls[0] == "http://127.0.0.1:3/simple"
    slow = pipconf.parse_config_list(text + ":env:.default-timeout='180'\n")
    assert pipconf.decide(slow, None).timeout == 180.0


def test_settings_only_pip_honours_leave_the_fetch_to_pip() -> None:
    for extra, why in (
        (":env:.no-index='1'", "no-index"),
        ("global.keyring-provider='subprocess'", "keyring-provider"),
    ):
        values = pipconf.parse_config_list(f"global.index-url='http://127.0.0.1:1/s'\n{extra}\n")
        config = pipconf.decide(values, None)
        assert not config.supported and why in config.why
        assert config.pip_only == (why != "no-index")
    honoured = pipconf.parse_config_list(
        "global.index-url='http://127.0.0.1:1/s'\nglobal.client-cert='/k.pem'\n"
        "install.trusted-host='127.0.0.1 other:8080'\n"
    )
    config = pipconf.decide(honoured, None)
    assert config.supported and config.client_cert == "/k.pem"
    off = {**honoured, ":env:.keyring-provider": "disabled"}  # pip's own "no keyring"
    assert not pipconf.decide(off, None).pip_only
    assert config.trusted_hosts == ("127.0.0.1", "other:8080")
    only_files = pipconf.decide(pipconf.parse_config_list("global.index-url='file:///x'\n"), None)
    assert not only_files.supported and only_files.index_urls == ()
    assert pipconf.decide({}, "https://127.0.0.1/simple").index_urls == (
        "https://127.0.0.1/simple",
    )
    assert not pipconf.decide({}, None).supported  # no index known: pip decides


def _tag() -> str:
    best = next(iter(sys_tags()))
    return f"{best.interpreter}-{best.abi}-{best.platform}"


def test_project_page_html_and_json() -> None:
    html = (
        f'<a href="../../f/demo-1.0-py3-none-any.whl#sha256={SHA}">demo-1.0-py3-none-any.whl</a>'
        '<a href="../../f/demo-1.0.tar.gz#sha256=00">demo-1.0.tar.gz</a>'
        '<a href="../../f/demo-0.9-py3-none-any.whl">demo-0.9-py3-none-any.whl</a>'
        f'<a href="/f/demo-1.1-py3-none-any.whl#sha256={SHA}" data-yanked="">y</a>'
    ).encode()
    got = remote.parse_page(html, "text/html", "http://127.0.0.1:8/simple/demo/")
    assert got == [  # every wheel, as pip weighs them all (the sdist is never a pick)
        remote.Candidate(
            "http://127.0.0.1:8/f/demo-1.0-py3-none-any.whl", "demo-1.0-py3-none-any.whl", SHA
        ),
        remote.Candidate(
            "http://127.0.0.1:8/f/demo-0.9-py3-none-any.whl", "demo-0.9-py3-none-any.whl", ""
        ),
        remote.Candidate(
            "http://127.0.0.1:8/f/demo-1.1-py3-none-any.whl",
            "demo-1.1-py3-none-any.whl",
            SHA,
            yanked=True,
        ),
    ]
    # 0.9 is pip's pick but has no sha256 to check ranges against: none (the whole download
    # checks it); 1.1's only file is yanked and `==1.1` pins it: pip takes it
    assert remote.choose(got, "demo", Version("0.9")) is None
    assert remote.choose(got, "demo", Version("1.1")) == got[2]
    doc = {
        "files": [
            {"filename": "demo-1.0-py3-none-any.whl", "url": "x.whl", "hashes": {"sha256": SHA}},
            {"filename": "demo-1.1-py3-none-any.whl", "url": "y.whl", "hashes": {}},
        ]
    }
    got = remote.parse_page(
        json.dumps(doc).encode(),
        "application/vnd.pypi.simple.v1+json",
        "http://127.0.0.1:8/simple/demo/",
    )
    assert [(c.url, c.sha256) for c in got] == [
        ("http://127.0.0.1:8/simple/demo/x.whl", SHA),
        ("http://127.0.0.1:8/simple/demo/y.whl", ""),
    ]


def test_choose_the_wheel_this_interpreter_installs() -> None:
    here = remote.Candidate("u1", f"demo-1.0-{_tag()}.whl", SHA)
    generic = remote.Candidate("u2", "demo-1.0-py3-none-any.whl", SHA)
    alien = remote.Candidate("u3", "demo-1.0-cp27-cp27m-win32.whl", SHA)
    other = remote.Candidate("u4", "demo-2.0-py3-none-any.whl", SHA)
    assert remote.choose([generic, here, alien, other], "Demo", Version("1.0")) == here
    assert remote.choose([alien, other], "demo", Version("1.0")) is None
    assert remote.choose([generic], "demo", Version("1.0")) == generic


def test_no_index_answering_is_unreachable_one_answering_is_not() -> None:
    """Every configured index refusing the connection is `Unreachable` (the store says so at
    once: pip, with the same configuration, could only fail); one index answering, even with
    no such wheel, is a plain NoRanges (pip then tries as it always did)."""
    import socket

    from packaging.version import Version

    from patcher.wheels import pipconf, remote

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/simple"
        config = pipconf.IndexConfig(index_urls=(closed, closed + "2"), timeout=5)
        client = remote.Client(config, remote.Moved())
        with pytest.raises(remote.Unreachable) as got:
            remote.find(client, config, "click", Version("8.1.7"))
        assert "127.0.0.1" in got.value.message
        pages = {closed.rstrip("/") + "/click/": []}  # this index answered: it lists nothing
        with pytest.raises(remote.NoRanges) as other:
            remote.find(client, config, "click", Version("8.1.7"), pages)
        assert not isinstance(other.value, remote.Unreachable)
