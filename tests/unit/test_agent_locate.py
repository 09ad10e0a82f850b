"""The agent's dist-info fast path finds exactly what importlib.metadata finds, or defers."""

from __future__ import annotations

import importlib.metadata as metadata
import subprocess
import sys
from pathlib import Path

import pytest

from patcher import agent
from patcher.agent import locate


def test_fast_path_agrees_with_importlib_metadata_on_every_installed_distribution() -> None:
    names = sorted({d.metadata["Name"] for d in metadata.distributions()})
    assert len(names) > 30  # the test venv: pydantic, libcst, rich, pytest, ...
    answered = 0
    for name in names:
        fast, slow = locate._fast(name), locate._slow(name)
        assert slow is not None, name
        if fast is None:
            continue
        answered += 1
        assert fast == slow, name
        # Spellings pip accepts find the same distribution.
        assert locate._fast(name.upper().replace("-", "_")) == fast, name
    assert answered >= len(names) - 2, f"fast path answered {answered} of {len(names)}"


def _dist(site: Path, dirname: str, meta: str, record: str | None) -> Path:
    info = site / dirname
    info.mkdir(parents=True)
    (info / "METADATA").write_text(meta)
    if record is not None:
        (info / "RECORD").write_text(record)
    return info


def test_record_hashes_in_hex_and_files_without_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    record = (
        "demo/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n"
        '"demo/with,comma.py",sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n'
        "demo-1.0.dist-info/RECORD,,\n"
    )
    _dist(
        site,
        "Demo_Pkg-1.0.dist-info",
        "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        record,
    )
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(site)])
    dist = locate.distribution("demo.pkg")
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256(b"")
    assert dist == locate.Dist(
        "demo-pkg",
        "1.0",
        str(site.resolve()),
        {
            "demo/__init__.py": empty,
            "demo/with,comma.py": empty,
            "demo-1.0.dist-info/RECORD": None,
        },
    )
    assert dist == locate._slow("demo-pkg")


def test_no_record_means_no_ownership_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dist(tmp_path, "demo-2.0.dist-info", "Name: demo\nVersion: 2.0\n", None)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    dist = locate.distribution("demo")
    assert dist is not None and dist.record is None and dist.version == "2.0"
    assert dist == locate._slow("demo")


@pytest.mark.parametrize(
    "layout",
    [
        # An egg-info next to it, or two dist-infos of one name (a broken upgrade): which one
        # importlib.metadata takes depends on its version's order rules, so it decides.
        {"demo-1.0.dist-info": "1.0", "demo-0.9-py3.11.egg-info": "0.9"},
        {"demo-1.0.dist-info": "1.0", "demo-1.1.dist-info": "1.1"},
        # METADATA without a version: not ours to interpret.
        {"demo-1.0.dist-info": ""},
    ],
)
def test_fast_path_defers_when_unsure(
    layout: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for dirname, version in layout.items():
        meta = "Name: demo\n" + (f"Version: {version}\n" if version else "")
        if dirname.endswith(".egg-info"):
            (tmp_path / dirname).mkdir()
            (tmp_path / dirname / "PKG-INFO").write_text(meta)
        else:
            _dist(tmp_path, dirname, meta, "")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert locate._fast("demo") is None
    assert locate.distribution("demo") == locate._slow("demo")


def test_first_path_entry_wins_like_the_import_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, system = tmp_path / "user", tmp_path / "system"
    _dist(user, "demo-2.0.dist-info", "Name: demo\nVersion: 2.0\n", "")
    _dist(system, "demo-1.0.dist-info", "Name: demo\nVersion: 1.0\n", "")
    monkeypatch.setattr(sys, "path", [str(user), str(system)])
    fast = locate._fast("demo")
    assert fast is not None and fast.version == "2.0" and fast == locate._slow("demo")
    assert locate.distribution("absent-package") is None


def test_agent_call_imports_neither_importlib_metadata_nor_the_op_modules_it_does_not_use() -> None:
    """The point of the fast path and the lazy imports: an inspect of a wheel-installed package
    in a fresh `python -I` loads none of these (each costs milliseconds on every call)."""
    code = (
        "import json, sys\n"
        "from patcher import agent\n"
        "out = agent.handle({'op': 'inspect', 'packages': {'pydantic': ['pydantic/main.py']},"
        " 'state_dir': sys.argv[1]})\n"
        "assert out['ok'] and out['packages']['pydantic']['version'], out\n"
        "heavy = ['importlib.metadata', 'email', 'zipfile', 'tempfile', 'socket', 'subprocess',"
        " 'py_compile', 'urllib.request', 'patcher.agent.probe', 'patcher.agent.fetch']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, "-c", code, "/nonexistent/state"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert res.stdout.strip() == "[]", res.stdout + res.stderr


def test_a_record_digest_that_is_not_base64_refuses_the_dist_info(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RECORD line whose digest does not decode (the env's owner wrote it) made the agent's
    inspect raise past every handler (the agent died); now the dist-info is refused like a
    hostile one: the package reads as not installed, and inspect answers."""
    site = tmp_path / "site"
    bad = "demo/__init__.py,sha256=*" + "A" * 42 + ",0\n"
    _dist(site, "demo-1.0.dist-info", "Name: demo\nVersion: 1.0\n", bad)
    monkeypatch.setattr(sys, "path", [str(site)])
    assert locate.distribution("demo") is None
    res = agent.handle(
        {"op": "inspect", "packages": {"demo": ["demo/__init__.py"]}, "state_dir": None}
    )
    assert res["ok"] and res["packages"]["demo"]["version"] is None, res
