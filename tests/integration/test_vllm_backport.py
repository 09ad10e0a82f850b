"""The EAGLE-3 back-port (patches/vllm-eagle3-mla-backport.toml) on real vLLM wheels.

Per release: the four probes FAIL on the stock files and with vllm-eagle3-mla-targets alone
(it only edits the list), PASS after the back-port; both specs stack on speculative.py in either
order, re-applying writes nothing, and rolling both back restores RECORD's bytes.

Cost: a state of the files is one ~8 s import of torch and vLLM's model modules. The FAIL states
run all probes in one interpreter (tests/support/vllm_models.py); `vpatch verify --level full`
(one interpreter per probe, ~35 s) runs once, on 0.16.0. Everything else is --level static.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from patcher.specs.model import copy_with, load_spec
from tests import envs
from tests.conftest import REPO, SPEC, Env, fingerprint, vpatch
from tests.support import vllm_models
from tests.support.catalog import BACKPORT_BOTH_WAYS, sha256
from tests.support.handedits import record_sha

pytestmark = pytest.mark.vllm
BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
SPEC_REL = "vllm/config/speculative.py"

# Why each probe fails before the back-port, stock and with the whitelist patch alone: the
# first thing each one checks, in vLLM's own words where vLLM raises.
FAILS_BEFORE = [
    "DeepseekV2ForCausalLM is not SupportsEagle3",
    "KimiK25ForConditionalGeneration is not SupportsEagle",
    "object has no attribute 'image_token_index'",
    "model_type='deepseek_v2'",
]


def pristine(env: Env) -> bool:
    return all(sha256(env.file(rel)) == record_sha(env.site, rel) for rel in vllm_models.FILES)


def model_env(tmp_path: Path, version: str) -> Env:
    root = envs.clone(version, tmp_path / f"vllm-{version}")
    env = Env(root, root / "bin" / "python")
    vllm_models.add_extras(env.site)
    return env


def static(cmd: str, spec: Path, env: Env, *args: str) -> dict[str, Any]:
    run = vpatch(cmd, spec, "--python", env.python, "--level", "static", "--json", *args)
    assert run.code == 0, run.out + run.err
    return run.patch()


def assert_all_fail(env: Env, state: str) -> None:
    got = vllm_models.run_probes(env.python, load_spec(BACKPORT))
    assert [p["ok"] for p in got] == [False] * 4, (state, got)
    for probe, why in zip(got, FAILS_BEFORE, strict=True):
        assert why in probe["detail"], (state, probe)


@pytest.mark.parametrize("version", BACKPORT_BOTH_WAYS)
def test_fails_stock_and_whitelist_only_passes_backport(tmp_path: Path, version: str) -> None:
    env = model_env(tmp_path, version)
    assert pristine(env)
    assert_all_fail(env, "stock")

    white = static("apply", SPEC, env)
    assert white["outcome"] == "applied"
    assert_all_fail(env, "whitelist only")

    applied = static("apply", BACKPORT, env)
    assert applied["outcome"] == "applied" and applied["version"] == version
    files = {f["path"].split("site-packages/")[-1]: f for f in applied["files"]}
    assert sorted(files) == sorted(vllm_models.FILES)
    # Stacked on the whitelist patch, the list gains only what that one left out.
    added = [ln for ln in files[SPEC_REL]["diff"].splitlines() if ln.startswith("+ ")]
    assert added == ['+            "deepseek_v2",', '+            "kimi_k25",']

    if version == "0.16.0":  # vpatch's own probe runs, one fresh interpreter each
        full = vpatch("verify", BACKPORT, "--python", env.python, "--level", "full", "--json")
        assert full.code == 0, full.out + full.err
        assert full.patch()["outcome"] == "applied"
        assert [p["ok"] for p in full.patch()["probes"]] == [True] * 4
    else:
        got = vllm_models.run_probes(env.python, load_spec(BACKPORT))
        assert all(p["ok"] for p in got), got
    assert static("verify", SPEC, env)["outcome"] == "applied"  # the whitelist patch stays

    snap = fingerprint(env.root)
    for spec in (SPEC, BACKPORT):
        assert static("apply", spec, env)["outcome"] == "already_applied"
    assert fingerprint(env.root) == snap

    # Back-port off first: the whitelist patch keeps its two names, the rest is RECORD's.
    assert static("rollback", BACKPORT, env)["outcome"] == "rolled_back"
    text = env.file(SPEC_REL).read_text()
    assert '"kimi_k2",' in text and '"deepseek_v2",' not in text
    assert all(sha256(env.file(r)) == record_sha(env.site, r) for r in vllm_models.FILES[1:])
    assert static("rollback", SPEC, env)["outcome"] == "rolled_back"
    assert pristine(env)
    entries = [json.loads(ln) for ln in env.journal.read_text().splitlines()]
    undone = [(e["spec"], e["file"]) for e in entries if e["action"] == "rollback"]
    assert undone == [
        *(("vllm-eagle3-mla-backport", rel) for rel in vllm_models.FILES),
        ("vllm-eagle3-mla-targets", SPEC_REL),
    ]


def test_stacks_in_the_other_order(tmp_path: Path) -> None:
    """Back-port first, whitelist patch second (nothing left to add: journaled as relying on
    the back-port), rolled back in the order applied: the whitelist patch's names stay until
    it is rolled back itself (issue 25 case 3), then every file is RECORD's."""
    env = Env(envs.clone("0.17.0", tmp_path / "v"), tmp_path / "v" / "bin" / "python")
    applied = static("apply", BACKPORT, env)
    added = [ln for ln in applied["files"][0]["diff"].splitlines() if ln.startswith("+ ")]
    names = ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")
    assert added == [f'+            "{m}",' for m in names]
    backported = {rel: sha256(env.file(rel)) for rel in vllm_models.FILES}

    white = static("apply", SPEC, env)
    assert white["outcome"] == "applied", white
    assert "already has the desired code, from vllm-eagle3-mla-backport" in white["message"]
    assert {rel: sha256(env.file(rel)) for rel in vllm_models.FILES} == backported
    for spec in (SPEC, BACKPORT):
        assert static("verify", spec, env)["outcome"] == "applied"

    assert static("rollback", BACKPORT, env)["outcome"] == "rolled_back"
    text = env.file(SPEC_REL).read_text()
    assert '"kimi_k2",' in text and '"deepseek_v2",' not in text
    assert all(sha256(env.file(r)) == record_sha(env.site, r) for r in vllm_models.FILES[1:])
    assert static("rollback", SPEC, env)["outcome"] == "rolled_back"
    assert pristine(env)


def test_upstream_release_passes_the_same_probes(tmp_path: Path) -> None:
    """vLLM 0.18.0 ships the fix: the spec writes nothing there, and the back-port's probes
    pass on upstream's own code, so they test behaviour, not this spec's spelling of it."""
    env = model_env(tmp_path, "0.18.0")
    snap = fingerprint(env.root)
    res = static("apply", BACKPORT, env)
    assert res["outcome"] == "satisfied_upstream" and res["files"] == []
    assert fingerprint(env.root) == snap
    got = vllm_models.run_probes(env.python, load_spec(BACKPORT))
    assert all(p["ok"] for p in got), got


def test_config_probe_holds_on_0_24(tmp_path: Path) -> None:
    """vLLM 0.24.0 reads more in `_verify_args` (`rejection_sample_method`, `synthetic_*`):
    the validation probe's stand-in carries every field at the release's own default, so it
    still runs there (a fixed attribute list failed with AttributeError). The model probes
    need triton on 0.24 and run on a GPU host only (docs/rollout.md, tests/gpu)."""
    env = model_env(tmp_path, "0.24.0")
    spec = load_spec(BACKPORT)
    [config] = [p for p in spec.probe if p.module == "vllm.config.speculative"]
    got = vllm_models.run_probes(env.python, copy_with(spec, probe=[config]))
    assert [(p["name"], p["ok"]) for p in got] == [(config.name, True)], got
