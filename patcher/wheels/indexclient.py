"""vpatch's own index client: the releases of a project and a release's whole wheel, from the
indexes pip (or uv) is configured with, without pip.

The HTTP is `patcher.wheels.remote.Client`'s (pip's CA bundle, client certificate,
trusted-host, proxy, credentials from the index URL or ~/.netrc, pip's timeout), the decisions
are `patcher.wheels.listing`'s. Where pip looks, vpatch looks, in pip's order: find-links
directories and pages, file:// indexes, then the http(s) indexes (index-url, extra-index-url).
A `file://` link is followed only from a local index or directory: a page served over http(s)
that links to one (or to any scheme but http(s)) is refused whole (`ForeignLink`), where pip
would read that file of this machine.

Warm means no network: every http(s) page read is kept in the wheel store (`<store>/index/`,
checked like every store file) with its ETag, Last-Modified and Cache-Control max-age. A page
younger than its max-age (at most FRESH_MAX) is used as it is, no request; an older one is
asked for again conditionally (If-None-Match / If-Modified-Since: a 304 answer has no body);
`refresh=True` (`--refresh`) asks for it whole. An index that does not answer at all (offline,
refused, no name) leaves a kept page in use as it was, however old. A whole wheel is streamed
to disk through sha256 (the index's hash must match), with pip's retries on a server error or
a dropped connection; a host that refuses or cannot be resolved is not retried (pip would fail
the same).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name
from packaging.version import Version

from patcher.wheels import listing, remote, trust
from patcher.wheels.listing import File
from patcher.wheels.pipconf import IndexConfig

FRESH_MAX = 600  # the longest a kept page is used without asking (seconds)
MAX_WHEEL = 8 * 1024**3  # a wheel larger than this is not downloaded
MAX_ENTRY = 64 * 1024 * 1024  # a kept page's JSON larger than this is not read
_RETRY_STATUS = (500, 502, 503, 504, 520, 527)
_CHUNK = 1 << 20


class ForeignLink(remote.NoRanges):
    """A page served over http(s) links to a file by another scheme (`file://`): refused."""


@dataclass
class Asked:
    """What the client asked the indexes (proof that a warm run asks nothing)."""

    requests: int = 0
    not_modified: int = 0
    fresh: int = 0  # pages used from the store without a request
    stale: int = 0  # kept pages used because their index did not answer at all


@dataclass(frozen=True)
class Kept:
    """A page kept in the store: its files and what HTTP said about its freshness."""

    url: str
    files: list[File]
    fetched: float
    max_age: int
    etag: str | None = None
    last_modified: str | None = None

    def fresh(self, now: float) -> bool:
        return now - self.fetched < min(self.max_age, FRESH_MAX)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "etag": self.etag,
            "last_modified": self.last_modified,
            "fetched": self.fetched,
            "max_age": self.max_age,
            "files": [f.to_json() for f in self.files],
        }

    @classmethod
    def from_json(cls, doc: Any) -> Kept:
        """The entry (ValueError, KeyError, TypeError: not one)."""
        etag, modified = doc.get("etag"), doc.get("last_modified")
        return cls(
            str(doc["url"]),
            [File.from_json(f) for f in doc["files"]],
            float(doc["fetched"]),
            int(doc["max_age"]),
            None if etag is None else str(etag),
            None if modified is None else str(modified),
        )


@dataclass
class Client:
    """One run's client: the configuration, the store root its pages are kept under."""

    config: IndexConfig
    store_root: Path
    refresh: bool = False
    asked: Asked = field(default_factory=Asked)
    moved: remote.Moved = field(default_factory=remote.Moved)
    _http: remote.Client | None = field(default=None, repr=False)
    _pages: dict[str, list[File]] = field(default_factory=dict, repr=False)
    _unasked: set[str] = field(default_factory=set, repr=False)  # pages served as kept
    # one page at a time: a matrix's jobs share the pages (and `refresh`) of one run
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def http(self) -> remote.Client:
        if self._http is None:
            self._http = remote.Client(self.config, self.moved)
        return self._http

    # -- a project's files, from every source pip reads

    def files(self, package: str) -> list[File]:
        """Every file of `package` the configured sources list, in pip's order (which decides
        between equal candidates, `listing.pick`): the files of find-links directories, then
        find-links pages, then the indexes in the order configured (index-url, each
        extra-index-url; file:// and http(s) alike). Unreachable when no source could be read
        at all and there were http(s) ones to read."""
        name = canonicalize_name(package)
        out: list[File] = []
        file_index_dirs = {_local(u) for u in self.config.file_indexes}
        for d in self.config.local_dirs:
            if d not in file_index_dirs:
                out += _dir_files(d)
        unreachable: list[str] = []
        answered = 0
        failed: list[remote.NoRanges] = []
        for page in self._pages_of(name):
            if page in self.config.file_indexes:
                out += _file_index(_local(page) / name)
                continue
            try:
                out += self.page(page)
                answered += 1
            except remote.Unreachable as exc:
                unreachable.append(exc.message)
            except ForeignLink:  # said, never passed over for the next index
                raise
            except remote.NoRanges as exc:  # pip, too, goes on to the next index
                failed.append(exc)
        if failed and not answered and not out:
            raise failed[0]
        if unreachable and not answered and not out:
            raise remote.Unreachable("; ".join(unreachable))
        return out

    def _pages_of(self, name: str) -> list[str]:
        """The pages to read for project `name`, in pip's order: find-links pages, then each
        index (an http(s) index's page named from its URL without credentials,
        `http_indexes`; a file:// index as itself)."""
        http = dict(zip(self.config.index_urls, self.http_indexes(), strict=True))
        indexes = self.config.indexes or (*http, *self.config.file_indexes)
        pages: list[str] = list(self.config.link_pages)
        for source in indexes:
            if source in http:
                pages.append(http[source].rstrip("/") + f"/{name}/")
            elif source in self.config.file_indexes:
                pages.append(source)
        return pages

    def http_indexes(self) -> list[str]:
        return remote.index_urls(self.config)[0]  # no TLS set up to name a page

    def page(self, url: str) -> list[File]:
        """One http(s) page's files: kept and fresh, kept and not modified, or fetched;
        ForeignLink when it links to a file by another scheme (a kept page is checked too)."""
        with self._lock:
            files = self._page(url)
        bad = listing.foreign_link(url, files)
        if bad is not None:
            raise ForeignLink(
                f"{remote._safe(url)} links {bad.filename} to {remote._safe(bad.url)}: a page "
                "served over http(s) may link only to http(s) files; refused"
            )
        return files

    def _page(self, url: str) -> list[File]:
        if url in self._pages:
            return self._pages[url]
        kept = None if self.refresh else self._kept(url)
        if kept is not None and kept.fresh(time.time()):
            self.asked.fresh += 1
            self._unasked.add(url)
            self._pages[url] = kept.files
            return kept.files
        headers = {"Accept": remote.ACCEPT}
        if kept is not None and kept.etag:
            headers["If-None-Match"] = kept.etag
        if kept is not None and kept.last_modified:
            headers["If-Modified-Since"] = kept.last_modified
        try:
            resp = self._open(url, headers, (304, 404, 410))
        except remote.Unreachable:
            if kept is None:
                raise
            self.asked.stale += 1  # no index answers (offline): the kept page, as it was
            self._pages[url] = kept.files
            return kept.files
        self.asked.requests += 1
        with resp:
            status = resp.status
            max_age = listing.cache_control_max_age(resp.headers.get("Cache-Control"))
            if status == 304 and kept is not None:
                self.asked.not_modified += 1
                entry = Kept(url, kept.files, time.time(), max_age, kept.etag, kept.last_modified)
            elif status in (404, 410):  # kept too: this index has no such project
                entry = Kept(url, [], time.time(), max_age)
            else:
                body = _bounded(resp, remote.MAX_PAGE, url)
                ctype = resp.headers.get("Content-Type", "")
                try:
                    files = listing.parse_page(body, ctype, resp.geturl())
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    raise remote.NoRanges(
                        f"{remote._safe(url)}: not a project page ({exc})"
                    ) from None
                etag, modified = resp.headers.get("ETag"), resp.headers.get("Last-Modified")
                entry = Kept(url, files, time.time(), max_age, etag, modified)
        self._keep(entry)
        self._pages[url] = entry.files
        return entry.files

    def _open(self, url: str, headers: dict[str, str], passing: tuple[int, ...] = ()) -> Any:
        """A response, pip's retries spent on a server error or a dropped connection (never
        on a refused or unresolvable host: that is Unreachable at once)."""
        for attempt in range(self.config.retries + 1):
            try:
                resp = self.http.open(url, headers, passing + _RETRY_STATUS)
            except remote.Unreachable:
                raise
            except remote.NoRanges:
                if attempt >= self.config.retries:
                    raise
                time.sleep(min(0.25 * 2**attempt, 4.0))
                continue
            if resp.status in _RETRY_STATUS and resp.status not in passing:
                resp.close()
                if attempt >= self.config.retries:
                    raise remote.NoRanges(f"{remote._safe(url)}: HTTP {resp.status}")
                time.sleep(min(0.25 * 2**attempt, 4.0))
                continue
            return resp
        raise remote.NoRanges(f"{remote._safe(url)}: no answer")  # pragma: no cover

    # -- the kept pages

    def _entry_path(self, url: str) -> Path:
        return self.store_root / "index" / (hashlib.sha256(url.encode()).hexdigest()[:40] + ".json")

    def _kept(self, url: str) -> Kept | None:
        try:
            trust.safe_dir(self.store_root)
            trust.safe_dir(self.store_root / "index")
            fh, _st = trust.open_checked(self._entry_path(url))
            with fh:
                kept = Kept.from_json(json.loads(fh.read(MAX_ENTRY)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, trust.UnsafeStore):
            return None
        return kept if kept.url == url else None

    def _keep(self, entry: Kept) -> None:
        """Best effort: a store that cannot take it costs the next run one request."""
        try:
            trust.safe_dir(trust.safe_dir(self.store_root, create=True) / "index", create=True)
            trust.atomic_write(self._entry_path(entry.url), json.dumps(entry.to_json()).encode())
        except (OSError, trust.UnsafeStore):
            return

    # -- releases and wheels

    def candidates(
        self, package: str, version: Version, pages: dict[str, list[remote.Candidate]]
    ) -> File | None:
        """Fill `pages` (page URL -> its wheels, the ranged path's `remote.find`) from the
        kept or fetched pages of the http(s) indexes (a kept page without the release is read
        again: it may be newer than the page); pip's pick from every source (`choice`)."""
        name = canonicalize_name(package)
        with self._lock:
            self._candidates(name, version, pages)
            return self._choice(package, version, ())

    def choice(
        self,
        package: str,
        version: Version,
        platforms: Sequence[str] = (),
        python: tuple[int, int] | None = None,
    ) -> File | None:
        """The wheel pip would take for package==version from every configured source at
        once (`listing.best_wheel`: find-links, file:// and http(s) indexes merged, as pip
        merges them); kept pages that lack it are read again before None."""
        with self._lock:
            return self._choice(package, version, platforms, python)

    def _choice(
        self,
        package: str,
        version: Version,
        platforms: Sequence[str],
        python: tuple[int, int] | None = None,
    ) -> File | None:
        got = listing.best_wheel(self.files(package), package, version, platforms, python)
        if got is None and self.asked.fresh and not self.refresh:  # a kept page may predate it
            self.refresh, self._pages = True, {}
            got = listing.best_wheel(self.files(package), package, version, platforms, python)
        return got

    def _candidates(
        self, name: str, version: Version, pages: dict[str, list[remote.Candidate]]
    ) -> None:
        for index in self.http_indexes():
            url = index.rstrip("/") + f"/{name}/"
            files = self.page(url)
            if url in self._unasked and not any(_release_of(f, name, version) for f in files):
                self._pages.pop(url, None)
                files = self._reread(url)
            pages[url] = [
                remote.Candidate(f.url, f.filename, f.sha256 or "", f.yanked, f.requires_python)
                for f in files
                if f.filename.endswith(".whl")
            ]

    def _reread(self, url: str) -> list[File]:
        """The page asked for again, conditionally (a kept page was fresh but lacks a release)."""
        refresh, self.refresh = self.refresh, False
        self._unasked.discard(url)
        kept = self._kept(url)
        if kept is not None:  # stale on purpose: one conditional request
            self._keep(Kept(url, kept.files, 0.0, 0, kept.etag, kept.last_modified))
        try:
            return self.page(url)
        finally:
            self.refresh = refresh

    def versions(
        self, package: str, pre: bool = False, platforms: Sequence[str] = (), any_file: bool = False
    ) -> list[Version]:
        """The releases pip would list (`listing.versions`), oldest first; `any_file`: every
        release with a file of any kind, not all yanked (`listing.releases`)."""
        if any_file:
            return listing.releases(self.files(package), package, pre)
        return listing.versions(self.files(package), package, pre, platforms)

    def download(
        self,
        package: str,
        version: Version,
        dest: Path,
        platforms: Sequence[str] = (),
        progress: Callable[[int, int], None] | None = None,
    ) -> Path:
        """The release's wheel pip would pick, whole, into the empty directory `dest`, its
        sha256 checked against the index's; NoRanges when no source has one."""
        with self._lock:
            got = self._choice(package, version, platforms)
        if got is None:
            raise remote.NoRanges(
                f"no configured index has a wheel of {package}=={version} for this platform"
            )
        name = os.path.basename(got.filename)
        if name != got.filename or not name.endswith(".whl"):
            raise remote.NoRanges(f"{got.filename!r}: not a wheel file name")
        target = dest / name
        if urlsplit(got.url).scheme == "file":
            _copy(_local(got.url), target, got.sha256)
            return target
        for attempt in range(self.config.retries + 1):
            try:
                self._stream(got, target, progress)
                return target
            except remote.Unreachable:
                raise
            except (remote.NoRanges, OSError) as exc:
                target.unlink(missing_ok=True)
                if attempt >= self.config.retries or "sha256" in str(exc):
                    raise
                time.sleep(min(0.25 * 2**attempt, 4.0))
        raise remote.NoRanges(f"{remote._safe(got.url)}: no answer")  # pragma: no cover

    def _stream(self, got: File, target: Path, progress: Callable[[int, int], None] | None) -> None:
        resp = self._open(got.url, {})
        h = hashlib.sha256()
        done = 0
        with resp:
            declared = resp.headers.get("Content-Length")
            total = int(declared) if declared and declared.isdigit() else 0
            if total > MAX_WHEEL:
                raise remote.NoRanges(f"{remote._safe(got.url)}: {total} bytes, over the cap")
            fd = os.open(
                target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            with os.fdopen(fd, "wb") as out:
                while chunk := resp.read(_CHUNK):
                    done += len(chunk)
                    if done > (total or MAX_WHEEL):
                        raise remote.NoRanges(f"{remote._safe(got.url)}: longer than declared")
                    h.update(chunk)
                    out.write(chunk)
                    if progress is not None:
                        progress(done, total)
        self.moved.add(done)
        if total and done != total:
            raise remote.NoRanges(f"{remote._safe(got.url)}: {done} of {total} bytes")
        if got.sha256 is not None and h.hexdigest() != got.sha256:
            raise remote.NoRanges(f"{remote._safe(got.url)}: not the sha256 the index lists")


def _bounded(resp: Any, cap: int, url: str) -> bytes:
    """A response's body, refused when its Content-Length or its bytes pass `cap`."""
    declared = resp.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > cap:
        raise remote.NoRanges(f"{remote._safe(url)}: {declared} bytes, over the cap")
    body: bytes = resp.read(cap + 1)
    if len(body) > cap:
        raise remote.NoRanges(f"{remote._safe(url)}: over {cap} bytes")
    return body


def _local(url: str) -> Path:
    parts = urlsplit(url)
    return Path(unquote(parts.path)) if parts.scheme == "file" else Path(url)


def _dir_files(d: Path) -> list[File]:
    """A find-links directory's files (pip reads no hashes there), in pip's order for them
    (by URL, highest first)."""
    try:
        names = sorted(os.listdir(d), reverse=True)
    except OSError:
        return []
    return [File(n, (d / n).as_uri()) for n in names if n.endswith((".whl", ".tar.gz", ".zip"))]


def _file_index(project: Path) -> list[File]:
    """A file:// index's project page (`<index>/<name>/index.html`), or none."""
    page = project / "index.html"
    try:
        with page.open("rb") as fh:
            body = fh.read(remote.MAX_PAGE + 1)
    except OSError:
        return []
    if len(body) > remote.MAX_PAGE:
        return []
    return listing.parse_page(body, "text/html", page.as_uri())


def _copy(src: Path, target: Path, sha256: str | None) -> None:
    """A wheel on this machine (find-links, a file:// index) copied into the store's temp
    dir, read through the wheel sources' owner and mode checks (`trust.open_source`: one
    that another user can write is refused, said, not skipped) and its hash checked when the
    index gives one."""
    try:
        fh, _st = trust.open_source(src)
        with fh, target.open("xb") as out:
            shutil.copyfileobj(fh, out, _CHUNK)
    except OSError as exc:
        raise remote.NoRanges(f"{src}: {exc.strerror or exc}") from None
    if sha256 is not None:
        with target.open("rb") as fh:
            if trust.hash_file(fh) != sha256:
                target.unlink(missing_ok=True)
                raise remote.NoRanges(f"{src}: not the sha256 the index lists")


def _release_of(f: File, name: str, version: Version) -> bool:
    """Whether `f` is a wheel of name==version (an unparsable name is not)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        got = parse_wheel_filename(f.filename) if f.filename.endswith(".whl") else None
    except (InvalidWheelFilename, ValueError):
        return False
    return got is not None and got[0] == name and got[1] == version
