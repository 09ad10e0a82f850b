"""pip's own choice of a release's wheel, for the conformance test of vpatch's
(tests/integration/test_pip_choice.py): `pip install --dry-run --report -` with pip's own
configuration (the dev venv's pip), answers kept under the test cache, keyed by the query,
pip's version and the files the indexes list for the project (a new upload asks pip again)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote

from tests import envs

ROOT = envs.CACHE / "pipchoice"


def _pip_version() -> str:
    import pip

    return str(pip.__version__)


def choice(pin: str, python: str, platform: str, listed: Sequence[object]) -> str | None:
    """The URL (unquoted) of the file pip's report installs for `pin` on that Python and
    platform (binary only, no dependencies), or None when pip finds no distribution; `listed`
    is what the key adds of the indexes' state (the project's files as vpatch reads them)."""
    key = hashlib.sha256(
        json.dumps(
            ["url", pin, python, platform, _pip_version(), list(listed)], default=str
        ).encode()
    ).hexdigest()[:32]
    kept = ROOT / "answers" / f"{key}.json"
    if kept.is_file():
        got: str | None = json.loads(kept.read_text())["url"]
        return got
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--report",
            "-",
            "--quiet",
            "--no-deps",
            "--ignore-installed",
            "--only-binary",
            ":all:",
            "--python-version",
            python,
            "--platform",
            platform,
            pin,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    if done.returncode != 0:
        # none to take: pip says so, or (a constraint from pip's configuration naming the
        # project) says the pin and the constraint cannot both be met, with --no-deps the
        # same fact
        nothing = ("No matching distribution found", "ResolutionImpossible")
        assert any(words in done.stderr for words in nothing), done.stderr
        answer: str | None = None
    else:
        [item] = json.loads(done.stdout)["install"]
        answer = unquote(item["download_info"]["url"])
    kept.parent.mkdir(parents=True, exist_ok=True)
    tmp = kept.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pin": pin, "python": python, "platform": platform, "url": answer}))
    tmp.replace(kept)
    return answer


def store_root() -> Path:
    """Where vpatch's index client keeps the project pages between runs."""
    return ROOT / "store"
