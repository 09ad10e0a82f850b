"""Releases and wheels of a package through pip: the fallback of vpatch's own index client
(`patcher.wheels.indexclient`), used when $VPATCH_PIP names a pip or pip's configuration has a
setting only pip honours (a keyring provider). Two pip commands are used:

- `pip index versions NAME [--json]` lists releases. pip drops yanked releases there and,
  unless `--pre`, pre-releases. pip < 24 has no `--json`: its text line is parsed instead.
  pip without `index` (or an index refusing it) falls back to asking `pip download` for an
  impossible version: pip's error lists every non-yanked release ("from versions: ...").
- `pip download --no-deps --only-binary :all: NAME==X -d DIR` fetches one wheel. Wheels only:
  an sdist would make pip build metadata, i.e. run the package's setup code, just to read
  files. pip's own cache is used (a wheel pip already has is not fetched again), `--retries 0`
  makes an unreachable index fail at once (not after pip's retry loop), and `--progress-bar
  raw` lets vpatch show a download's progress (`patcher.wheels.store`).

`VPATCH_PIP` overrides the pip command (default: this interpreter's `python -m pip`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

from patcher import isolate
from patcher.errors import VpatchError
from patcher.wheels import wheelhouse

DOWNLOAD_TIMEOUT = 1800.0
LIST_TIMEOUT = 300.0
# `===` is PEP 440 arbitrary equality: no release string equals this, so pip lists them all.
_IMPOSSIBLE = "===vpatch-list-versions"
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_AVAILABLE = re.compile(r"^Available versions: (.*)$", re.MULTILINE)
_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)\s*$")
PIP_HINT = "check that `python -m pip download PACKAGE` works here (pip.conf, network, proxy)"


class PipError(VpatchError):
    """pip failed; the message carries the last lines pip printed."""


def pip_command() -> list[str]:
    configured = os.environ.get("VPATCH_PIP", "").strip()
    return shlex.split(configured) if configured else [sys.executable, "-m", "pip"]


def _pip(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    cmd = isolate.argv([*pip_command(), *args])
    env = isolate.env({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
    try:
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=isolate.WORKDIR,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        raise PipError(
            f"cannot run {shlex.join(cmd[:3])}", "set VPATCH_PIP or install pip"
        ) from None
    except subprocess.TimeoutExpired:
        raise PipError(f"pip {args[0]} did not finish within {timeout:.0f} s", PIP_HINT) from None


def _tail(text: str, lines: int = 3) -> str:
    kept = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"


def _platform_args(platforms: Sequence[str]) -> list[str]:
    return [arg for p in platforms for arg in ("--platform", p)]


def parse_versions(words: str) -> list[Version]:
    """Versions from a comma-separated pip listing; anything unparsable is skipped (legacy)."""
    out: set[Version] = set()
    for word in words.split(","):
        try:
            out.add(Version(word.strip()))
        except InvalidVersion:
            continue
    return sorted(out)


def versions_from_download_error(stderr: str) -> list[Version] | None:
    """The "(from versions: ...)" list of pip's "Could not find a version" error, or None."""
    m = _FROM_VERSIONS.search(stderr)
    if m is None:
        return None
    return [] if m.group(1).strip() == "none" else parse_versions(m.group(1))


def list_versions(package: str, pre: bool = False, platforms: Sequence[str] = ()) -> list[Version]:
    """Every non-yanked release of `package` the configured index offers, oldest first."""
    extra = ["--retries", "0", *(["--pre"] if pre else []), *_platform_args(platforms)]
    res = _pip(["index", "versions", package, "--json", *extra], LIST_TIMEOUT)
    if res.returncode == 0:
        doc = json.loads(res.stdout)
        return _keep(parse_versions(",".join(doc.get("versions", []))), pre)
    if "no such option: --json" in res.stderr:  # pip < 24: same listing, as text
        res = _pip(["index", "versions", package, *extra], LIST_TIMEOUT)
        m = _AVAILABLE.search(res.stdout)
        if res.returncode == 0 and m is not None:
            return _keep(parse_versions(m.group(1)), pre)
    if "No matching distribution" in res.stderr:
        return []
    return _keep(_versions_by_download(package, platforms, res.stderr), pre)


def _versions_by_download(package: str, platforms: Sequence[str], why: str) -> list[Version]:
    """Fallback listing: ask pip to download a version no release can have."""
    args = ["download", "--no-deps", "--no-cache-dir", "--dest", os.devnull]
    res = _pip([*args, *_platform_args(platforms), f"{package}{_IMPOSSIBLE}"], LIST_TIMEOUT)
    found = versions_from_download_error(res.stderr)
    if found is None:
        raise PipError(
            f"pip could not list releases of {package}: {_tail(why)} / {_tail(res.stderr)}",
            PIP_HINT,
        )
    return found


def _keep(versions: list[Version], pre: bool) -> list[Version]:
    return versions if pre else [v for v in versions if not v.is_prerelease]


def download_wheel(
    package: str,
    version: Version,
    dest: Path,
    platforms: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Fetch the wheel of package==version into `dest` (an empty directory) and return it.
    `progress(done, total)` is called as pip reports bytes (pip >= 24.1; older pips: never)."""
    res = _download(package, version, dest, platforms, progress, "raw")
    if res.returncode != 0 and "invalid choice: 'raw'" in res.stderr:
        res = _download(package, version, dest, platforms, None, "off")
    found = next(iter(wheelhouse.find([dest], package, version)), None)
    if res.returncode != 0 or found is None:
        raise PipError(
            f"no wheel for {package}=={version} in the wheelhouse or index",
            unavailable_hint(package, version, res.stderr if res.returncode else ""),
        )
    return found


def _download(
    package: str,
    version: Version,
    dest: Path,
    platforms: Sequence[str],
    progress: Callable[[int, int], None] | None,
    bar: str,
) -> subprocess.CompletedProcess[str]:
    args = ["download", "--no-deps", "--only-binary", ":all:", "--retries", "0"]
    args += ["--progress-bar", bar, "--dest", str(dest), *_platform_args(platforms)]
    cmd = isolate.argv([*pip_command(), *args, f"{package}=={version}"])
    env = isolate.env({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=isolate.WORKDIR,
            env=env,
        )
    except FileNotFoundError:
        raise PipError(
            f"cannot run {shlex.join(cmd[:3])}", "set VPATCH_PIP or install pip"
        ) from None
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    out: list[str] = []
    timer = threading.Timer(DOWNLOAD_TIMEOUT, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            m = _PROGRESS.match(line)
            if m is None:
                out.append(line)
            elif progress is not None:
                progress(int(m.group(1)), int(m.group(2)))
        code = proc.wait()
    finally:
        timer.cancel()
        reader.join()
    if code < 0 and timer.finished.is_set():
        raise PipError(f"pip download did not finish within {DOWNLOAD_TIMEOUT:.0f} s", PIP_HINT)
    return subprocess.CompletedProcess(cmd, code, "".join(out), "".join(errors))


_UNREACHABLE = (
    "NewConnectionError",
    "Connection refused",
    "Max retries exceeded",
    "Name or service not known",
    "Temporary failure in name resolution",
    "ProxyError",
    "ConnectTimeout",
    "timed out",
    "Network is unreachable",
)


def unreachable_hint(package: str, version: Version, detail: str) -> str:
    """What to do when no configured index answers (found before pip is run: pip, reading the
    same configuration, could only retry into the same wall)."""
    return (
        f"put its wheel in a --wheelhouse DIR (or $VPATCH_WHEELHOUSE), or point vpatch at an "
        f"index it can reach: PIP_INDEX_URL (or index-url in pip.conf; proxy: HTTPS_PROXY or "
        f"pip's proxy); the package index is unreachable ({detail[:160]})"
    )


def unavailable_hint(package: str, version: Version, stderr: str) -> str:
    """What to do when no wheel of the release can be had, with pip's reason in a few words
    (never pip's retry log)."""
    if any(word in stderr for word in _UNREACHABLE):
        why = "the package index is unreachable"
    elif "No matching distribution" in stderr or "Could not find a version" in stderr:
        why = "found no wheel of it (the index is unreachable, or has none for this platform)"
    else:
        errs = [ln.strip() for ln in stderr.splitlines() if ln.startswith("ERROR:")]
        why = (errs[-1][len("ERROR:") :].strip()[:160] if errs else _tail(stderr, 1)[:160]) or (
            "pip saved no matching wheel"
        )
    return (
        f"put its wheel in a --wheelhouse DIR (or $VPATCH_WHEELHOUSE), or make `python -m pip "
        f"download --no-deps {package}=={version}` work here (pip.conf); pip: {why}"
    )
