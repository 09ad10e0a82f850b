"""vLLM 0.18.0's own EAGLE-3 support for MLA targets, back-ported by `vpatch backport` from the
real upstream diff (0.17.0 -> 0.18.0, made from the two wheels here), onto 0.16.0 and 0.17.0.

The diff is cut to the hunks that make EAGLE-3 work for DeepSeek-V2/V3 and Kimi-K2/K2.5
targets: those whose changed lines name the model types, `SupportsEagle3`, the aux hidden
states or the Kimi-K2.5 class (the config list, the imports, the model's collection of aux
hidden states, the bases and methods, the drafter's image token). Every other hunk of those
files (n-gram on GPU, rejection sampling, MoE routing, the drafter's block size...) is left
out, and the spec must carry none of it. It is applied to both releases in one `vpatch apply`
(an inventory of the two environments), and the probes of patches/vllm-eagle3-mla-backport.toml
(written apart from this diff, from what 0.18.0 does) fail before and pass after on each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patcher.specs.model import load_spec
from tests import envs
from tests.conftest import REPO, Env, vpatch
from tests.support import upstream, vllm_models

pytestmark = pytest.mark.vllm
PROBES = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
MARKERS = ("deepseek_v2", "SupportsEagle3", "aux_hidden_state", "KimiK25ForConditionalGeneration")
# Per file: the EAGLE-3 hunks kept, and how many of its other hunks are left out.
KEPT = {
    "vllm/config/speculative.py": (1, 6),
    "vllm/model_executor/models/deepseek_v2.py": (6, 7),
    "vllm/model_executor/models/kimi_k25.py": (3, 1),
    "vllm/v1/spec_decode/eagle.py": (1, 12),
}
# What the left-out hunks add: none of it may reach the spec.
UNRELATED = (
    "ngram_gpu",
    "rejection_sample_method",
    "RoutingMethodType",
    "proj_input_size",
    "trust_remote_code=self.ctx",
    "block_size",
    "Eagle3DeepseekV2ForCausalLM",
    "Either input_ids or inputs_embeds",
)


def eagle3_diff(dest: Path) -> Path:
    parts = []
    for rel, (kept, left_out) in KEPT.items():
        old = upstream.wheel_text("vllm", "0.17.0", rel)
        new = upstream.wheel_text("vllm", "0.18.0", rel)
        text, left = upstream.cut(rel, old, new, upstream.mentions(MARKERS))
        assert (text.count("\n@@ "), len(left)) == (kept, left_out), (rel, left)
        parts.append(text)
    dest.write_text("".join(parts))
    return dest


def env(tmp_path: Path, version: str) -> Env:
    root = envs.clone(version, tmp_path / f"vllm-{version}")
    found = Env(root, root / "bin" / "python")
    vllm_models.add_extras(found.site)
    return found


def test_upstream_eagle3_diff_backported_onto_0_16_and_0_17_in_one_run(tmp_path: Path) -> None:
    diff = eagle3_diff(tmp_path / "eagle3-0.17.0-0.18.0.diff")
    spec = tmp_path / "vllm-eagle3-upstream.toml"
    made = vpatch(
        "backport", diff, "--package", "vllm", "--from-version", "0.17.0",
        "--id", "vllm-eagle3-upstream", "-o", spec, "--versions", ">=0.16,<0.18",
        "--wheelhouse", envs.CACHE / "wheels", "--no-matrix", "--json",
    )  # fmt: skip
    assert made.code == 0, made.out + made.err
    ops = {f["file"]: f["ops"] for f in made.doc["files"]}
    assert ops == {
        "vllm/config/speculative.py": ["ensure_elements"],
        "vllm/model_executor/models/deepseek_v2.py": [
            "ensure_import",
            "insert_statement",
            "replace_statement",
            "insert_statement",
            "ensure_base",
            "ensure_def",
            "ensure_def",
        ],
        "vllm/model_executor/models/kimi_k25.py": [
            "ensure_import",
            "ensure_base",
            "ensure_base",
            "ensure_def",
            "ensure_def",
        ],
        "vllm/v1/spec_decode/eagle.py": ["replace_statement"],
    }
    text = spec.read_text()
    assert 'summary = "Backport of eagle3-0.17.0-0.18.0.diff (an upstream diff' in text
    assert [u for u in UNRELATED if u in text] == []
    [config] = made.doc["files"][0]["edits"]
    assert "target" not in config  # 0.16 calls the list otherwise: found by its elements
    # The methods new to the causal LM classes: each anchored on its class and its name,
    # placed where 0.18.0 has it (after the method before it), never on a neighbour's text.
    placed = [
        (e["scope"], e["code"].split("(")[0].removeprefix("def "), e.get("after"))
        for f in made.doc["files"]
        for e in f["edits"]
        if e["op"] == "ensure_def"
    ]
    aux, eagle3 = "set_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers"
    assert placed == [
        ("DeepseekV2ForCausalLM", aux, "set_moe_parameters"),
        ("DeepseekV2ForCausalLM", eagle3, aux),
        ("KimiK25ForConditionalGeneration", aux, "compute_logits"),
        ("KimiK25ForConditionalGeneration", eagle3, aux),
    ]

    probes = load_spec(PROBES)
    targets = {v: env(tmp_path, v) for v in ("0.16.0", "0.17.0")}
    for version, e in targets.items():
        got = vllm_models.run_probes(e.python, probes)
        assert [p["ok"] for p in got] == [False] * 4, (version, got)

    hosts = tmp_path / "hosts.toml"
    hosts.write_text("".join(
        f'[[host]]\nname = "vllm-{v}"\naddress = "local"\npython = "{e.python}"\n\n'
        for v, e in targets.items()
    ))  # fmt: skip
    run = vpatch("apply", spec, "--inventory", hosts, "--level", "static", "--json")
    assert run.code == 0, run.out + run.err
    assert [(h["target"], h["patches"][0]["outcome"]) for h in run.doc["hosts"]] == [
        ("vllm-0.16.0", "applied"),
        ("vllm-0.17.0", "applied"),
    ]
    for version, e in targets.items():
        got = vllm_models.run_probes(e.python, probes)
        assert all(p["ok"] for p in got), (version, got)
