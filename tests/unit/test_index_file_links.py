"""`file://` only from local indexes (patcher/wheels/listing.py's foreign_link, indexclient's
ForeignLink, remote.Client.open): a project page served over http(s) that links a wheel to
`file:///...` would have root read that file of its own machine as the wheel (pip follows
such a link). Against a real index on 127.0.0.1 (tests/support/rangeindex.py) whose page
links the release to a local file: first the plain mechanism reads it, then vpatch refuses,
and a local (file://) index still links to files on disk."""

from __future__ import annotations

import hashlib
import urllib.request
from pathlib import Path

import pytest
from packaging.version import Version

from patcher.wheels import indexclient, listing, pipconf, remote
from tests.support import rangeindex, wheellab


def _planted(tmp_path: Path) -> Path:
    """A wheel on this machine (in a directory of its own, as a file root can read): the
    index lists it under its name and sha256, and its page links it by `file://`."""
    local = tmp_path / "local"
    local.mkdir()
    return wheellab.fake_wheel(local, "demo", "1.0", {"demo/__init__.py": b"SECRET = 1\n"})


@pytest.mark.parametrize("json_pages", [False, True])
def test_a_remote_pages_file_link_is_refused(tmp_path: Path, json_pages: bool) -> None:
    local = _planted(tmp_path)
    with rangeindex.serve([local]) as index:
        index.hrefs[local.name] = local.as_uri()
        accept = remote.ACCEPT if json_pages else "text/html"
        with urllib.request.urlopen(
            urllib.request.Request(index.url + "demo/", headers={"Accept": accept})
        ) as resp:
            body, ctype, base = resp.read(), resp.headers["Content-Type"], resp.geturl()

        # the plain mechanism: the page parses to the local file, and urllib (pip's too)
        # opens a file:// URL as readily as an http one
        [listed] = listing.parse_page(body, ctype, base)
        assert listed.url == local.as_uri()
        assert urllib.request.build_opener().open(listed.url).read() == local.read_bytes()

        # vpatch: the page is refused, naming the link; nothing is copied
        config = pipconf.IndexConfig(index_urls=(index.url,), timeout=10, retries=0)
        client = indexclient.Client(config, tmp_path / "store")
        dest = tmp_path / "dest"
        dest.mkdir()
        with pytest.raises(indexclient.ForeignLink) as got:
            client.download("demo", Version("1.0"), dest)
        assert got.value.message == (
            f"{index.url}demo/ links {local.name} to {local.as_uri()}: a page served over "
            "http(s) may link only to http(s) files; refused"
        )
        assert list(dest.iterdir()) == []
        with pytest.raises(indexclient.ForeignLink):  # a kept page is checked as well
            client.versions("demo")

        # the ranged path reads the page itself: its client opens no file:// URL
        with pytest.raises(remote.NoRanges, match="not an http\\(s\\) URL; refused"):
            remote.open_ranged(config, "demo", Version("1.0"), remote.Moved())


def test_a_local_index_still_links_to_files_on_disk(tmp_path: Path) -> None:
    local = _planted(tmp_path)
    project = tmp_path / "simple" / "demo"
    project.mkdir(parents=True)
    sha = hashlib.sha256(local.read_bytes()).hexdigest()
    (project / "index.html").write_text(f'<a href="{local.as_uri()}#sha256={sha}">{local.name}</a>')
    assert listing.foreign_link((tmp_path / "simple").as_uri(), []) is None
    config = pipconf.IndexConfig(
        file_indexes=((tmp_path / "simple").as_uri(),), local_dirs=(tmp_path / "simple",)
    )
    client = indexclient.Client(config, tmp_path / "store")
    dest = tmp_path / "dest"
    dest.mkdir()
    got = client.download("demo", Version("1.0"), dest)
    assert got.read_bytes() == local.read_bytes()


@pytest.mark.parametrize(
    ("page", "link", "refused"),
    [
        ("https://idx/simple/demo/", "https://files/demo.whl", False),
        ("https://idx/simple/demo/", "http://files/demo.whl", False),
        ("https://idx/simple/demo/", "file:///root/demo.whl", True),
        ("http://idx/simple/demo/", "ftp://files/demo.whl", True),
        ("http://idx/simple/demo/", "data:,x", True),
        ("file:///srv/simple/demo/", "file:///srv/files/demo.whl", False),
    ],
)
def test_which_links_a_page_may_have(page: str, link: str, refused: bool) -> None:
    files = [listing.File("demo-1.0-py3-none-any.whl", link)]
    assert (listing.foreign_link(page, files) is not None) == refused
