"""The EAGLE-3 patch on real vLLM releases, applied locally: apply, verify, rollback.

Every version row runs the probe on the pristine file first (it must FAIL there) and on the
patched file (it must PASS), so the probe can never be a check that cannot fail.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.conftest import SPEC, Env, fingerprint, vpatch
from tests.support.catalog import TARGETS_BOTH_WAYS, sha256
from tests.support.handedits import record_sha

pytestmark = pytest.mark.vllm
REL = "vllm/config/speculative.py"


def changed_lines(diff: str) -> list[str]:
    return [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


@pytest.mark.parametrize(("version", "target", "one_line"), TARGETS_BOTH_WAYS)
def test_apply_verify_rollback(
    vllm_env: Callable[[str], Env], version: str, target: str, one_line: bool
) -> None:
    env = vllm_env(version)
    py = ["--python", env.python, "--json"]
    path = env.file(REL)
    pristine = sha256(path)
    assert pristine == record_sha(env.site, REL)

    # The probe is honest: on the pristine file it fails with vLLM's own error.
    before = vpatch("verify", SPEC, *py)
    assert before.code == 1
    assert before.patch()["outcome"] == "not_applied"
    [probe] = before.patch()["probes"]
    assert not probe["ok"] and "only supported for" in probe["detail"]

    applied = vpatch("apply", SPEC, *py)
    assert applied.code == 0, applied.out + applied.err
    p = applied.patch()
    assert p["outcome"] == "applied" and p["version"] == version
    [f] = p["files"]
    assert f["before_sha256"] == pristine and f["after_sha256"] == sha256(path)
    lines = changed_lines(f["diff"])
    if one_line:
        assert len(lines) == 2 and lines[0].startswith(f"-        {target} = [")
        assert lines[1].endswith('"gpt_oss", "kimi_k2", "deepseek_v3"]')
    else:
        assert lines == ['+            "kimi_k2",', '+            "deepseek_v3",']
    assert all(pr["ok"] for pr in p["probes"])

    # Second apply: nothing to do, not one byte written anywhere in the environment.
    snap = fingerprint(env.root)
    again = vpatch("apply", SPEC, *py)
    assert again.code == 0 and again.patch()["outcome"] == "already_applied"
    assert fingerprint(env.root) == snap

    verified = vpatch("verify", SPEC, *py, "--level", "full")
    assert verified.code == 0, verified.out
    assert verified.patch()["outcome"] == "applied"
    assert [pr["ok"] for pr in verified.patch()["probes"]] == [True]

    back = vpatch("rollback", SPEC, *py)
    assert back.code == 0, back.out + back.err
    assert back.patch()["outcome"] == "rolled_back"
    assert sha256(path) == record_sha(env.site, REL)
    last = json.loads(env.journal.read_text().splitlines()[-2])
    assert last["action"] == "rollback" and last["spec"] == "vllm-eagle3-mla-targets"
    assert vpatch("status", "--python", env.python, "--json").doc["hosts"][0]["patches"] == []


@pytest.mark.parametrize("version", ["0.18.0", "0.22.0"])
def test_upstream_versions_write_nothing(vllm_env: Callable[[str], Env], version: str) -> None:
    env = vllm_env(version)
    snap = fingerprint(env.root)
    res = vpatch("apply", SPEC, "--python", env.python, "--json")
    assert res.code == 0, res.out + res.err
    assert res.patch()["outcome"] == "satisfied_upstream"
    assert res.patch()["files"] == []
    assert fingerprint(env.root) == snap


@pytest.mark.parametrize("version", ["0.18.0", "0.24.0"])
def test_probe_holds_on_upstream_releases(vllm_env: Callable[[str], Env], version: str) -> None:
    """The probe's stand-in config carries every field at the release's own default, so a
    release that reads more in `_verify_args` (0.24.0: `rejection_sample_method`) still runs
    it; a fixed attribute list failed there with AttributeError on every 0.24 host."""
    env = vllm_env(version)
    res = vpatch("verify", SPEC, "--python", env.python, "--level", "full", "--json")
    assert res.code == 0, res.out + res.err
    assert res.patch()["outcome"] == "satisfied_upstream"
    assert [(pr["name"], pr["ok"]) for pr in res.patch()["probes"]] == [
        ("a kimi_k2 target passes EAGLE-3 validation", True)
    ]


def test_version_in_no_variant(vllm_env: Callable[[str], Env]) -> None:
    env = vllm_env("0.10.2")
    snap = fingerprint(env.root)
    res = vpatch("apply", SPEC, "--python", env.python, "--json")
    assert res.code == 1
    assert res.patch()["outcome"] == "not_applicable"
    assert "0.10.2 is in no variant" in res.patch()["message"]
    assert fingerprint(env.root) == snap


def test_dry_run_diff_writes_nothing(vllm_env: Callable[[str], Env]) -> None:
    env = vllm_env("0.16.0")
    snap = fingerprint(env.root)
    res = vpatch("apply", SPEC, "--python", env.python, "--dry-run", "--diff")
    assert res.code == 0, res.out + res.err
    assert "would_apply" in res.out
    assert '+            "kimi_k2",' in res.out and "--- a/vllm/config/speculative.py" in res.out
    assert fingerprint(env.root) == snap
