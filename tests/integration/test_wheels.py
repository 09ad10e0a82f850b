"""The wheel store (patcher.wheels.store) and `vpatch wheel` (patcher.wheels.build), on real wheels.

click 8.1.7 comes from the package index through pip's own configuration (cached in the test
cache by tests/support/realpkgs.py); vLLM 0.16.0 is the suite's cached wheel (tests/envs.py).
Every test has a store of its own ($VPATCH_WHEEL_STORE) and counts pip's downloads through a
logging $VPATCH_PIP (tests/support/wheellab.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from patcher.rewrite import apply_edits
from patcher.specs.model import load_spec
from patcher.wheels.cache import Cache, Extracted
from patcher.wheels.store import Store
from tests import envs
from tests.conftest import fingerprint, vpatch
from tests.support import handedits, realpkgs, wheellab
from tests.support.handedits import CLICK_EDITS, CLICK_VERSION

CLICK_TYPES = "click/types.py"


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A store of the test's own, no wheelhouse, and a pip whose downloads are counted."""
    realpkgs.wheel("click", CLICK_VERSION)
    env = wheellab.lab_env(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def _log(lab: dict[str, str]) -> Path:
    return Path(lab["VPATCH_TEST_PIP_LOG"])


def site(python: Path) -> Path:
    return next((python.parent.parent / "lib").glob("python3*/site-packages"))


def click_env(dest: Path) -> Path:
    py = realpkgs.venv(dest, "click", CLICK_VERSION)
    for rel, old, new, _op in CLICK_EDITS:
        handedits.edit_file(site(py) / rel, old, new)
    return py


def test_half_installed_env_fetches_the_wheel_once(lab: dict[str, str], tmp_path: Path) -> None:
    """Most files missing (a half-finished install): one pip download for all of them, and
    none on the next run (the store has the wheel, named by its sha256)."""
    py = click_env(tmp_path / "half")
    gone = sorted(p for p in (site(py) / "click").glob("*.py") if p.name != "types.py")[:10]
    for p in gone:
        p.unlink()
    first = vpatch("diff", "click", "--python", py, "--json")
    assert first.code == 0, first.err
    files = {f["file"]: f for f in first.doc["groups"][0]["files"]}
    for p in gone:
        f = files[f"click/{p.name}"]
        assert f["state"] == "missing" and f["pristine"] == "wheel", f
        assert f["diff"].startswith(f"--- a/click/{p.name}")
    assert (
        files[CLICK_TYPES]["pristine"] == "wheel"
        and '+    name = "bool"' in (files[CLICK_TYPES]["diff"])
    )
    assert wheellab.downloads(_log(lab)) == 1
    blobs = list((Path(lab["VPATCH_WHEEL_STORE"]) / "blobs").glob("*.whl"))
    assert len(blobs) == 1
    assert hashlib.sha256(blobs[0].read_bytes()).hexdigest() == blobs[0].stem

    t0 = time.monotonic()
    again = vpatch("diff", "click", "--python", py, "--json")
    warm = time.monotonic() - t0
    assert again.code == 0 and again.doc["groups"] == first.doc["groups"]
    assert wheellab.downloads(_log(lab)) == 1, "the second run must download nothing"
    print(f"warm diff of {len(files)} files: {warm:.2f} s")


def test_air_gapped_wheelhouse_and_one_line_error(lab: dict[str, str], tmp_path: Path) -> None:
    """pip pointed at a closed port on 127.0.0.1: without a wheelhouse, one error line and a
    hint, fast (no retry loop); with --wheelhouse (or $VPATCH_WHEELHOUSE) no pip call at all."""
    py = click_env(tmp_path / "gpu")
    off = wheellab.offline_env()
    bad = vpatch("diff", "click", "--python", py, env=off)
    assert bad.code == 1
    lines = bad.err.splitlines()
    assert lines[0] == (
        "error: pristine side unavailable: no wheel for click==8.1.7 in the wheelhouse or index"
    ), bad.err
    assert len(lines) == 2 and lines[1].startswith("hint: ") and "--wheelhouse" in lines[1]
    assert "the package index is unreachable (http://127.0.0.1:9/simple/click/: " in lines[1]
    assert "Retrying" not in bad.err and "NewConnectionError" not in bad.err
    # No pip download at all: the configured index answered nothing, pip could only fail.
    assert wheellab.downloads(_log(lab)) == 0
    cap = vpatch("capture", "click", "--id", "x", "--python", py, "--no-matrix", env=off)
    assert cap.code == 1 and cap.err.startswith("error: pristine side unavailable: no wheel")
    assert len(cap.err.splitlines()) == 2

    house = wheellab.wheelhouse(tmp_path / "house", realpkgs.wheel("click", CLICK_VERSION))
    calls = wheellab.downloads(_log(lab))
    good = vpatch("diff", "click", "--python", py, "--wheelhouse", house, "--json", env=off)
    assert good.code == 0, good.err
    assert {f["pristine"] for f in good.doc["groups"][0]["files"]} == {"wheel"}
    by_env = vpatch(
        "capture", "click", "--id", "x", "--python", py, "--no-matrix",
        env={**off, "VPATCH_WHEELHOUSE": str(house / realpkgs.wheel("click", CLICK_VERSION).name)},
    )  # fmt: skip
    assert by_env.code == 0, by_env.err
    assert "captured click/types.py" in by_env.err
    spec = tmp_path / "click-bool-name.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    fits = vpatch("matrix", spec, "--wheelhouse", house, "--json", env=off)
    assert fits.code == 0, fits.err  # releases listed from the wheelhouse: pip lists none
    assert [(r["version"], r["outcome"]) for r in fits.doc["releases"]] == [
        (CLICK_VERSION, "would_apply")
    ]
    adopt = vpatch("apply", spec, "--adopt", "--python", py, "--wheelhouse", house, "--json",
                   env=off)  # fmt: skip
    assert adopt.code == 0 and adopt.patch()["outcome"] == "applied", adopt.out + adopt.err
    assert "stay hand edits" in adopt.patch()["message"], adopt.patch()["message"]
    assert vpatch("rollback", spec, "--python", py).code == 0
    # --adopt took exactly the spec's edit: the file's other hand edits stay (issue 25 case 8)
    with zipfile.ZipFile(realpkgs.wheel("click", CLICK_VERSION)) as zf:
        kept = zf.read(CLICK_TYPES).decode()
    for rel, old, new, op in handedits.CLICK_EDITS:
        if rel == CLICK_TYPES and op != "set_value":
            kept = kept.replace(old, new, 1)
    assert (site(py) / CLICK_TYPES).read_text() == kept
    assert wheellab.downloads(_log(lab)) == calls, "a wheelhouse release costs no pip call"

    missing = vpatch("diff", "click", "--python", py, "--wheelhouse", tmp_path / "nope")
    assert missing.code == 2 and missing.err.startswith("error: --wheelhouse")


def test_air_gapped_pristine_side_from_a_wheel_file_on_the_host(
    lab: dict[str, str], tmp_path: Path
) -> None:
    """No index, no wheelhouse on the controller, but the host has the release's wheel: with
    --host-wheel the agent reads the files from it (bounded) and the controller keeps each only
    if it has the sha256 the host's RECORD lists. A host wheel whose member was made to equal
    the host's hand edit (its own RECORD made to agree) is refused: the edit stays visible."""
    py = click_env(tmp_path / "gpu")
    off = wheellab.offline_env()
    on_host = tmp_path / "host-cache" / realpkgs.wheel("click", CLICK_VERSION).name
    wheellab.wheelhouse(on_host.parent, realpkgs.wheel("click", CLICK_VERSION))
    good = vpatch("diff", "click", "--python", py, "--host-wheel", on_host, "--json", env=off)
    assert good.code == 0, good.err
    files = {f["file"]: f for f in good.doc["groups"][0]["files"]}
    assert files[CLICK_TYPES]["pristine"] == "wheel", files[CLICK_TYPES]
    assert '+    name = "bool"' in files[CLICK_TYPES]["diff"]
    out = tmp_path / "x.toml"
    cap = vpatch("capture", "click", "--id", "x", "--python", py, "--no-matrix", "-o", out,
                 "--host-wheel", on_host, env=off)  # fmt: skip
    assert cap.code == 0, cap.err
    assert "bool" in out.read_text()

    edited = (site(py) / CLICK_TYPES).read_bytes()
    wheellab.rewrite_wheel(on_host, CLICK_TYPES, edited, fix_record=True)
    bad = vpatch("diff", "click", "--python", py, "--host-wheel", on_host, "--json", env=off)
    assert bad.code == 1, bad.err
    files = {f["file"]: f for f in bad.doc["groups"][0]["files"]}
    assert files[CLICK_TYPES]["pristine"] == "unavailable"
    assert "not the bytes RECORD lists" in files[CLICK_TYPES]["note"]
    assert files[CLICK_TYPES]["state"] == "modified"
    rel = vpatch("diff", "click", "--python", py, "--host-wheel", "rel/x.whl", env=off)
    assert rel.code == 2 and rel.err.startswith("error: --host-wheel rel/x.whl: not an absolute")


def test_tampered_store_entry_is_refused(lab: dict[str, str], tmp_path: Path) -> None:
    """A store entry poisoned to hold the host's edited file as "pip's bytes" (RECORD made to
    agree) would hide the edit from `vpatch diff`: it is refused and fetched again. A store
    another user could write is not used at all."""
    py = click_env(tmp_path / "host")
    assert vpatch("diff", "click", "--python", py).code == 0
    [blob] = (Path(lab["VPATCH_WHEEL_STORE"]) / "blobs").glob("*.whl")
    edited = (site(py) / CLICK_TYPES).read_bytes()
    wheellab.rewrite_wheel(blob, CLICK_TYPES, edited, fix_record=True)
    with zipfile.ZipFile(blob) as zf:  # the poison is consistent: only the wheel's hash tells
        assert zf.read(CLICK_TYPES) == edited

    after = vpatch("diff", "click", CLICK_TYPES, "--python", py, "--json")
    assert after.code == 0, after.err
    [f] = after.doc["groups"][0]["files"]
    assert f["pristine"] == "wheel" and '+    name = "bool"' in f["diff"], f
    assert wheellab.downloads(_log(lab)) == 2  # refused, fetched again
    assert not blob.exists() or hashlib.sha256(blob.read_bytes()).hexdigest() == blob.stem

    [blob] = (Path(lab["VPATCH_WHEEL_STORE"]) / "blobs").glob("*.whl")
    blob.chmod(0o666)
    shared = vpatch("diff", "click", CLICK_TYPES, "--python", py)
    assert shared.code == 1
    assert "writable by group or others" in shared.err and "hint:" in shared.err
    assert "+    name" not in shared.out


def test_matrix_cache_entry_is_checked_against_record(tmp_path: Path) -> None:
    """The matrix's extracted files: one poisoned (its manifest hash updated to match) is
    not served; the release's RECORD decides."""
    cache = Cache(tmp_path / "m", "click")
    wheel = Store(tmp_path / "s", sources=[realpkgs.wheel("click", CLICK_VERSION)])
    origin, record, files = wheel.read("click", Version(CLICK_VERSION), [CLICK_TYPES])
    assert origin == "wheelhouse" and files[CLICK_TYPES]
    cache.store(Version(CLICK_VERSION), Extracted("click", record, files))
    assert cache.lookup(Version(CLICK_VERSION), CLICK_TYPES) == (True, files[CLICK_TYPES])
    d = cache.release_dir(Version(CLICK_VERSION))
    poison = b"name = 'bool'\n"
    (d / "files" / CLICK_TYPES).write_bytes(poison)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["files"][CLICK_TYPES] = hashlib.sha256(poison).hexdigest()
    (d / "manifest.json").write_text(json.dumps(manifest))
    assert cache.lookup(Version(CLICK_VERSION), CLICK_TYPES) == (False, None)


def _venv(dest: Path) -> Path:
    subprocess.run([envs.HOST_PYTHON, "-m", "venv", "--without-pip", str(dest)], check=True)
    return dest / "bin" / "python"


def _pip(python: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "-q", "--python", str(python), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_patched_wheel_installs_and_is_recognised(lab: dict[str, str], tmp_path: Path) -> None:
    """`vpatch wheel` -> pip install into a fresh venv -> the probe passes in `python -I`, and
    status/verify/ensure there say the specs are in (baked), writing nothing."""
    spec, extra = tmp_path / "click-bool-name.toml", tmp_path / "click-extra-module.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    extra.write_text(wheellab.CLICK_ADD_SPEC)
    out = tmp_path / "dist"
    mask = os.umask(0o022)
    try:
        built = vpatch("wheel", spec, extra, "--package", "click==8.1.7", "-o", out, "--json")
    finally:
        os.umask(mask)
    assert built.code == 0, built.err
    doc = built.doc
    path = Path(doc["wheel"])
    assert path.parent == out and path.name.startswith("click-8.1.7+vpatch.")
    assert path.name.endswith("-py3-none-any.whl") and doc["baked_version"] in path.name
    assert wheellab.record_ok(path) == []
    assert path.stat().st_mode & 0o777 == 0o644  # the umask's mode (022 here), not mkstemp's
    with zipfile.ZipFile(path) as zf:
        info = f"click-{doc['baked_version']}.dist-info"
        meta = json.loads(zf.read(f"{info}/vpatch.json"))
        assert f"Version: {doc['baked_version']}" in zf.read(f"{info}/METADATA").decode()
        baked_types = zf.read(CLICK_TYPES).decode()
    assert [(s["id"], s["outcome"]) for s in meta["specs"]] == [
        ("click-bool-name", "applied"),
        ("click-extra-module", "applied"),
    ]
    assert meta["specs"][0]["digest"] == load_spec(spec).digest
    with zipfile.ZipFile(realpkgs.wheel("click", CLICK_VERSION)) as zf:
        pristine = zf.read(CLICK_TYPES)
    assert meta["specs"][0]["files"][0]["pristine_sha256"] == hashlib.sha256(pristine).hexdigest()
    # the bytes are apply's: the same pure rewrite on pip's file
    variant = load_spec(spec).variant[0]
    assert baked_types == apply_edits(pristine.decode(), variant.edit).source

    py = _venv(tmp_path / "image")
    assert _pip(py, "install", "--no-deps", "--no-index", path).returncode == 0
    assert _pip(py, "check").returncode == 0
    probe = subprocess.run(
        [py, "-I", "-c", "import click, click.vpatch_extra as x; print(click.BOOL.name, x.ANSWER)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["bool", "42"]

    before = fingerprint(py.parent.parent)
    status = vpatch("status", spec, extra, "--python", py, "--json")
    assert status.code == 0, status.err
    for p in status.doc["hosts"][0]["patches"]:
        assert p["outcome"] == "applied" and "baked into the installed wheel" in p["message"], p
    verify = vpatch("verify", spec, extra, "--python", py)
    assert verify.code == 0, verify.out + verify.err
    ensure = vpatch("ensure", spec, "--python", py, "--json")
    assert ensure.code == 0 and ensure.patch()["outcome"] == "already_applied", ensure.out
    assert fingerprint(py.parent.parent) == before, "a baked spec needs no write"

    # pip's own wheel in another venv: the same spec is not in (not_applied), so the check
    # above could have failed
    plain = realpkgs.venv(tmp_path / "plain", "click", CLICK_VERSION)
    no = vpatch("verify", spec, "--python", plain, "--level", "static", "--json")
    assert no.code == 1 and no.patch()["outcome"] == "not_applied"


def test_patched_wheel_installs_with_uv(lab: dict[str, str], tmp_path: Path) -> None:
    """uv, the other installer people build images with, takes the same wheel offline: the
    patched module imports in `python -I`, `uv pip check` is clean, and vpatch reports the spec
    as baked; pip's own wheel installed by uv next to it is `not_applied`, so the check can fail."""
    spec = tmp_path / "click-bool-name.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    built = vpatch("wheel", spec, "--package", "click==8.1.7", "-o", tmp_path / "dist", "--json")
    assert built.code == 0, built.err
    uv = [str(Path(sys.executable).with_name("uv")), "pip"]
    pristine = realpkgs.wheel("click", CLICK_VERSION)
    for name, wheel in [("image", Path(built.doc["wheel"])), ("plain", pristine)]:
        py = _venv(tmp_path / name)
        got = subprocess.run(
            [*uv, "install", "--python", str(py), "--offline", "--no-deps", str(wheel)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert got.returncode == 0, got.stderr
        check = subprocess.run([*uv, "check", "--python", str(py)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        probe = subprocess.run(
            [py, "-I", "-c", "import click; print(click.BOOL.name)"],
            capture_output=True,
            text=True,
            check=True,
        )
        status = vpatch("status", spec, "--python", py, "--json")
        patch = status.doc["hosts"][0]["patches"][0]
        if name == "image":
            assert probe.stdout.split() == ["bool"]
            assert status.code == 0 and patch["outcome"] == "applied", status.out
            assert "baked into the installed wheel" in patch["message"], patch
        else:
            assert probe.stdout.split() == ["boolean"]
            assert patch["outcome"] == "not_applied", status.out


def test_wheel_bad_input_is_exit_2(lab: dict[str, str], tmp_path: Path) -> None:
    spec = tmp_path / "click-bool-name.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    for args, words in [
        (["--package", "click"], "NAME==VERSION"),
        (["--package", "requests==2.31.0"], "another package"),
        (["--package", "click==7.0"], "no variant"),
    ]:
        res = vpatch("wheel", spec, *args, "-o", tmp_path / "out", "--json")
        assert res.code == 2, res.err
        assert words in res.doc["error"], res.doc
    assert not (tmp_path / "out").exists()


@pytest.mark.vllm
def test_vllm_catalog_specs_baked_from_the_cached_wheel(tmp_path: Path) -> None:
    """Both catalog specs on the suite's vLLM 0.16.0 wheel: the baked files are what `vpatch
    apply` writes (the same rewrites, stacked in order, on pip's bytes), RECORD is right."""
    whl = envs.wheel("vllm", "0.16.0")
    ids = ["vllm-eagle3-mla-targets", "vllm-eagle3-mla-backport"]
    t0 = time.monotonic()
    built = vpatch(
        "wheel", *ids, "--package", "vllm==0.16.0", "--from-wheel", whl, "-o", tmp_path, "--json",
        env={"VPATCH_WHEEL_STORE": str(tmp_path / "store"), "VPATCH_PIP": "/bin/false"},
    )  # fmt: skip
    took = time.monotonic() - t0
    assert built.code == 0, built.err
    path = Path(built.doc["wheel"])
    assert path.name.startswith("vllm-0.16.0+vpatch.") and "-cp38-abi3-manylinux" in path.name
    repo = Path(__file__).resolve().parents[2]
    specs = [load_spec(repo / "patches" / f"{i}.toml") for i in ids]
    with zipfile.ZipFile(whl) as src, zipfile.ZipFile(path) as new:
        want: dict[str, str] = {}
        for spec in specs:
            for rel, edits in spec.variant[0].files():
                text = want.get(rel, src.read(rel).decode())
                want[rel] = apply_edits(text, edits).source
        assert len(want) >= 4
        for rel, text in want.items():
            assert new.read(rel).decode() == text, rel
        assert len(new.namelist()) == len(src.namelist()) + 1  # + vpatch.json
    assert wheellab.record_ok(path) == []
    print(f"vpatch wheel on vLLM 0.16.0: {took:.1f} s, {os.path.getsize(path) / 1e6:.0f} MB")

    # RECORD is CSV: the fused-MoE configs' names hold commas (`E=1,N=14336,...json`); uv
    # installs the wheel only when they are quoted, and pip's installed RECORD (which it copies
    # from the wheel's) must still list every file for importlib.metadata
    with zipfile.ZipFile(whl) as src:
        commas = sum("," in n for n in src.namelist())
    assert commas >= 500
    uv = [str(Path(sys.executable).with_name("uv")), "pip", "install", "--offline", "--no-deps"]
    for name in ("uv", "pip"):
        py = _venv(tmp_path / name)
        if name == "uv":
            got = subprocess.run(
                [*uv, "--python", str(py), str(path)], capture_output=True, text=True
            )
        else:
            got = _pip(py, "install", "--no-deps", "--no-index", "--no-compile", path)
        assert got.returncode == 0, got.stderr
        assert "RECORD" not in got.stderr, got.stderr
        listed = subprocess.run(
            [py, "-I", "-c", "import importlib.metadata as m; fs = m.files('vllm');"
             "print(len(fs), sum(',' in str(f) for f in fs))"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        total, named = map(int, listed.stdout.split())
        assert named == commas and total >= len(want), (name, listed.stdout)
        shutil.rmtree(tmp_path / name)


def test_patched_wheel_installed_by_version_from_a_local_index(
    lab: dict[str, str], tmp_path: Path
) -> None:
    """Published to an index (a directory served over HTTP on 127.0.0.1), the patched wheel is
    installed by its version, like any release: how a lock file or a private index pins it."""
    spec = tmp_path / "click-bool-name.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    built = vpatch("wheel", spec, "--package", "click==8.1.7", "-o", tmp_path / "pub", "--json")
    assert built.code == 0, built.err
    version = built.doc["baked_version"]
    with wheellab.serve(tmp_path / "pub") as url:
        py = _venv(tmp_path / "image")
        got = _pip(py, "install", "--no-deps", "--no-index", "--find-links", url,
                   f"click=={version}")  # fmt: skip
        assert got.returncode == 0, got.stderr
    status = vpatch("status", spec, "--python", py, "--json")
    assert status.code == 0 and status.patch()["outcome"] == "applied", status.out
    assert status.doc["hosts"][0]["patches"][0]["version"] == version


def test_baked_specs_are_reported_by_bare_commands_and_taken_out_as_said(
    lab: dict[str, str], tmp_path: Path
) -> None:
    """Issue 39 items 5 and 6 on a real patched click wheel installed by pip: bare `status`
    lists the baked spec (fine: exit 0; a file edited after install: exit 1), bare `diff`
    names it instead of "every file is pip's", bare `rollback` refuses with the take-out
    command, and that command is the one that works: a plain `pip install click==8.1.7` is
    satisfied by the baked wheel and changes nothing."""
    spec = tmp_path / "click-bool-name.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    built = vpatch("wheel", spec, "--package", "click==8.1.7", "-o", tmp_path / "dist", "--json")
    assert built.code == 0, built.err
    py = _venv(tmp_path / "image")
    assert _pip(py, "install", "--no-deps", "--no-index", built.doc["wheel"]).returncode == 0

    status = vpatch("status", "--python", py, "--json")
    assert status.code == 0, status.out + status.err
    [p] = status.doc["hosts"][0]["patches"]
    assert (p["id"], p["outcome"]) == ("click-bool-name", "applied"), p
    assert "baked into the installed wheel" in p["message"] and status.doc["hosts"][0]["ok"]

    diff = vpatch("diff", "click", "--python", py)
    assert diff.code == 0 and "every file is pip's" not in diff.out, diff.out
    assert "click-bool-name baked into the installed wheel" in diff.out, diff.out
    assert vpatch("diff", "click", "--python", py, "--json").doc["groups"][0]["baked"] == [
        "click-bool-name"
    ]

    back = vpatch("rollback", "--python", py, "--json")
    assert back.code == 1, back.out + back.err
    [r] = back.doc["hosts"][0]["patches"]
    assert r["outcome"] == "failed" and "not rolled back" in r["message"], r
    command = r["message"].split("`")[1]
    assert command == "pip install --force-reinstall --no-deps click==8.1.7", r["message"]

    types = site(py) / CLICK_TYPES
    baked_bytes = types.read_bytes()
    types.write_bytes(baked_bytes + b"# edited\n")
    edited = vpatch("status", "--python", py, "--json")
    assert edited.code == 1, edited.out
    assert [a["state"] for a in edited.doc["hosts"][0]["attention"]] == ["baked_differs"]
    types.write_bytes(baked_bytes)

    pristine = realpkgs.wheel("click", CLICK_VERSION)
    links = ["--no-index", "--find-links", str(pristine.parent)]
    assert _pip(py, "install", *links, "click==8.1.7").returncode == 0  # satisfied: a no-op
    assert types.read_bytes() == baked_bytes
    args = command.split()[2:]  # the words after `pip install`
    got = _pip(py, "install", *links, *args)
    assert got.returncode == 0, got.stderr
    with zipfile.ZipFile(pristine) as zf:
        assert types.read_bytes() == zf.read(CLICK_TYPES)
    after = vpatch("status", "--python", py, "--json")
    assert after.code == 0 and after.doc["hosts"][0]["patches"] == [], after.out


def test_the_pristine_wheels_sha256_is_recorded_from_a_wheel_file(
    lab: dict[str, str], tmp_path: Path
) -> None:
    """Issue 39 item 6: built `--from-wheel` (the air-gapped path), vpatch.json's
    `pristine_wheel.sha256` was null: the hash a take-out pins pip's wheel by."""
    spec = tmp_path / "click-bool-name.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    source = realpkgs.wheel("click", CLICK_VERSION)
    built = vpatch("wheel", spec, "--package", "click==8.1.7", "--from-wheel", source,
                   "-o", tmp_path / "dist", "--json")  # fmt: skip
    assert built.code == 0, built.err
    with zipfile.ZipFile(built.doc["wheel"]) as zf:
        info = f"click-{built.doc['baked_version']}.dist-info"
        meta = json.loads(zf.read(f"{info}/vpatch.json"))
    want = hashlib.sha256(source.read_bytes()).hexdigest()
    assert meta["pristine_wheel"] == {"file": source.name, "sha256": want}


def test_a_rollout_refuses_a_host_whose_wheel_has_the_spec_baked_in(
    lab: dict[str, str], tmp_path: Path
) -> None:
    """Issue 39 item 4: the restart ran on the baked code, failed, and the verdict read
    `rolled_back`, "0 of 1 host(s) patched", while the code stayed. Now the apply step
    refuses (nothing written, the restart never runs) and says why."""
    spec = tmp_path / "click-bool-name.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    built = vpatch("wheel", spec, "--package", "click==8.1.7", "-o", tmp_path / "dist", "--json")
    assert built.code == 0, built.err
    py = _venv(tmp_path / "image")
    assert _pip(py, "install", "--no-deps", "--no-index", built.doc["wheel"]).returncode == 0
    ran = tmp_path / "restarted"
    res = vpatch("rollout", spec, "--python", py, "--level", "static", "--restart",
                 f"touch {ran}; false", "--allow-no-traffic", "--json",
                 "--report", tmp_path / "report.json")  # fmt: skip
    assert res.code == 1, res.out + res.err
    host = res.doc["hosts"][0]
    assert (host["rollout"]["verdict"], host["rollout"]["reached"]) == ("not_applied", "apply")
    assert "baked into the installed wheel" in host["error"], host["error"]
    assert "could not roll it back" in host["error"]
    assert not ran.exists(), "the restart ran"
