"""pip's own configuration of where wheels come from, read for a ranged fetch (`patcher.wheels.
remote`): the index URLs, find-links, `no-index`, the CA bundle and the proxy.

The values are pip's: `pip config list` prints every setting of pip's configuration files and
its $PIP_* environment variables (`:env:.index-url`, `global.extra-index-url`, ...), already
merged by pip in its own order, so vpatch reads exactly what `pip download` would use. A
setting vpatch cannot honour itself (a client certificate, `trusted-host`, keyring) makes the
ranged path step aside: `supported` is False and pip downloads the wheel as before.

No index URL configured means pip's default index; its URL is asked of pip's own code (in
pip's interpreter) when the pip command is `PYTHON -m pip`, and never written here.
"""

from __future__ import annotations

import ast
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from patcher import isolate

# Settings pip applies that the ranged path does not: any of them set, pip does the fetch.
_UNHONOURED = ("client-cert", "trusted-host", "keyring-provider", "proxy-cert", "use-feature")
# Which section wins for a key: pip's environment, then its download command, then global.
_SECTIONS = (":env:", "download", "global")
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
    supported: bool = True  # False: a setting only pip honours; pip fetches
    why: str = ""
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
    if _truthy(setting(values, "no-index")):
        return IndexConfig(supported=False, why="pip is configured with no-index", values=values)
    for key in _UNHONOURED:
        if setting(values, key):
            return IndexConfig(supported=False, why=f"pip's {key} is set", values=values)
    index = setting(values, "index-url") or default_index
    urls = [index] if index else []
    urls += (setting(values, "extra-index-url") or "").split()
    local: list[Path] = []
    for link in (setting(values, "find-links") or "").split():
        local.append(_local_path(link))
    remote: list[str] = []
    for url in urls:
        scheme = urlsplit(url).scheme
        if scheme == "file":
            local.append(_local_path(url))
        elif scheme in ("http", "https"):
            remote.append(url)
    if not remote:
        return IndexConfig(local_dirs=tuple(local), supported=False, why="no http(s) index")
    return IndexConfig(
        index_urls=tuple(remote),
        local_dirs=tuple(local),
        cert=setting(values, "cert"),
        proxy=setting(values, "proxy"),
        timeout=_seconds(setting(values, "timeout") or setting(values, "default-timeout")),
        values=values,
    )


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
