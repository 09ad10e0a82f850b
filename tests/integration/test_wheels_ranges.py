"""Only the needed members of a wheel, by HTTP range requests on pip's configured index
(patcher.wheels.remote), against a real index server on 127.0.0.1 (tests/support/rangeindex.py)
that counts every body byte it sends.

pip's configuration is the test's own: PIP_INDEX_URL points at the server, the user's files are
off (PIP_CONFIG_FILE=/dev/null); the store and the matrix cache are empty per test, and pip's
downloads are counted through a logging $VPATCH_PIP (tests/support/wheellab.py).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from patcher.specs.model import load_spec
from tests import envs
from tests.conftest import vpatch
from tests.support import handedits, rangeindex, realpkgs, wheellab
from tests.support.handedits import CLICK_EDITS, CLICK_VERSION
from tests.support.specs import edit, spec_toml

CLICK_TYPES = "click/types.py"
LIMIT = 5_000_000  # issue 28: a cold capture of one vLLM file moves less than 5 MB


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty store and matrix cache, no wheelhouse, pip's downloads logged; the log."""
    env = wheellab.lab_env(tmp_path)
    env["PIP_NO_CACHE_DIR"] = "1"  # pip's own cache would hide a download from the server
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return Path(env["VPATCH_TEST_PIP_LOG"])


def _click_env(dest: Path) -> Path:
    py = realpkgs.venv(dest, "click", CLICK_VERSION)
    site = next((py.parent.parent / "lib").glob("python3*/site-packages"))
    for rel, old, new, _op in CLICK_EDITS:
        handedits.edit_file(site / rel, old, new)
    return py


def _blobs(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "store" / "blobs").glob("*.whl"))


@pytest.mark.vllm
def test_cold_capture_of_one_vllm_file_moves_kilobytes(lab: Path, tmp_path: Path) -> None:
    """The seed's story cold, through an index that honours Range: `diff` then `capture`
    (with its matrix over the neighbouring releases the index lists) of one hand-edited vLLM
    0.16.0 file move well under 5 MB of the 508 MB wheel, and pip downloads nothing."""
    wheel = envs.wheel("vllm", "0.16.0")
    edited = envs.clone("0.16.0", tmp_path / "edited")
    handedits.sed_i(envs.site_packages(edited) / handedits.SEED_REL, handedits.SEED_SED)
    py = edited / "bin" / "python"
    with rangeindex.serve([wheel]) as index:
        env = rangeindex.pip_env(index)
        t0 = time.monotonic()
        diff = vpatch("diff", "vllm", "--python", py, "--json", env=env)
        took_diff = time.monotonic() - t0
        assert diff.code == 0, diff.err
        [f] = diff.doc["groups"][0]["files"]
        assert f["file"] == handedits.SEED_REL and f["pristine"] == "wheel"
        assert '+            "kimi_k2",' in f["diff"]
        diff_bytes = index.sent
        index.reset()
        out = tmp_path / "vllm-kimi.toml"
        t0 = time.monotonic()
        cap = vpatch("capture", "vllm", "--id", "vllm-kimi", "--python", py, "-o", out, env=env)
        took_cap = time.monotonic() - t0
        assert cap.code == 0, cap.err
        cap_bytes = index.sent
        ranged = [r for r in index.requests if r.startswith("GET /files/") and "bytes=" in r]
        whole = [r for r in index.requests if r.startswith("GET /files/") and "bytes=" not in r]
        # The story again: the files read are kept (the store), the matrix's answers too (its
        # cache): no byte of any wheel moves. diff asks the index nothing; capture reads the
        # project page alone (which releases exist now: its matrix's neighbours).
        index.reset()
        again = vpatch("diff", "vllm", "--python", py, "--json", env=env)
        assert again.code == 0 and again.doc["groups"] == diff.doc["groups"], again.err
        assert index.requests == [] and index.sent == 0, index.requests
        out2 = tmp_path / "again" / "vllm-kimi.toml"
        out2.parent.mkdir()
        recap = vpatch("capture", "vllm", "--id", "vllm-kimi", "--python", py, "-o", out2, env=env)
        assert recap.code == 0 and out2.read_text() == out.read_text(), recap.err
        assert index.requests == ["GET /simple/vllm/"], index.requests
    [edit] = load_spec(out).variant[0].edit
    assert edit.op == "ensure_elements" and edit.target == "eagle3_target_supported"
    assert wheellab.downloads(lab) == 0, "pip must not have downloaded the wheel"
    assert _blobs(tmp_path) == [], "a partial read is never stored as a wheel"
    assert ranged and not whole, index.requests
    assert 0 < diff_bytes < LIMIT and 0 < cap_bytes < LIMIT, (diff_bytes, cap_bytes)
    print(
        f"cold vLLM 0.16.0 (508 MB wheel) by ranges: diff {diff_bytes / 1e3:.0f} KB "
        f"{took_diff:.1f} s; capture {cap_bytes / 1e3:.0f} KB in {len(ranged)} range "
        f"requests {took_cap:.1f} s"
    )


@pytest.mark.parametrize("server", ["ignores-range", "other-range"])
def test_index_refusing_ranges_falls_back_to_the_whole_wheel(
    lab: Path, tmp_path: Path, server: str
) -> None:
    """A file server that answers 200 to a ranged GET (vpatch stops reading at once), or
    206 with another range than the one asked for: pip downloads the whole wheel (its hash
    checked), the store keeps it, and the diff is right."""
    py = _click_env(tmp_path / "edited")
    wheel = realpkgs.wheel("click", CLICK_VERSION)
    ranges, lie = (False, False) if server == "ignores-range" else (True, True)
    with rangeindex.serve([wheel], ranges=ranges, lie=lie) as index:
        env = rangeindex.pip_env(index)
        got = vpatch("diff", "click", "--python", py, "--json", env=env)
        whole = [r for r in index.requests if r.startswith("GET /files/") and "bytes=" not in r]
    assert got.code == 0, got.err
    files = {f["file"]: f for f in got.doc["groups"][0]["files"]}
    assert files[CLICK_TYPES]["pristine"] == "wheel"
    assert '+    name = "bool"' in files[CLICK_TYPES]["diff"]
    assert wheellab.downloads(lab) == 1 and len(whole) == 1, index.requests
    assert len(_blobs(tmp_path)) == 1


def test_files_read_by_ranges_are_kept_so_a_second_run_asks_nothing(
    lab: Path, tmp_path: Path
) -> None:
    """The second run of a ranged diff asks the index for nothing (no page, no range, no pip):
    the files it read are kept in the store, each a blob named by RECORD's sha256. A kept
    file whose bytes were changed in the store does not hash to its name: refused, dropped,
    and read by ranges again (the diff still shows the host's edit)."""
    py = _click_env(tmp_path / "edited")
    wheel = realpkgs.wheel("click", CLICK_VERSION)
    with rangeindex.serve([wheel]) as index:
        env = rangeindex.pip_env(index)
        first = vpatch("diff", "click", "--python", py, "--json", env=env)
        assert first.code == 0, first.err
        assert index.sent > 0
        index.reset()
        second = vpatch("diff", "click", "--python", py, "--json", env=env)
        assert second.code == 0, second.err
        assert index.requests == [] and index.sent == 0, index.requests
        assert second.doc["groups"] == first.doc["groups"]
        kept = sorted((tmp_path / "store" / "members").iterdir())
        assert kept and _blobs(tmp_path) == []  # files kept, never a partial "wheel"
        types = next(k for k in kept if b'name = "boolean"' in k.read_bytes())
        types.write_bytes(types.read_bytes().replace(b'"boolean"', b'"bool"'))  # the host's
        third = vpatch("diff", "click", "--python", py, "--json", env=env)
        ranged = [r for r in index.requests if "bytes=" in r]
    assert third.code == 0, third.err
    files = {f["file"]: f for f in third.doc["groups"][0]["files"]}
    assert '+    name = "bool"' in files[CLICK_TYPES]["diff"], files[CLICK_TYPES]
    assert ranged and wheellab.downloads(lab) == 0, index.requests
    assert b'name = "boolean"' in types.read_bytes()  # read again and kept again


def test_ranged_read_with_index_credentials(lab: Path, tmp_path: Path) -> None:
    """An index that wants HTTP Basic credentials, given in pip's index URL as pip takes them:
    the ranged path sends them to that host and reads by ranges (no pip download)."""
    py = _click_env(tmp_path / "edited")
    wheel = realpkgs.wheel("click", CLICK_VERSION)
    with rangeindex.serve([wheel], auth=("ops", "s3cret")) as index:
        refused = vpatch("diff", "click", "--python", py, "--json", env=rangeindex.pip_env(index))
        assert refused.code == 1 and "pristine side unavailable" in refused.err, refused.err
        index.reset()
        env = rangeindex.pip_env(index, user_info="ops:s3cret")
        got = vpatch("diff", "click", "--python", py, "--json", env=env)
        ranged = [r for r in index.requests if "bytes=" in r]
    assert got.code == 0, got.err
    files = {f["file"]: f for f in got.doc["groups"][0]["files"]}
    assert files[CLICK_TYPES]["pristine"] == "wheel"
    assert ranged and wheellab.downloads(lab) == 1, (index.requests, "only the refused run's")


def test_member_not_matching_record_is_refused(lab: Path, tmp_path: Path) -> None:
    """The index lists a wheel whose click/types.py was changed and whose RECORD was not:
    the index's sha256 is the changed file's own, so only RECORD can tell. The ranged read
    refuses the member: no pristine side, one error naming RECORD, nothing stored."""
    py = _click_env(tmp_path / "edited")
    bad = tmp_path / "bad" / realpkgs.wheel("click", CLICK_VERSION).name
    bad.parent.mkdir()
    shutil.copy2(realpkgs.wheel("click", CLICK_VERSION), bad)
    site_types = _site(py) / CLICK_TYPES
    poisoned = site_types.read_bytes()  # the host's edited bytes: its edit would be hidden
    wheellab.rewrite_wheel(bad, CLICK_TYPES, poisoned, fix_record=False)
    with rangeindex.serve([bad]) as index:
        got = vpatch("diff", "click", "--python", py, env=rangeindex.pip_env(index))
        ranged = [r for r in index.requests if "bytes=" in r]
    assert got.code == 1
    assert "error: pristine side unavailable" in got.err, got.err
    assert f"{CLICK_TYPES} does not match RECORD's sha256" in got.err, got.err
    assert ranged and wheellab.downloads(lab) == 0, index.requests
    assert _blobs(tmp_path) == [] and site_types.read_bytes() == poisoned


def _site(py: Path) -> Path:
    return next((py.parent.parent / "lib").glob("python3*/site-packages"))


REQUESTS_SPEC = spec_toml(
    id="req-title",
    summary="requests' title",
    package="requests",
    versions=">=2.31,<2.33",
    file="requests/__version__.py",
    edits=[edit("set_value", target="__title__", value="req")],
)


def test_matrix_reads_each_release_by_ranges(lab: Path, tmp_path: Path) -> None:
    """`vpatch matrix` over two releases the index lists: pip lists them, each release's file
    and RECORD come by ranges, and no wheel is downloaded whole."""
    wheels = [realpkgs.wheel("requests", v) for v in ("2.31.0", "2.32.0")]
    spec = tmp_path / "req-title.toml"
    spec.write_text(REQUESTS_SPEC)
    with rangeindex.serve(wheels) as index:
        got = vpatch(
            "matrix", spec, "--versions", ">=2.31", "--json", env=rangeindex.pip_env(index)
        )
        files = [r for r in index.requests if r.startswith("GET /files/")]
    assert got.code == 0, got.err
    assert [r["outcome"] for r in got.doc["releases"]] == ["would_apply", "would_apply"]
    assert len(files) == 2 and all("bytes=" in r for r in files), index.requests
    assert wheellab.downloads(lab) == 0 and _blobs(tmp_path) == []
