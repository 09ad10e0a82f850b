"""PURE: an index's project page (PEP 691 JSON, PEP 503 HTML, a find-links page or directory)
as the files it offers, and the decisions pip makes on them: which releases `pip index
versions` would list, which wheel `pip download --only-binary :all:` would pick.

No I/O here: `patcher.wheels.indexclient` fetches the pages (and keeps them with their HTTP
validators); the store and the matrix ask it.
"""

from __future__ import annotations

import html.parser
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags, sys_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class File:
    """One file a project page lists."""

    filename: str
    url: str
    sha256: str | None = None
    yanked: bool = False
    requires_python: str | None = None

    def to_json(self) -> list[object]:
        return [self.filename, self.url, self.sha256, self.yanked, self.requires_python]

    @classmethod
    def from_json(cls, raw: list[object]) -> File:
        name, url, sha, yanked, req = raw
        return cls(
            str(name),
            str(url),
            None if sha is None else str(sha),
            bool(yanked),
            None if req is None else str(req),
        )


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], str]] = []
        self._attrs: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._attrs = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._attrs is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._attrs is not None:
            self.links.append((self._attrs, "".join(self._text).strip()))
            self._attrs = None


def parse_page(body: bytes, content_type: str, page_url: str) -> list[File]:
    """Every file of a project page: PEP 691 JSON when the server says JSON, else PEP 503
    HTML (a find-links page is HTML too); URLs made absolute against the page's own URL."""
    out: list[File] = []
    if "json" in content_type:
        doc = json.loads(body)
        for f in doc.get("files", []) if isinstance(doc, dict) else []:
            if not isinstance(f, dict) or not f.get("filename") or not f.get("url"):
                continue
            hashes = f.get("hashes") if isinstance(f.get("hashes"), dict) else {}
            sha = hashes.get("sha256") if hashes else None
            req = f.get("requires-python")
            out.append(
                File(
                    str(f["filename"]),
                    urljoin(page_url, str(f["url"])),
                    str(sha).lower() if sha else None,
                    bool(f.get("yanked")),
                    str(req) if req else None,
                )
            )
        return out
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for attrs, text in parser.links:
        href = attrs.get("href")
        if not href:
            continue
        url, _, frag = urljoin(page_url, href).partition("#")
        name = unquote(urlsplit(url).path.rsplit("/", 1)[-1]) or text
        algo, _, sha = frag.partition("=")
        out.append(
            File(
                name,
                url,
                sha.lower() if algo == "sha256" and sha else None,
                "data-yanked" in attrs,
                attrs.get("data-requires-python") or None,
            )
        )
    return out


WEB = ("http", "https")


def foreign_link(page_url: str, files: Iterable[File]) -> File | None:
    """The first file a page served over http(s) links to by another scheme (`file://` on
    this machine, `ftp:`, `data:`...), None when there is none or the page is local. pip
    follows a remote page's `file://` link; vpatch does not: a remote index would choose which
    of this machine's files root reads as a wheel."""
    if urlsplit(page_url).scheme not in WEB:
        return None
    return next((f for f in files if urlsplit(f.url).scheme not in WEB), None)


def _release(filename: str) -> tuple[str, Version, frozenset[Tag] | None] | None:
    """(name, version, tags) of a wheel, (name, version, None) of an sdist; None otherwise."""
    try:
        if filename.endswith(".whl"):
            name, ver, _build, tags = parse_wheel_filename(filename)
            return name, ver, tags
        if filename.endswith((".tar.gz", ".zip")):
            name, ver = parse_sdist_filename(filename)
            return name, ver, None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion, ValueError):
        return None
    return None


def supported_tags(platforms: Sequence[str] = ()) -> list[Tag]:
    """The wheel tags pip accepts here, best first: this interpreter's (`sys_tags`), or, with
    --platform, this interpreter's on those platforms (as `pip download --platform`)."""
    if not platforms:
        return list(sys_tags())
    return [*cpython_tags(platforms=platforms), *compatible_tags(platforms=platforms)]


def _python_ok(spec: str | None, python: Version) -> bool:
    if not spec:
        return True
    try:
        return python in SpecifierSet(spec)
    except InvalidSpecifier:
        return True  # pip ignores a specifier it cannot read


def _here() -> Version:
    return Version(".".join(str(n) for n in sys.version_info[:3]))


def versions(
    files: Iterable[File],
    package: str,
    pre: bool = False,
    platforms: Sequence[str] = (),
    python: Version | None = None,
) -> list[Version]:
    """The releases `pip index versions` lists, oldest first: a version with a file pip could
    use (an sdist, or a wheel with a supported tag), not yanked, whose Requires-Python admits
    this interpreter; pre-releases only with `pre`."""
    want = canonicalize_name(package)
    tags = set(supported_tags(platforms))
    python = python or _here()
    found: set[Version] = set()
    for f in files:
        got = _release(f.filename)
        if got is None or f.yanked or got[0] != want or not _python_ok(f.requires_python, python):
            continue
        _name, ver, wheel_tags = got
        if wheel_tags is not None and not (wheel_tags & tags):
            continue
        if wheel_tags is None and platforms:
            continue  # --platform: wheels only, as pip requires
        if pre or not ver.is_prerelease:
            found.add(ver)
    return sorted(found)


def best_wheel(
    files: Iterable[File], package: str, version: Version, platforms: Sequence[str] = ()
) -> File | None:
    """The wheel of package==version pip would pick: the best-ranked supported tag (a pinned
    release is taken even if yanked, as pip does for `==`; a non-yanked one first)."""
    want = canonicalize_name(package)
    rank = {tag: i for i, tag in enumerate(supported_tags(platforms))}
    best: tuple[tuple[bool, int], File] | None = None
    for f in files:
        got = _release(f.filename)
        if got is None or got[2] is None or got[0] != want or got[1] != version:
            continue
        score = min((rank[t] for t in got[2] if t in rank), default=None)
        if score is None:
            continue
        key = (f.yanked, score)
        if best is None or key < best[0]:
            best = (key, f)
    return None if best is None else best[1]


DEFAULT_FRESH = 600  # a page whose server says nothing of its freshness: 10 minutes


def cache_control_max_age(header: str | None) -> int:
    """Seconds a page may be reused without asking: Cache-Control's max-age (0 with no-cache
    or no-store); DEFAULT_FRESH when the server sends no Cache-Control (an index proxy often
    drops it, and its ETag too: without this every warm run would read every page again)."""
    if not header:
        return DEFAULT_FRESH
    words = [w.strip().lower() for w in header.split(",")]
    if any(w in ("no-cache", "no-store") for w in words):
        return 0
    for w in words:
        if w.startswith("max-age="):
            try:
                return max(0, int(w.split("=", 1)[1]))
            except ValueError:
                return 0
    return DEFAULT_FRESH
