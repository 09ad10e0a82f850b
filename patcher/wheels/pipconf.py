"""pip's own configuration of where wheels come from, read for a ranged fetch (`patcher.wheels.
remote`): the index URLs, find-links, `no-index`, the CA bundle and the proxy.

The values are pip's: its configuration files and $PIP_* environment variables read the way
pip reads them (`patcher.wheels.pipfiles`, `native`), or, when $VPATCH_PIP names a pip, what
`pip config list` prints (`read`): `:env:.index-url`, `global.extra-index-url`, ... A setting
vpatch's client cannot honour (keyring) makes it step aside: `supported` is False and pip
fetches, as before.

No index URL configured means pip's default index; its URL is read from pip's own code
(`pipfiles.pip_default_index`, or asked of pip's interpreter by `read`), never written here.
"""

from __future__ import annotations

import ast
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from patcher import isolate

# Settings pip applies that vpatch's client does not: any of them set, pip does the fetch.
_UNHONOURED = ("keyring-provider", "proxy-cert", "use-feature")
# Which section wins for a key: pip's environment, then its download command, then install
# (where the hosts' files came from), then global; uv's settings (`patcher.wheels.pipfiles`)
# only where pip's say nothing.
_SECTIONS = (":env:", "download", "install", "global", "uv")
PIP_RETRIES = 5  # pip's own default for `retries`
CONFIG_TIMEOUT = 30.0
PIP_TIMEOUT = 15.0  # pip's own default for `timeout`


@dataclass(frozen=True)
class IndexConfig:
    """Where pip looks for a wheel, as far as the ranged path needs it."""

    index_urls: tuple[str, ...] = ()  # index-url, then each extra-index-url
    local_dirs: tuple[Path, ...] = ()  # find-links directories and file:// indexes
    cert: str | None = None  # CA bundle (pip's `cert`)
    proxy: str | None = None
    timeout: float = PIP_TIMEOUT  # pip's `timeout` (seconds per connect and read)
    client_cert: str | None = None  # pip's `client-cert` (a PEM with the key)
    trusted_hosts: tuple[str, ...] = ()  # pip's `trusted-host`: http allowed, TLS unverified
    file_indexes: tuple[str, ...] = ()  # file:// index URLs (PEP 503 pages on disk)
    link_pages: tuple[str, ...] = ()  # http(s) find-links: pages of links to wheels
    indexes: tuple[str, ...] = ()  # every index URL, http(s) and file://, in pip's order
    retries: int = PIP_RETRIES
    supported: bool = True  # False: no ranged reads (no http(s) index, or pip_only)
    why: str = ""
    pip_only: bool = False  # a setting only pip honours (keyring): pip lists and fetches
    values: dict[str, str] = field(default_factory=dict, repr=False)


def parse_config_list(text: str) -> dict[str, str]:
    """`section.key` -> value from `pip config list` (`global.index-url='http://...'`)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        name, sep, value = raw.strip().partition("=")
        if not sep or "." not in name:
            continue
        try:
            out[name] = str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            out[name] = value.strip("'\"")
    return out


def setting(values: dict[str, str], key: str) -> str | None:
    """The value pip uses for `key`: its environment's, else its download command's, else
    global's; None when unset."""
    for section in _SECTIONS:
        got = values.get(f"{section}.{key}")
        if got is not None:
            return got
    return None


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "yes", "true", "on")


def decide(values: dict[str, str], default_index: str | None) -> IndexConfig:
    """The configuration the ranged path works with (pure: pip's settings in, no I/O)."""
    local: list[Path] = []
    pages: list[str] = []
    for link in (setting(values, "find-links") or "").split():
        if urlsplit(link).scheme in ("http", "https"):
            pages.append(link)
        else:
            local.append(_local_path(link))
    if _truthy(setting(values, "no-index")):
        return IndexConfig(
            local_dirs=tuple(local),
            link_pages=tuple(pages),
            supported=False,
            why="pip is configured with no-index",
            values=values,
        )
    for key in _UNHONOURED:
        value = (setting(values, key) or "").strip().lower()
        if value and not (key == "keyring-provider" and value in ("disabled", "auto")):
            return IndexConfig(
                supported=False, why=f"pip's {key} is set", pip_only=True, values=values
            )
    index = setting(values, "index-url") or default_index
    urls = [index] if index else []
    urls += (setting(values, "extra-index-url") or "").split()
    remote: list[str] = []
    files: list[str] = []
    for url in urls:
        scheme = urlsplit(url).scheme
        if scheme == "file":
            local.append(_local_path(url))
            files.append(url)
        elif scheme in ("http", "https"):
            remote.append(url)
    return IndexConfig(
        index_urls=tuple(remote),
        local_dirs=tuple(local),
        cert=setting(values, "cert"),
        proxy=setting(values, "proxy"),
        timeout=_seconds(setting(values, "timeout") or setting(values, "default-timeout")),
        client_cert=setting(values, "client-cert"),
        trusted_hosts=tuple((setting(values, "trusted-host") or "").split()),
        file_indexes=tuple(files),
        link_pages=tuple(pages),
        indexes=tuple(u for u in urls if urlsplit(u).scheme in ("file", "http", "https")),
        retries=_count(setting(values, "retries")),
        supported=bool(remote),
        why="" if remote else "no http(s) index",
        values=values,
    )


def _count(value: str | None) -> int:
    try:
        return max(0, int(value)) if value else PIP_RETRIES
    except ValueError:
        return PIP_RETRIES


def native() -> IndexConfig:
    """pip's configuration (or uv's), read from their files and environment without pip
    (`patcher.wheels.pipfiles`); pip's built-in index where none is configured."""
    from patcher.wheels import pipfiles

    values = pipfiles.read()
    default = None if setting(values, "index-url") else pipfiles.pip_default_index()
    return decide(values, default)


def _seconds(value: str | None) -> float:
    try:
        got = float(value) if value else PIP_TIMEOUT
    except ValueError:
        return PIP_TIMEOUT
    return got if got > 0 else PIP_TIMEOUT


def _local_path(link: str) -> Path:
    parts = urlsplit(link)
    return Path(unquote(parts.path)) if parts.scheme == "file" else Path(link)


def read(pip: list[str]) -> IndexConfig:
    """pip's configuration, by `pip config list` run with the pip command vpatch uses."""
    env = isolate.env({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
    try:
        res = subprocess.run(
            isolate.argv([*pip, "config", "list"]),
            capture_output=True,
            text=True,
            timeout=CONFIG_TIMEOUT,
            cwd=isolate.WORKDIR,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return IndexConfig(supported=False, why="pip config list failed")
    if res.returncode != 0:
        return IndexConfig(supported=False, why="pip config list failed")
    values = parse_config_list(res.stdout)
    return decide(values, None if setting(values, "index-url") else _default_index(pip))


_DEFAULT_SCRIPT = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"


def _default_index(pip: list[str]) -> str | None:
    """pip's built-in index URL, asked of pip's own code in pip's interpreter when the pip
    command is `PYTHON -m pip` (pip's internals: any failure means no default, and the ranged
    path steps aside for pip)."""
    if len(pip) != 3 or pip[1:] != ["-m", "pip"]:
        return None
    try:
        res = subprocess.run(
            isolate.argv([pip[0], "-c", _DEFAULT_SCRIPT]),
            capture_output=True,
            text=True,
            timeout=CONFIG_TIMEOUT,
            cwd=isolate.WORKDIR,
            env=isolate.env(),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    url = res.stdout.strip()
    return url if res.returncode == 0 and urlsplit(url).scheme == "https" else None
