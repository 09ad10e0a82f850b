"""A real package index on 127.0.0.1 for the ranged wheel reads: PEP 503 simple pages (HTML,
or PEP 691 JSON when asked) listing wheels with their sha256, the wheels served with single
`Range:` requests answered 206 (RFC 9110), and every body byte it sends counted.

`serve(wheels, ranges=False)` is an index whose file server ignores `Range` (answers 200 with
the whole file); `lie=True` answers a suffix range with the file's first bytes and any other
range with the bytes one further on (its Content-Range says which); `whole_tail=True` answers a
suffix range 206 with the whole file (`bytes 0-(N-1)/N`, a hostile index's way to make a client
read N bytes for the few it asked); project pages carry an ETag (a matching If-None-Match is
answered 304, listed in `Index.not_modified`) and `cache_control` as their Cache-Control;
`auth=(user, password)`
makes every path ask for HTTP Basic credentials; `Index.hrefs` links a wheel's name to another
URL (a hostile index's `file://` link to a file of the client's machine). The server runs in
a thread of the test's process; the test reads `Index.sent` afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
CHUNK = 1 << 20


@dataclass
class Index:
    """What the server holds and what it did."""

    wheels: dict[str, Path]  # file name -> path
    ranges: bool = True
    auth: tuple[str, str] | None = None
    lie: bool = False  # answer a range with the bytes one further on (and say so)
    whole_tail: bool = False  # answer a suffix range with the whole file (and say so)
    cache_control: str | None = None  # the project pages' Cache-Control header, if any
    not_modified: list[str] = field(default_factory=list)  # pages answered 304
    failing: int = 0  # answer this many project page requests 503 first
    garbled: bool = False  # project pages are not JSON though they say so
    hrefs: dict[str, str] = field(default_factory=dict)  # file name -> the link pages give it
    url: str = ""
    sent: int = 0  # body bytes written to clients
    requests: list[str] = field(default_factory=list)  # "GET /path Range" per request
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, n: int, line: str | None = None) -> None:
        with self.lock:
            self.sent += n
            if line is not None:
                self.requests.append(line)

    def reset(self) -> None:
        with self.lock:
            self.sent = 0
            self.requests.clear()
            self.not_modified.clear()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _handler(index: Index, hashes: dict[str, str]) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return None

        def _send(self, code: int, body: bytes, ctype: str, extra: dict[str, str]) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
                index.count(len(body))

        def _authorised(self) -> bool:
            if index.auth is None:
                return True
            want = base64.b64encode(f"{index.auth[0]}:{index.auth[1]}".encode()).decode()
            if self.headers.get("Authorization") == f"Basic {want}":
                return True
            self._send(401, b"", "text/plain", {"WWW-Authenticate": 'Basic realm="index"'})
            return False

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            index.count(0, f"{self.command} {self.path} {self.headers.get('Range', '')}".strip())
            if not self._authorised():
                return
            parts = self.path.split("?")[0].strip("/").split("/")
            if parts[:1] == ["simple"] and len(parts) == 2:
                return self._project(parts[1])
            if parts[:1] == ["files"] and len(parts) == 2 and parts[1] in index.wheels:
                return self._file(index.wheels[parts[1]])
            return self._send(404, b"not found", "text/plain", {})

        def _project(self, name: str) -> None:
            def _href(f: str) -> str:  # the wheel's own file, or what the test links it to
                return index.hrefs.get(f, f"../../files/{f}")

            files = [
                f for f in index.wheels if parse_wheel_filename(f)[0] == canonicalize_name(name)
            ]
            if not files:
                return self._send(404, b"no such project", "text/plain", {})
            if "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
                doc = {
                    "meta": {"api-version": "1.0"},
                    "name": name,
                    "files": [
                        {"filename": f, "url": _href(f), "hashes": {"sha256": hashes[f]}}
                        for f in files
                    ],
                }
                ctype = "application/vnd.pypi.simple.v1+json"
                return self._page(json.dumps(doc).encode(), ctype)
            links = "".join(f'<a href="{_href(f)}#sha256={hashes[f]}">{f}</a><br/>' for f in files)
            self._page(f"<html><body>{links}</body></html>".encode(), "text/html")

        def _page(self, body: bytes, ctype: str) -> None:
            """A project page with its ETag (and Cache-Control when the test set one); 304
            to a request whose If-None-Match names it."""
            with index.lock:
                fail = index.failing > 0
                index.failing -= fail
            if fail:
                return self._send(503, b"busy", "text/plain", {})
            if index.garbled:
                body, ctype = b"{not json", "application/vnd.pypi.simple.v1+json"
            etag = '"' + hashlib.sha256(body + ctype.encode()).hexdigest()[:16] + '"'
            extra = {"ETag": etag}
            if index.cache_control is not None:
                extra["Cache-Control"] = index.cache_control
            if self.headers.get("If-None-Match") == etag:
                with index.lock:
                    index.not_modified.append(self.path)
                self.send_response(304)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                return
            self._send(200, body, ctype, extra)

        def _file(self, path: Path) -> None:
            size = path.stat().st_size
            m = _RANGE.match(self.headers.get("Range", "").strip())
            start, end = 0, size - 1
            code = 200
            if index.ranges and m is not None and (m.group(1) or m.group(2)):
                if m.group(1):
                    start = int(m.group(1))
                    end = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
                else:
                    start = max(0, size - int(m.group(2)))
                if start > end or start >= size:
                    return self._send(416, b"", "text/plain", {"Content-Range": f"bytes */{size}"})
                code = 206
                if index.lie:  # a suffix range read as a prefix; any other range one further on
                    start, end = (0, end - start) if not m.group(1) else (start + 1, end)
                if index.whole_tail and not m.group(1):
                    start, end = 0, size - 1
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start + 1))
            if index.ranges:
                self.send_header("Accept-Ranges", "bytes")
            if code == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            if self.command == "HEAD":
                return
            with path.open("rb") as fh:
                fh.seek(start)
                left = end - start + 1
                try:
                    while left:
                        chunk = fh.read(min(CHUNK, left))
                        self.wfile.write(chunk)
                        index.count(len(chunk))
                        left -= len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

    return Handler


@contextlib.contextmanager
def serve(
    wheels: Sequence[Path],
    ranges: bool = True,
    auth: tuple[str, str] | None = None,
    lie: bool = False,
    whole_tail: bool = False,
    cache_control: str | None = None,
) -> Iterator[Index]:
    """An index of these wheels on 127.0.0.1 (a free port); yields it, `url` its /simple/."""
    index = Index({w.name: w for w in wheels}, ranges, auth, lie, whole_tail=whole_tail)
    index.cache_control = cache_control
    hashes = {w.name: _sha256(w) for w in wheels}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(index, hashes))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    index.url = f"http://{host!s}:{port}/simple/"
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def pip_env(index: Index, user_info: str = "") -> dict[str, str]:
    """pip's configuration for the test: this index only (the user's own switched off)."""
    url = index.url.replace("http://", f"http://{user_info}@" if user_info else "http://")
    return {
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_INDEX_URL": url,
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
    }
