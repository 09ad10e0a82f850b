"""PURE: an index's project page (PEP 691 JSON, PEP 503 HTML, a find-links page or directory)
as the files it offers, and the decisions pip makes on them: which releases `pip index
versions` would list, which wheel `pip download --only-binary :all:` would pick.

No I/O here: `patcher.wheels.indexclient` fetches the pages (and keeps them with their HTTP
validators); the store and the matrix ask it.
"""

from __future__ import annotations

import html.parser
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import (
    Tag,
    android_platforms,
    compatible_tags,
    cpython_tags,
    ios_platforms,
    mac_platforms,
    sys_tags,
)
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


def pip_platforms(platforms: Sequence[str]) -> list[str]:
    """`--platform` values as pip widens them (its `_expand_allowed_platforms`): a macOS, iOS
    or Android platform admits the older releases (and macOS's universal builds) packaging
    lists for it, manylinux2014 admits manylinux2010 and manylinux1 (x86_64 and i686 only),
    manylinux2010 admits manylinux1; any other platform is itself only (manylinux_2_28 does
    not admit manylinux_2_17: pip takes the name as given). Duplicates dropped, order kept."""
    seen: set[str] = set()
    out: list[str] = []
    for p in platforms:
        if p in seen:
            continue
        for got in _widened(p):
            if got not in seen:
                seen.add(got)
                out.append(got)
    return out


def _widened(platform: str) -> list[str]:
    """One `--platform` value as pip's `_get_custom_platforms` widens it."""
    prefix, _, suffix = platform.partition("_")
    apple = _APPLE.match(platform)
    if prefix.startswith(("macosx", "ios")):
        return _apple(platform, apple)
    if prefix == "android":
        android = re.fullmatch(r"android_(\d+)_(.+)", platform)
        return list(android_platforms(int(android[1]), android[2])) if android else [platform]
    older = {"manylinux2010": ["manylinux1"]}
    if suffix in ("i686", "x86_64"):
        older["manylinux2014"] = ["manylinux2010", "manylinux1"]
    return [platform, *(f"{p}_{suffix}" for p in older.get(prefix, []))]


def _apple(platform: str, apple: re.Match[str] | None) -> list[str]:
    """A macOS or iOS platform with every older version pip accepts beside it."""
    if apple is None:
        return [platform]
    name, major, minor, arch = apple.groups()
    mac = platform.startswith("macosx")
    found = (mac_platforms if mac else ios_platforms)((int(major), int(minor)), arch)
    cut = len("macosx_" if mac else "ios_")
    return [f"{name}_{p[cut:]}" for p in found]


_APPLE = re.compile(r"(.+)_(\d+)_(\d+)_(.+)")


def supported_tags(
    platforms: Sequence[str] = (), python: tuple[int, int] | None = None
) -> list[Tag]:
    """The wheel tags pip accepts, best first: this interpreter's (`sys_tags`), or, with
    --platform and/or --python-version, CPython's of that version on those platforms (as
    pip's `get_supported`: platforms widened by `pip_platforms`)."""
    if not platforms and python is None:
        return list(sys_tags())
    py = python or (sys.version_info[0], sys.version_info[1])
    plats = pip_platforms(platforms) or None
    return [
        *cpython_tags(python_version=py, platforms=plats),
        *compatible_tags(python_version=py, interpreter=f"cp{py[0]}{py[1]}", platforms=plats),
    ]


def _python_ok(spec: str | None, python: Version) -> bool:
    if not spec:
        return True
    try:
        return python in SpecifierSet(spec)
    except InvalidSpecifier:
        return True  # pip ignores a specifier it cannot read


def _here() -> Version:
    return Version(".".join(str(n) for n in sys.version_info[:3]))


def target_python(python: tuple[int, int] | None) -> Version:
    """The Python a Requires-Python is checked against: this interpreter's full version, or
    `--python-version X.Y` as pip pads it (X.Y.0: `>=3.11.1` excludes `--python-version
    3.11`)."""
    return _here() if python is None else Version(f"{python[0]}.{python[1]}.0")


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


def releases(files: Iterable[File], package: str, pre: bool = False) -> list[Version]:
    """Every release the page lists a file of (any wheel tag, an sdist), not all of its files
    yanked, oldest first; pre-releases only with `pre`. Against `versions(..., platforms)`
    it names the releases that have no wheel for a platform (`vpatch matrix --platform`)."""
    want = canonicalize_name(package)
    found: set[Version] = set()
    for f in files:
        got = _release(f.filename)
        if (
            got is not None
            and got[0] == want
            and not f.yanked
            and (pre or not got[1].is_prerelease)
        ):
            found.add(got[1])
    return sorted(found)


@dataclass(frozen=True)
class Pick:
    """pip's choice of one pinned release's wheel (`pick`): the file, or None and why."""

    file: File | None
    why: str = ""  # none chosen: what the files lacked, for the message


def pick(
    files: Iterable[File], package: str, version: Version, tags: Sequence[Tag], python: Version
) -> Pick:
    """The wheel `pip install --only-binary :all: --no-deps NAME==VERSION` takes, from every
    file the configured sources list (merged, as pip merges its indexes and find-links):

    - the file's name is the project's, the file a wheel (an sdist is never taken: binary
      only) with a tag in `tags`, and its Requires-Python admits `python` (one that cannot be
      read admits every Python, as pip ignores it);
    - its version matches `==VERSION` as PEP 440 says: `==2.13.0` matches `2.13.0+cpu` (a
      specifier without a local label ignores the candidate's), `==2.13.0+cpu` only itself;
    - of those, pip's order (`CandidateEvaluator._sort_key`): not yanked before yanked, then
      the higher version (`2.13.0+cpu` over `2.13.0`), then the better-ranked tag, then the
      higher build tag (none lowest); of equal keys (one file on two sources) the last
      listed, as pip's resolver tries them;
    - a yanked file only when every matching file is yanked (PEP 592: the specifier pins).
    """
    want = canonicalize_name(package)
    spec = SpecifierSet(f"=={version}")
    rank = {tag: i for i, tag in enumerate(tags)}
    why: dict[str, int] = {"seen": 0, "sdist": 0, "platform": 0, "python": 0}
    best: tuple[tuple[int, Version, int, tuple[int, str] | tuple[()]], File] | None = None
    for f in files:
        got = _build(f.filename)
        if got is None or got[0] != want or not spec.contains(got[1], prereleases=True):
            continue
        why["seen"] += 1
        _name, ver, build, wheel_tags = got
        score = _score(wheel_tags, rank)
        refused = "sdist" if wheel_tags is None else "platform" if score is None else ""
        if not refused and not _python_ok(f.requires_python, python):
            refused = "python"
        if refused or score is None:
            why[refused or "platform"] += 1
            continue
        key = (-int(f.yanked), ver, -score, build)
        if best is None or key >= best[0]:  # equal keys: pip tries the last listed first
            best = (key, f)
    if best is not None:
        return Pick(best[1])
    if not why["seen"]:
        return Pick(None, f"no file of {package}=={version}")
    if why["sdist"] == why["seen"]:
        return Pick(None, f"{package}=={version} has only an sdist (a wheel is needed)")
    if why["python"]:
        return Pick(None, f"Requires-Python of {package}=={version} excludes Python {python}")
    return Pick(None, f"no wheel of {package}=={version} for this Python and platform")


def _score(wheel_tags: frozenset[Tag] | None, rank: dict[Tag, int]) -> int | None:
    """The best rank of a wheel's tags among those pip accepts (lower is better); None for
    an sdist or a wheel pip cannot install here."""
    if wheel_tags is None:
        return None
    return min((rank[t] for t in wheel_tags if t in rank), default=None)


def _build(
    filename: str,
) -> tuple[str, Version, tuple[int, str] | tuple[()], frozenset[Tag] | None] | None:
    """(name, version, build tag, tags) of a wheel, (name, version, (), None) of an sdist."""
    try:
        if filename.endswith(".whl"):
            name, ver, build, tags = parse_wheel_filename(filename)
            return name, ver, build, tags
        if filename.endswith((".tar.gz", ".zip")):
            name, ver = parse_sdist_filename(filename)
            return name, ver, (), None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion, ValueError):
        return None
    return None


def best_wheel(
    files: Iterable[File],
    package: str,
    version: Version,
    platforms: Sequence[str] = (),
    python: tuple[int, int] | None = None,
) -> File | None:
    """The wheel of package==version pip would pick here (`pick`), for this interpreter or
    the given platforms / Python version."""
    return pick(
        files, package, version, supported_tags(platforms, python), target_python(python)
    ).file


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
