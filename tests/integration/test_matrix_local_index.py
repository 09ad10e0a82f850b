"""`vpatch matrix` against a package index made on disk, through the real pip.

The index is a PEP 503 "simple" directory served by pip's own file:// support, with the user's
pip configuration switched off (PIP_CONFIG_FILE=/dev/null), so these tests exercise the exact
pip commands the real matrix runs (listing, yanked and pre-release filtering, download) without
any network. Every outcome of the matrix has a release here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from patcher.specs.model import PatchSpec
from patcher.wheels import matrix
from patcher.wheels.index import list_versions, versions_from_download_error
from patcher.wheels.wheel import record_files
from tests.conftest import vpatch
from tests.support.specs import edit, spec_toml, variant

PKG = "vpatch-fake"
MOD = "vpatch_fake/mod.py"
OLD = 'def check():\n    SUPPORTED = ["a"]\n'
# version -> {archive member: text}; None for the module = the wheel lacks it.
RELEASES: dict[str, dict[str, str]] = {
    "0.9": {MOD: OLD},
    "1.0": {MOD: OLD},
    "1.1": {MOD: 'def check():\n    SUPPORTED = ["a", "b"]\n'},
    "1.2": {MOD: 'def check():\n    OTHER = ["a"]\n'},
    "1.3": {MOD: 'def check():\n    SUPPORTED = ["a"]\n    SUPPORTED = ["c"]\n'},
    "1.4": {"vpatch_fake/other.py": "x = 1\n"},
    "1.5": {f"vpatch_fake-1.5.data/purelib/{MOD}": OLD},
    "1.6": {MOD: "def check(:\n"},
    "2.0": {MOD: "# fixed upstream\n"},
    "2.6": {MOD: OLD},
    "3.0rc1": {MOD: OLD},
    "1.7": {MOD: OLD},  # yanked
}
YANKED = {"1.7"}
SPEC_TOML = spec_toml(
    id="fake-supported",
    summary="b is supported",
    package=PKG,
    variants=[
        variant(
            ">=1.0,<2.0",
            [edit("ensure_elements", scope="check", target="SUPPORTED", values=["b"])],
            file=MOD,
        ),
        variant(">=2.0,<2.5", [], upstream="2.0 supports b"),
    ],
)
EXPECTED = [
    ("0.9", None, "not_covered"),
    ("1.0", 0, "would_apply"),
    ("1.1", 0, "satisfied_upstream"),
    ("1.2", 0, "anchor_missing"),
    ("1.3", 0, "ambiguous"),
    ("1.4", 0, "no_file"),
    ("1.5", 0, "would_apply"),
    ("1.6", 0, "failed"),
    ("2.0", 1, "satisfied_upstream"),
    ("2.6", None, "not_covered"),
]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(dest: Path, version: str, members: dict[str, str]) -> Path:
    """A minimal but valid wheel: METADATA, WHEEL and a RECORD with real hashes."""
    info = f"vpatch_fake-{version}.dist-info"
    files = {
        **{k: v.encode() for k, v in members.items()},
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{n},sha256={_b64(d)},{len(d)}\n" for n, d in files.items())
    record += f"{info}/RECORD,,\n"
    path = dest / f"vpatch_fake-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PEP 503 simple index on disk; 1.7 is yanked (PEP 592 data-yanked)."""
    root = tmp_path_factory.mktemp("index")
    project = root / "simple" / PKG
    project.mkdir(parents=True)
    links = []
    for version, members in RELEASES.items():
        whl = make_wheel(project, version, members)
        yanked = ' data-yanked=""' if version in YANKED else ""
        links.append(f'<a href="{whl.name}"{yanked}>{whl.name}</a>')
    (project / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
    return root / "simple"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One matrix cache for the module: later tests reuse what earlier ones fetched, as users do."""
    return tmp_path_factory.mktemp("matrix-cache")


@pytest.fixture
def pip_env(index: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """pip sees only the on-disk index (the user's pip configuration is switched off)."""
    env = {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": index.as_uri(),
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "VPATCH_MATRIX_CACHE": str(shared_cache),
        "VPATCH_MATRIX_WHEELS": "",
        "VPATCH_WHEEL_STORE": str(shared_cache / "wheel-store"),
        "VPATCH_WHEELHOUSE": "",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "fake.toml"
    path.write_text(SPEC_TOML)
    return path


def _spec(path: Path) -> PatchSpec:
    from patcher.specs.model import load_spec

    return load_spec(path)


def test_listing_drops_yanked_and_prereleases(pip_env: dict[str, str]) -> None:
    final = [str(v) for v in list_versions(PKG)]
    assert final == ["0.9", "1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "2.0", "2.6"]
    assert "3.0rc1" in [str(v) for v in list_versions(PKG, pre=True)]


def test_listing_falls_back_to_pip_download_error(
    pip_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pip without `index versions`: the "(from versions: ...)" list of a failed download."""
    wrapper = tmp_path / "pip-without-index"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = index ]; then echo "ERROR: unknown command \\"index\\"" >&2; exit 1; fi\n'
        f'exec {sys.executable} -m pip "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("VPATCH_PIP", str(wrapper))
    final = [str(v) for v in list_versions(PKG)]
    assert final == ["0.9", "1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "2.0", "2.6"]


def test_download_error_parsing() -> None:
    err = (
        "ERROR: Ignored the following yanked versions: 1.7\n"
        "ERROR: Could not find a version that satisfies the requirement x===y "
        "(from versions: 0.9, 1.0, 1.10, 2.0rc1, not-a-version)\n"
    )
    got = versions_from_download_error(err)
    assert got == [Version("0.9"), Version("1.0"), Version("1.10"), Version("2.0rc1")]
    assert versions_from_download_error("(from versions: none)") == []
    assert versions_from_download_error("ERROR: no route to host") is None


def test_matrix_table_every_outcome_and_cache(pip_env: dict[str, str], spec_file: Path) -> None:
    run = vpatch("matrix", spec_file, "--versions", ">=0.9", "--json", env=pip_env)
    assert run.code == 1, run.err  # anchor_missing, ambiguous, failed, not_covered in range
    doc = run.doc
    assert doc["spec"] == "fake-supported" and doc["package"] == PKG
    assert set(doc) == {
        *("schema_version", "command", "ok", "spec", "package", "releases"),
        *("platforms", "no_wheel"),  # no --platform: [] and []
    }
    assert doc["platforms"] == [] and doc["no_wheel"] == []
    assert doc["command"] == "matrix" and doc["ok"] is False
    got = [(r["version"], r["variant"], r["outcome"]) for r in doc["releases"]]
    assert got == EXPECTED
    by_version = {r["version"]: r["message"] for r in doc["releases"]}
    assert "added" in by_version["1.0"] and "already contains" in by_version["1.1"]
    assert "2.0 supports b" in by_version["2.0"]
    assert "cannot parse" in by_version["1.6"]

    # The cache holds the target files and RECORD, never a wheel; a second run fetches nothing.
    cache = Path(pip_env["VPATCH_MATRIX_CACHE"])
    assert not list(cache.rglob("*.whl"))
    assert (cache / PKG / "1.0" / "files" / MOD).read_text() == OLD
    assert (cache / PKG / "1.5" / "files" / MOD).read_text() == OLD  # .data/purelib mapped
    assert "RECORD" in os.listdir(cache / PKG / "1.4")
    again, stats = matrix.build(_spec(spec_file), versions=">=0.9", cache_root=cache)
    assert [(r.version, r.variant, r.outcome) for r in again.releases] == EXPECTED
    assert stats.downloaded == 0 and stats.reused_wheels == 0
    assert stats.cached_files == 7  # 1.0-1.6 (1.4 from RECORD alone)
    assert stats.cached_results == 5 and stats.computed == 1  # 1.6 failed: never cached


def test_default_range_starts_at_first_covered_release(
    pip_env: dict[str, str], spec_file: Path
) -> None:
    """No --versions: 0.9 (older than every variant) is left out; 2.6 (a gap after the last
    variant) is shown, as not_covered, because a newer release is exactly what to notice."""
    run = vpatch("matrix", spec_file, "--json", env=pip_env)
    versions = [r["version"] for r in run.doc["releases"]]
    assert versions[0] == "1.0" and versions[-1] == "2.6"
    assert run.code == 1


def test_fitting_range_exits_0_and_prints_a_table(pip_env: dict[str, str], spec_file: Path) -> None:
    run = vpatch("matrix", spec_file, "--versions", ">=1.0,<1.2", env=pip_env)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].startswith("fake-supported: vpatch-fake >=1.0,<1.2 (2 releases)")
    assert lines[1].split() == ["version", "variant", "outcome", "message"]
    assert lines[2].split()[:3] == ["1.0", "0", "would_apply"]
    assert lines[3].split()[:3] == ["1.1", "0", "satisfied_upstream"]
    assert lines[-1].startswith("matrix: ok")


def test_pre_releases_only_with_pre(pip_env: dict[str, str], spec_file: Path) -> None:
    without = vpatch("matrix", spec_file, "--versions", ">=2.6", "--json", env=pip_env)
    assert [r["version"] for r in without.doc["releases"]] == ["2.6"]
    with_pre = vpatch("matrix", spec_file, "--versions", ">=2.6", "--pre", "--json", env=pip_env)
    assert [r["version"] for r in with_pre.doc["releases"]] == ["2.6", "3.0rc1"]


def test_wheels_on_disk_are_reused_and_kept(
    pip_env: dict[str, str], spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "wheels"
    mine.mkdir()
    kept = make_wheel(mine, "1.1", RELEASES["1.1"])
    (mine / "vpatch_fake-1.0-py3-none-any.whl").write_bytes(b"half a download")  # corrupt
    monkeypatch.setenv("VPATCH_MATRIX_WHEELS", f"{tmp_path / 'missing'}{os.pathsep}{mine}")
    m, stats = matrix.build(_spec(spec_file), versions=">=1.0,<1.2", cache_root=tmp_path / "c")
    assert [r.outcome for r in m.releases] == ["would_apply", "satisfied_upstream"]
    assert stats.reused_wheels == 1 and stats.downloaded == 1  # the corrupt one is re-fetched
    assert kept.exists() and (mine / "vpatch_fake-1.0-py3-none-any.whl").exists()


def test_bad_input_exits_2_before_any_download(
    pip_env: dict[str, str], spec_file: Path, tmp_path: Path
) -> None:
    env = {**pip_env, "VPATCH_MATRIX_CACHE": str(tmp_path / "fresh")}
    bad = vpatch("matrix", spec_file, "--versions", "0.11+", env=env)
    assert bad.code == 2 and "PEP 440" in bad.err
    jobs = vpatch("matrix", spec_file, "--jobs", "0", env=env)
    assert jobs.code == 2
    empty = vpatch("matrix", spec_file, "--versions", ">=99", env=env)
    assert empty.code == 2 and "no release of vpatch-fake" in empty.err
    assert not (tmp_path / "fresh").exists()


def test_download_failure_is_a_failed_row(pip_env: dict[str, str], spec_file: Path) -> None:
    """A listed release pip cannot download: its row says why; the others still answer."""
    spec = _spec(spec_file)

    def listing(package: str, pre: bool = False, platforms: object = ()) -> list[Version]:
        return [Version("1.0"), Version("1.8")]  # 1.8 is not in the index

    m, _ = matrix.build(
        spec, versions=None, cache_root=Path(pip_env["VPATCH_MATRIX_CACHE"]), list_versions=listing
    )
    assert [(r.version, r.outcome) for r in m.releases] == [
        ("1.0", "would_apply"),
        ("1.8", "failed"),
    ]
    assert "no wheel for vpatch-fake==1.8 in the wheelhouse or index" in m.releases[1].message
    assert not m.ok


def test_record_mapping_and_json_shape() -> None:
    record = (
        "pkg/a.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n"
        "pkg-1.data/purelib/pkg/b.py,,\n"
        "pkg-1.data/scripts/tool,,\n"
        "pkg-1.dist-info/RECORD,,\n"
    )
    files = record_files(record)
    assert files["pkg/a.py"] == hashlib.sha256(b"").hexdigest()
    assert "pkg/b.py" in files and "tool" not in files and "pkg-1.data/scripts/tool" not in files
    m = matrix.Matrix("s", "p", [matrix.Release("1.0", None, "not_covered", "x")], ">=1")
    assert json.loads(json.dumps(m.to_json())) == {
        "schema_version": 1,
        "command": "matrix",
        "ok": False,
        "spec": "s",
        "package": "p",
        "releases": [{"version": "1.0", "variant": None, "outcome": "not_covered", "message": "x"}],
        "platforms": [],
        "no_wheel": [],
    }


def test_package_pip_does_not_list_is_exit_1(pip_env: dict[str, str], tmp_path: Path) -> None:
    """A typo'd package and an unreachable index look the same to pip: exit 1 with a hint."""
    spec = tmp_path / "absent.toml"
    spec.write_text(SPEC_TOML.replace(f'package = "{PKG}"', 'package = "vpatch-absent"'))
    run = vpatch("matrix", spec, env=pip_env)
    assert run.code == 1
    assert "no configured index lists a release of vpatch-absent" in run.err
    assert "PIP_INDEX_URL" in run.err and "--wheelhouse" in run.err
