"""pip's configuration (and uv's) read from their own files and environment, without pip.

A `uv tool` or pipx environment has no pip, so `pip config list` cannot be asked. pip's rules
are followed here instead, for the settings that say where wheels come from:

- files, later ones winning: every `pip/pip.conf` under $XDG_CONFIG_DIRS (default /etc/xdg),
  then /etc/pip.conf (pip's "global" files); then ~/.pip/pip.conf and
  $XDG_CONFIG_HOME/pip/pip.conf (default ~/.config; the "user" files, skipped when
  $PIP_CONFIG_FILE names an existing file); then `pip.conf` in the environment
  ($VIRTUAL_ENV, else this interpreter's prefix); then $PIP_CONFIG_FILE. `PIP_CONFIG_FILE=
  /dev/null` loads no file at all, as in pip.
- sections: [global], [install] (the command that put the files on the hosts), [download];
- the environment: every `PIP_<NAME>` (e.g. PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS,
  PIP_TRUSTED_HOST, PIP_CERT, PIP_CLIENT_CERT), over every file;
- names as pip reads them: case-insensitive, `_` and `-` alike.

The result is the same `section.key -> value` map `pip config list` prints (`:env:.index-url`,
`global.extra-index-url`, ...), so `patcher.wheels.pipconf.decide` is one decision for both.

uv's settings enter as the lowest section, `uv`, used only where pip's configuration says
nothing (a user who configured uv and not pip): $UV_DEFAULT_INDEX / $UV_INDEX_URL,
$UV_INDEX / $UV_EXTRA_INDEX_URL, $UV_FIND_LINKS, and `uv.toml` ($UV_CONFIG_FILE, else
$XDG_CONFIG_HOME/uv/uv.toml, else /etc/uv/uv.toml; its `index-url`, `extra-index-url`,
`find-links`, `[[index]]` tables and the same keys under `[pip]`).
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The sections of a pip file vpatch reads (pip's download reads global and download; install
# is where the hosts' files came from, so its index counts too).
SECTIONS = ("global", "install", "download")
_IGNORED_ENV = ("version", "help")  # pip's own exceptions among PIP_* names
_MAX_FILE = 1024 * 1024


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def config_files(environ: Mapping[str, str], home: Path, prefix: Path) -> list[Path]:
    """pip's configuration files in load order (later wins); [] under PIP_CONFIG_FILE=
    /dev/null. Pure: nothing is read here but whether $PIP_CONFIG_FILE exists."""
    env_file = environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    dirs = [d for d in environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":") if d]
    files = [Path(d) / "pip" / "pip.conf" for d in dirs] + [Path("/etc/pip.conf")]
    if not (env_file and os.path.exists(env_file)):
        config_home = environ.get("XDG_CONFIG_HOME") or str(home / ".config")
        files += [home / ".pip" / "pip.conf", Path(config_home) / "pip" / "pip.conf"]
    files.append(Path(environ.get("VIRTUAL_ENV") or prefix) / "pip.conf")
    if env_file:
        files.append(Path(env_file))
    return files


def parse_ini(text: str) -> dict[str, str]:
    """`section.key -> value` of one pip file, for the sections vpatch reads (a file pip
    could not parse either gives nothing)."""
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return {}
    out: dict[str, str] = {}
    for section in parser.sections():
        name = section.strip().lower()
        if name in SECTIONS:
            for key, value in parser.items(section):
                out[f"{name}.{_key(key)}"] = value
    return out


def env_values(environ: Mapping[str, str]) -> dict[str, str]:
    """`:env:.key -> value` of every PIP_* variable, as pip reads its environment."""
    out: dict[str, str] = {}
    for name, value in environ.items():
        if name.startswith("PIP_") and name[4:].lower() not in _IGNORED_ENV:
            out[f":env:.{_key(name[4:])}"] = value
    return out


def uv_values(environ: Mapping[str, str], doc: Mapping[str, Any]) -> dict[str, str]:
    """`uv.key -> value` from uv's environment over its uv.toml (`doc`, already parsed)."""
    out: dict[str, str] = {}
    pip_table = doc.get("pip")
    _uv_table(doc, out)
    _uv_table(pip_table if isinstance(pip_table, dict) else {}, out)
    default = environ.get("UV_DEFAULT_INDEX") or environ.get("UV_INDEX_URL")
    if default:
        out["uv.index-url"] = default
    extra = " ".join(_index_url(w) for w in environ.get("UV_INDEX", "").split())
    extra = " ".join(w for w in (extra, environ.get("UV_EXTRA_INDEX_URL", "")) if w)
    if extra.strip():
        out["uv.extra-index-url"] = extra
    if environ.get("UV_FIND_LINKS"):
        out["uv.find-links"] = " ".join(environ["UV_FIND_LINKS"].replace(",", " ").split())
    return out


def _index_url(word: str) -> str:
    """uv's `NAME=URL` index entry's URL (a plain URL as it is)."""
    name, sep, url = word.partition("=")
    return url if sep and "://" not in name else word


def _words(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []


def _uv_table(table: Mapping[str, Any], out: dict[str, str]) -> None:
    for key in ("index-url", "extra-index-url", "find-links"):
        words = _words(table.get(key))
        if words:
            out[f"uv.{key}"] = " ".join(words)
    extra: list[str] = []
    for entry in table.get("index", []) if isinstance(table.get("index"), list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            if entry.get("default") is True:
                out["uv.index-url"] = entry["url"]
            else:
                extra.append(entry["url"])
    if extra:
        out["uv.extra-index-url"] = " ".join([*extra, *_words(out.get("uv.extra-index-url"))])


def _read_text(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(_MAX_FILE).decode("utf-8", "replace")
    except OSError:
        return None


def _uv_doc(environ: Mapping[str, str], home: Path) -> dict[str, Any]:
    if environ.get("UV_NO_CONFIG"):
        return {}
    from patcher._compat import tomllib

    named = environ.get("UV_CONFIG_FILE")
    config_home = environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    candidates = [Path(named)] if named else [Path(config_home) / "uv" / "uv.toml"]
    candidates += [] if named else [Path("/etc/uv/uv.toml")]
    for path in candidates:
        text = _read_text(path)
        if text is not None:
            try:
                doc = tomllib.loads(text)
            except tomllib.TOMLDecodeError:
                return {}
            return doc
    return {}


def read(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """pip's merged settings (files in pip's order, then PIP_*), with uv's under `uv.`."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("HOME") or Path.home())
    values: dict[str, str] = {}
    for path in config_files(environ, home, Path(sys.prefix)):
        text = _read_text(path)
        if text is not None:
            values.update(parse_ini(text))
    values.update(env_values(environ))
    values.update(uv_values(environ, _uv_doc(environ, home)))
    return values


def _pip_index_module() -> list[Path]:
    """Where pip's `_internal/models/index.py` may be: this environment's pip, else the base
    interpreter's (a `uv tool`/pipx venv has none of its own, its Python often has one)."""
    import importlib.util

    out: list[Path] = []
    try:
        spec = importlib.util.find_spec("pip")  # finds, never imports, a top-level package
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        out += [
            Path(p) / "_internal" / "models" / "index.py" for p in spec.submodule_search_locations
        ]
    for base in dict.fromkeys((sys.base_prefix, "/usr/local", "/usr")):
        for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages"):
            out += sorted(Path(base).glob(f"{pattern}/pip/_internal/models/index.py"))
        out.append(Path(base) / "lib/python3/dist-packages/pip/_internal/models/index.py")
    return out


def default_index_in(source: str) -> str | None:
    """The https URL pip's `PackageIndex(...)` is made with in its models/index.py (PURE: the
    source is parsed, never run)."""
    import ast

    from patcher import pyast

    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "PackageIndex"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.startswith("https://")
        ):
            return node.args[0].value.rstrip("/") + "/simple"
    return None


def _bundled_pip_source() -> str | None:
    """pip's models/index.py inside the pip wheel ensurepip bundles with the stdlib (a Python
    without pip installed, e.g. one uv manages, still has it), read without extracting."""
    import zipfile

    for base in dict.fromkeys((sys.prefix, sys.base_prefix)):
        for wheel in sorted(Path(base).glob("lib/python3*/ensurepip/_bundled/pip-*.whl")):
            try:
                with zipfile.ZipFile(wheel) as zf:
                    info = zf.getinfo("pip/_internal/models/index.py")
                    if info.file_size > _MAX_FILE:
                        continue
                    return zf.read(info).decode("utf-8", "replace")
            except (OSError, KeyError, zipfile.BadZipFile):
                continue
    return None


def pip_default_index() -> str | None:
    """pip's built-in index URL, read from pip's own source (the first pip found: installed,
    else the one ensurepip bundles), or None when there is no pip anywhere (then an index
    must be configured: the hint says how)."""
    for path in _pip_index_module():
        text = _read_text(path)
        url = default_index_in(text) if text else None
        if url:
            return url
    bundled = _bundled_pip_source()
    return default_index_in(bundled) if bundled else None
