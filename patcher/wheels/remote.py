"""Only the needed members of a wheel, over HTTP range requests on pip's configured index.

Capturing one file of vLLM needs ~40 KB of a 485 MB wheel. When pip's index (read from pip's
own configuration, `patcher.wheels.pipconf`) lists the release's wheel with its sha256 and
its file server answers `Range:` requests, `open_ranged` returns a seekable file over that URL
that fetches only the byte ranges read from it: the zip's end-of-central-directory and central
directory, then each member's local header and compressed data, and the dist-info RECORD, the
same way pip's lazy wheel reads metadata. `patcher.wheels.wheel.Wheel` reads it like a file on
disk, so every member is checked against RECORD's sha256 before use.

Anything that does not add up (no http(s) index, no sha256 on the index page, no compatible
wheel, a server that ignores `Range` and answers 200, a `Content-Range` that is not the range
asked for, a length that changes, a 401) raises `NoRanges`: the store then has pip download the
whole wheel, as before. Only stdlib urllib, only the configured index URLs, credentials only from
the index URL itself or ~/.netrc, and sent only to the host they belong to (never on a redirect).
"""

from __future__ import annotations

import base64
import bisect
import io
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlsplit, urlunsplit

from packaging.utils import canonicalize_name
from packaging.version import Version

from patcher.errors import VpatchError
from patcher.wheels import listing, wheelhouse
from patcher.wheels.pipconf import IndexConfig

if TYPE_CHECKING:
    import urllib.request
    import urllib.response

READ_AHEAD = 64 * 1024  # the least a range request fetches (zipfile reads in small pieces)
TAIL = 64 * 1024 + 22  # the zip's end record with the longest comment a zip may have
MAX_PAGE = 64 * 1024 * 1024  # a project page larger than this is not read
ACCEPT = (  # PEP 691 JSON first, PEP 503 HTML otherwise
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
    "text/html;q=0.1"
)
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


class NoRanges(VpatchError):
    """The ranged path cannot be used for this release: pip downloads the whole wheel."""


class Unreachable(NoRanges):
    """No configured index answered at all (refused, no route, no name, timed out): pip,
    reading the same configuration, would find nothing either (the store says so at once)."""


@dataclass(frozen=True)
class Candidate:
    """The release's wheel as the index lists it."""

    url: str
    filename: str
    sha256: str  # "" where the index lists none (pip may still pick it: then no ranges)
    yanked: bool = False
    requires_python: str | None = None


@dataclass
class Moved:
    """Bytes the ranged path received (bodies only) and how many requests it made."""

    bytes: int = 0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, n: int) -> None:
        with self.lock:
            self.bytes += n
            self.requests += 1


# ---------------------------------------------------------------------------------------------
# HTTP, as pip's configuration says


class Client:
    """urllib with pip's CA bundle and proxy, and credentials per host (index URL, netrc)."""

    def __init__(self, config: IndexConfig, moved: Moved | None = None) -> None:
        self.moved = moved or Moved()
        self.timeout = config.timeout  # pip's: an index that hangs fails as pip's would
        self.trusted = {h.split(":")[0] for h in config.trusted_hosts}  # pip's trusted-host
        self.opener = self._opener(config, verify=True)
        self.trusted_opener = self._opener(config, verify=False) if self.trusted else None
        self.index_urls, self.auth = index_urls(config)  # auth: netloc -> (user, password)

    @staticmethod
    def _opener(config: IndexConfig, verify: bool) -> urllib.request.OpenerDirector:
        """urllib with pip's CA bundle (`cert`), client certificate and proxy; `verify=False`
        is pip's trusted-host: TLS without checking the server's certificate."""
        import ssl  # here: a warm run reads kept pages and never loads TLS (~10 ms) or its CAs
        import urllib.request

        context = ssl.create_default_context(cafile=config.cert or None)
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if config.client_cert:
            try:
                context.load_cert_chain(config.client_cert)
            except (OSError, ssl.SSLError) as exc:
                raise NoRanges(f"pip's client-cert {config.client_cert}: {exc}") from None
        handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=context)]
        if config.proxy:
            handlers.append(
                urllib.request.ProxyHandler({"http": config.proxy, "https": config.proxy})
            )
        return urllib.request.build_opener(*handlers)

    def credentials(self, url: str) -> tuple[str, str] | None:
        """(user, password) for this URL's own host: the index URL's, else ~/.netrc's."""
        import netrc

        parts = urlsplit(url)
        netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        if netloc in self.auth:
            return self.auth[netloc]
        try:
            found = netrc.netrc().authenticators(parts.hostname or "")
        except (OSError, netrc.NetrcParseError):
            return None
        return (found[0], found[2] or "") if found else None

    def open(
        self, url: str, headers: dict[str, str], passing: tuple[int, ...] = ()
    ) -> urllib.response.addinfourl:
        """The response (any status below 400, or one in `passing`: e.g. 304 to a conditional
        request, 404 for a project an index does not have); NoRanges for another error,
        Unreachable when no HTTP answer came."""
        import urllib.error
        import urllib.request

        if urlsplit(url).scheme not in ("http", "https"):  # urllib would open file:// too
            raise NoRanges(f"{_safe(url)}: not an http(s) URL; refused")
        req = urllib.request.Request(url, headers={**headers, "Accept-Encoding": "identity"})
        creds = self.credentials(url)
        if creds is not None:  # never carried to a redirect's host
            token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            req.add_unredirected_header("Authorization", f"Basic {token}")
        trusted = self.trusted_opener is not None and urlsplit(url).hostname in self.trusted
        opener = self.trusted_opener if trusted and self.trusted_opener else self.opener
        try:
            resp: urllib.response.addinfourl = opener.open(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            if exc.code in passing:
                return exc
            exc.close()
            raise NoRanges(f"{_safe(url)}: HTTP {exc.code}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, OSError):  # no HTTP answer: refused, unresolvable, ...
                raise Unreachable(f"{_safe(url)}: {exc.reason}") from None
            raise NoRanges(f"{_safe(url)}: {exc}") from None
        except (OSError, ValueError) as exc:
            raise NoRanges(f"{_safe(url)}: {exc}") from None
        return resp


def index_urls(config: IndexConfig) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """(the http(s) index URLs without their credentials, netloc -> (user, password) taken
    from them): what a page's address is made from, known without opening anything."""
    urls: list[str] = []
    auth: dict[str, tuple[str, str]] = {}
    for url in config.index_urls:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        if parts.username is not None:
            auth[netloc] = (unquote(parts.username), unquote(parts.password or ""))
        urls.append(urlunsplit(parts._replace(netloc=netloc)))
    return urls, auth


def _safe(url: str) -> str:
    """The URL without its credentials, for messages."""
    parts = urlsplit(url)
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=host, query="", fragment=""))


# ---------------------------------------------------------------------------------------------
# The index's project page (PEP 503 HTML or PEP 691 JSON)


def parse_page(body: bytes, content_type: str, page_url: str) -> list[Candidate]:
    """Every wheel file the project page lists, with its sha256 ("" for none), whether it is
    yanked and its Requires-Python: what pip's choice (`choose`) weighs."""
    return [
        Candidate(f.url, f.filename, f.sha256 or "", f.yanked, f.requires_python)
        for f in listing.parse_page(body, content_type, page_url)
        if f.filename.endswith(".whl")
    ]


def choose(candidates: Sequence[Candidate], package: str, version: Version) -> Candidate | None:
    """The wheel of package==version pip would install here (`listing.pick`: build tags,
    Requires-Python, local versions, yanked files as pip weighs them); None when pip would
    take none, or takes one listed without a sha256 (no ranges: the whole download's path
    picks the same file)."""
    files = [
        listing.File(c.filename, c.url, c.sha256 or None, c.yanked, c.requires_python)
        for c in candidates
    ]
    got = listing.pick(
        files, package, version, listing.supported_tags(), listing.target_python(None)
    ).file
    if got is None:
        return None
    chosen = candidates[next(i for i, f in enumerate(files) if f is got)]
    return chosen if len(chosen.sha256) == 64 else None


def find(
    client: Client,
    config: IndexConfig,
    package: str,
    version: Version,
    pages: dict[str, list[Candidate]] | None = None,
) -> Candidate:
    """The release's wheel on the first configured index that lists one for this
    interpreter; NoRanges when pip would find it elsewhere (find-links, a file:// index) or
    nowhere the ranged path can see. `pages` keeps the project pages read (a matrix asks for
    many releases of one project)."""
    pages = {} if pages is None else pages
    if wheelhouse.find(
        [d / canonicalize_name(package) for d in config.local_dirs] + list(config.local_dirs),
        package,
        version,
    ):
        raise NoRanges(f"{package}=={version}: pip has it on disk (find-links or file:// index)")
    unreachable: list[str] = []
    merged: list[Candidate] = []  # every index's files, in index order: pip weighs them all
    for index in client.index_urls:
        page = index.rstrip("/") + f"/{canonicalize_name(package)}/"
        if page not in pages:
            try:
                resp = client.open(page, {"Accept": ACCEPT})
            except Unreachable as exc:  # the next index may answer (pip tries them all)
                unreachable.append(exc.message)
                continue
            with resp:
                body = resp.read(MAX_PAGE + 1)
                ctype = resp.headers.get("Content-Type", "")
                base = resp.geturl()
            if len(body) > MAX_PAGE:
                raise NoRanges(f"{_safe(page)}: project page too large")
            pages[page] = parse_page(body, ctype, base)
        merged += pages[page]
    got = choose(merged, package, version)
    if got is not None:
        return got
    if unreachable and len(unreachable) == len(client.index_urls) and not config.local_dirs:
        raise Unreachable("; ".join(unreachable))
    raise NoRanges(f"no index lists a wheel of {package}=={version} for this interpreter")


# ---------------------------------------------------------------------------------------------
# A wheel over HTTP ranges


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over one URL: a read fetches the missing bytes it needs
    (at least READ_AHEAD at a time) with one `Range:` request per gap, and keeps them."""

    def __init__(self, client: Client, url: str) -> None:
        super().__init__()
        self.client, self.url = client, url
        self._starts: list[int] = []  # sorted starts of the pieces held
        self._pieces: dict[int, bytes] = {}
        self._pos = 0
        self.size = -1
        start, data, total = self._fetch(f"bytes=-{TAIL}", None)
        self.size = total
        self._keep(start, data)

    # -- io.RawIOBase

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._read(self._pos, end)
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    # -- the byte ranges

    def _read(self, start: int, end: int) -> bytes:
        out = bytearray()
        pos = start
        while pos < end:
            i = bisect.bisect_right(self._starts, pos) - 1
            if i >= 0:
                s = self._starts[i]
                piece = self._pieces[s]
                if pos < s + len(piece):
                    take = piece[pos - s : min(end, s + len(piece)) - s]
                    out += take
                    pos += len(take)
                    continue
            nxt = self._starts[i + 1] if i + 1 < len(self._starts) else self.size
            stop = min(self.size, nxt, max(end, pos + READ_AHEAD))
            got_start, data, _total = self._fetch(f"bytes={pos}-{stop - 1}", (pos, stop - 1))
            self._keep(got_start, data)
        return bytes(out)

    def _keep(self, start: int, data: bytes) -> None:
        if data:
            bisect.insort(self._starts, start)
            self._pieces[start] = data

    def _fetch(self, spec: str, want: tuple[int, int] | None) -> tuple[int, bytes, int]:
        """(start, bytes, total) of one ranged GET, checked before its body is read: a 206
        whose Content-Range is the range asked for (a suffix range: the file's last TAIL
        bytes, or all of a shorter file), of the length it says, of a file whose length did
        not change. At most the length asked for is read, whatever the server sends."""
        resp = self.client.open(self.url, {"Range": spec})
        with resp:
            status = resp.status
            crange = resp.headers.get("Content-Range", "")
            ctype = resp.headers.get("Content-Type", "")
            m = _CONTENT_RANGE.match(crange.strip())
            if status != 206 or m is None or "multipart" in ctype:
                raise NoRanges(f"{_safe(self.url)}: ranges refused (HTTP {status})")
            first, last, total = (int(g) for g in m.groups())
            if last < first or last >= total or (self.size >= 0 and total != self.size):
                raise NoRanges(f"{_safe(self.url)}: inconsistent Content-Range {crange}")
            asked = want if want is not None else (max(0, total - TAIL), total - 1)
            if (first, last) != asked:
                raise NoRanges(f"{_safe(self.url)}: got {crange}, asked for {spec}")
            length = last - first + 1
            declared = resp.headers.get("Content-Length")
            if declared is not None and declared.strip() != str(length):
                raise NoRanges(f"{_safe(self.url)}: Content-Length {declared} for {crange}")
            data = resp.read(length + 1)
        if len(data) != length:
            raise NoRanges(f"{_safe(self.url)}: {len(data)} bytes for {crange}")
        self.client.moved.add(len(data))
        return first, data, total


def open_ranged(
    config: IndexConfig,
    package: str,
    version: Version,
    moved: Moved,
    pages: dict[str, list[Candidate]] | None = None,
) -> tuple[Candidate, IO[bytes]]:
    """(the index's entry, a ranged file over it); NoRanges when any part does not hold.
    `pages`: the run's project pages already read (`find`)."""
    if not config.supported:
        raise NoRanges(config.why)
    client = Client(config, moved)
    got = find(client, config, package, version, pages)
    return got, cast("IO[bytes]", RangeFile(client, got.url))  # zipfile reads it as a file
