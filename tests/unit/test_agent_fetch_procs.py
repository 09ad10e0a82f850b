"""The agent's `fetch` (URL on the host) and `procs` (restart required) modules, in-process.

Both are stdlib-only agent modules, so they are imported straight from patcher.agent here; the
end-to-end paths (CLI -> transport -> agent) are in tests/integration/test_verify_truth.py.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from patcher.agent import fetch, procs

BODY = b"# TYPE up gauge\nup 1.0\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path in ("/trickle", "/trickle-headers"):
            self._trickle()
            return
        if self.path == "/login":  # not Prometheus, with something that must not be echoed
            body = b"<html>SECRET-TOKEN-123 please log in</html>\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/badstatus":
            self.wfile.write(b"SECRET-TOKEN-123 not http at all\r\n\r\n")
            return
        if self.path == "/slow":
            time.sleep(2)
        if self.path == "/ftp":
            self.send_response(302)
            self.send_header("Location", "ftp://example.invalid/metrics")
            self.end_headers()
            return
        if self.path == "/hop":
            self.send_response(302)
            self.send_header("Location", "/metrics")
            self.end_headers()
            return
        if self.path not in ("/metrics", "/slow", "/big"):
            self.send_error(404)
            return
        body = BODY * (1000 if self.path == "/big" else 1)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # /slow: the client gave up first, as the test wants

    def log_message(self, *args: object) -> None:
        pass

    def _trickle(self) -> None:
        """One byte every 0.5 s, each read well within a per-read timeout: 10 s in all."""
        head = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 20\r\n\r\n"
        try:
            if self.path == "/trickle-headers":
                for i in range(len(head)):
                    self.wfile.write(head[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.5)
            else:
                self.wfile.write(head)
            for _ in range(20):
                self.wfile.write(b"#")
                self.wfile.flush()
                time.sleep(0.5)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_fetch_ok_and_redirect_within_http(base_url: str) -> None:
    got = fetch.fetch(base_url + "/metrics")
    assert got["status"] == 200 and got["text"] == BODY.decode() and "error" not in got
    assert fetch.fetch(base_url + "/hop")["text"] == BODY.decode()


def test_fetch_ignores_proxy_environment(base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`localhost` must mean the host itself, never a proxy's idea of it."""
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert fetch.fetch(base_url + "/metrics")["text"] == BODY.decode()


@pytest.mark.parametrize(
    ("path", "kwargs", "error"),
    [
        ("/nope", {}, "HTTP 404 Not Found"),
        ("/slow", {"timeout": 0.3}, "timed out after 0.3s"),
        ("/big", {"max_bytes": 1000}, "answer is larger than 1000 bytes"),
        ("/ftp", {}, "redirected to a refused URL"),
    ],
)
def test_fetch_failures_are_answers(
    base_url: str, path: str, kwargs: dict[str, float], error: str
) -> None:
    got = fetch.fetch(base_url + path, **kwargs)  # type: ignore[arg-type]
    assert error in got["error"] and "text" not in got


@pytest.mark.parametrize("path", ["/trickle", "/trickle-headers"])
def test_fetch_timeout_is_for_the_whole_fetch(base_url: str, path: str) -> None:
    """--timeout 2 against a server that sends a byte every 0.5 s: each read is quick, so a
    per-read timeout never fired and the fetch took as long as the server liked (then it would
    answer the whole body: the server does send it all, 10 s later)."""
    got = fetch.fetch(base_url + path, timeout=2)
    assert got["error"] == "timed out after 2s" and "text" not in got, got


def test_fetch_errors_quote_nothing_the_server_sent(base_url: str) -> None:
    from patcher.serving import metrics
    from patcher.serving.metrics import Scrape

    bad = fetch.fetch(base_url + "/badstatus")
    assert "error" in bad and "SECRET" not in bad["error"], bad
    page = fetch.fetch(base_url + "/login")
    scrape = Scrape(base_url + "/login", page["text"], None, page["seconds"])
    pr = metrics.probe(scrape, None, None, loaded=True)
    assert not pr.ok and "did not serve Prometheus text" in pr.detail
    assert "SECRET" not in pr.detail and "html" not in pr.detail, pr.detail


def test_fetch_unreachable() -> None:
    got = fetch.fetch("http://127.0.0.1:9/metrics", timeout=2)
    assert got["error"] == "connection failed: Connection refused"


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://h/x", "localhost:8000/metrics", "http://", "data:,x"]
)
def test_fetch_refuses_other_schemes(url: str) -> None:
    with pytest.raises(fetch.BadURL):
        fetch.fetch(url)


# ---------------------------------------------------------------------------------------------
# procs: run in this interpreter, so "the environment" is the .venv running pytest.

_IDLE = "import sys; print('ready', flush=True); sys.stdin.read()"


class _Child:
    def __init__(self, argv: list[str], **kw: object) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            **kw,  # type: ignore[call-overload]
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"
        self.pid = self.proc.pid

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def children() -> Iterator[list[_Child]]:
    made: list[_Child] = []
    yield made
    for c in made:
        c.stop()


def _pids(found: list[dict[str, object]]) -> set[object]:
    return {p["pid"] for p in found}


def test_scan_finds_this_envs_processes_started_before(children: list[_Child]) -> None:
    venv_bin = Path(sys.executable).parent
    by_path = _Child([sys.executable, "-c", _IDLE])
    relative = _Child(
        ["./" + Path(sys.executable).name, "-c", _IDLE], cwd=venv_bin, executable=sys.executable
    )
    on_path = _Child(
        [Path(sys.executable).name, "-c", _IDLE],
        executable=sys.executable,
        env={**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    base = _Child([os.path.realpath(sys.executable), "-c", _IDLE])  # same binary, other env
    children.extend([by_path, relative, on_path, base])
    time.sleep(0.05)  # /proc start times have 10 ms resolution
    cut = procs.now()
    time.sleep(0.05)
    later = _Child([sys.executable, "-c", _IDLE])
    children.append(later)

    found = procs.scan(cut)
    pids = _pids(found)
    assert {by_path.pid, relative.pid, on_path.pid} <= pids
    assert base.pid not in pids and later.pid not in pids
    assert os.getpid() not in pids  # the scanner itself
    assert later.pid in _pids(procs.scan(procs.now()))
    entry = next(p for p in found if p["pid"] == by_path.pid)
    assert entry["cmdline"] == f"{sys.executable} -c {_IDLE}"
    assert str(entry["started"]).endswith("Z")


def test_scan_is_empty_without_a_clock() -> None:
    assert procs.scan(-1.0) == []


def test_from_wall_matches_now() -> None:
    assert abs(procs.from_wall(time.time()) - procs.now()) < 0.05


def test_maps_site_matches_the_path_column_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mapped file under a site dir counts; the site dir's name inside another path, in a
    file name with a space, or only as a prefix of a sibling directory's name does not."""
    site = "/srv/env/lib/python3.11/site-packages/"
    lines = {
        "hit": f"7f00-7f01 r-xp 00000000 08:01 42    {site}torch/_C.so\n",
        "inside": f"7f00-7f01 r-xp 00000000 08:01 42    /other{site}x.so\n",
        "spaced": f"7f00-7f01 r-xp 00000000 08:01 42    /tmp/a {site}x.so\n",
        "sibling": f"7f00-7f01 r-xp 00000000 08:01 42    {site.rstrip('/')}-old/x.so\n",
        "anon": "7f00-7f01 rw-p 00000000 00:00 0 \n",
    }
    for name, want in (("hit", True), ("inside", False), ("spaced", False), ("sibling", False)):
        body = lines["anon"] + lines[name] + lines["anon"]
        monkeypatch.setattr(procs, "_read", lambda path, body=body: body.encode())
        assert procs._maps_site(1, ["/elsewhere/", site]) is want, name
    last = (lines["anon"] * 3 + lines["hit"]).rstrip("\n")  # the last line has no newline
    monkeypatch.setattr(procs, "_read", lambda path: last.encode())
    assert procs._maps_site(1, [site])


def test_scan_finds_another_envs_process_that_maps_this_envs_extension(
    children: list[_Child],
) -> None:
    """The base interpreter (another env by argv[0]) that loaded an extension module from
    this env's site-packages runs this env's code: found through /proc/PID/maps."""
    site = next(d for d in procs.site_dirs() if list(Path(d).glob("pydantic_core/*.so")))
    code = f"import sys; sys.path.insert(0, {site!r}); import pydantic_core._pydantic_core; "
    mapped = _Child([os.path.realpath(sys.executable), "-c", code + _IDLE])
    children.append(mapped)
    time.sleep(0.05)
    assert mapped.pid in _pids(procs.scan(procs.now()))


def test_maps_are_not_read_where_the_process_cannot_see_this_site(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In another mount namespace, a maps hit counts only where the process's SITE is this
    very directory: where its view has no such directory (or another one), the maps (the
    scan's most expensive read) are not read at all; where it is ours, they are."""
    site = str(tmp_path / "site-packages") + "/"
    os.mkdir(site)
    other = tmp_path / "view"
    (other / tmp_path.relative_to("/") / "site-packages").mkdir(parents=True)  # not ours
    read: list[str] = []
    hit = f"7f00-7f01 r-xp 00000000 08:01 42    {site}torch/_C.so\n".encode()
    monkeypatch.setattr(procs, "_read", lambda path: read.append(path) or hit)
    assert procs._maps_site(7, [site], str(tmp_path / "missing")) is False
    assert procs._maps_site(7, [site], str(other)) is False
    assert read == []
    assert procs._maps_site(7, [site], "/") is True  # "/" + SITE: the very directory
    assert read == ["/proc/7/maps"]


def test_scan_in_another_mount_namespace_goes_by_the_directory_not_its_name(
    children: list[_Child], tmp_path: Path
) -> None:
    """Two base-interpreter processes in mount namespaces of their own load the extension at
    the path of this env's site-packages: one sees this very directory there (listed), the
    other a copy bind-mounted over that path (the same name in its maps, another directory:
    not listed, and its maps need not be read to know it)."""
    site = next(d for d in procs.site_dirs() if list(Path(d).glob("pydantic_core/*.so")))
    copy = tmp_path / "site-copy"
    shutil.copytree(Path(site) / "pydantic_core", copy / "pydantic_core")
    code = f"import sys; sys.path.insert(0, {site!r}); import pydantic_core._pydantic_core; "
    python = os.path.realpath(sys.executable)
    unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    same = _Child([*unshare, 'exec "$0" -c "$1"', python, code + _IDLE])
    remount = 'mount --bind "$2" "$3" && exec "$0" -c "$1"'
    other = _Child([*unshare, remount, python, code + _IDLE, str(copy), site])
    children.extend([same, other])
    assert procs._mnt_ns(str(same.pid)) != procs._mnt_ns("self")
    assert f" {site}pydantic_core/" in Path(f"/proc/{other.pid}/maps").read_text()
    time.sleep(0.05)
    found = _pids(procs.scan(procs.now()))
    assert same.pid in found and other.pid not in found
