"""Issue 25 cases 3 and 5 on real vLLM 0.16.0 with the catalog's two specs
(patches/vllm-eagle3-mla-targets.toml, the whitelist; patches/vllm-eagle3-mla-backport.toml).

3. Back-port first: the whitelist spec had nothing left to add, said `satisfied_upstream … from
   vllm-eagle3-mla-backport` and journaled nothing, so rolling the back-port back silently
   removed "kimi_k2". Now it is journaled as relying on the back-port, and that rollback keeps
   its edits, applied for real.
5. In an env that cannot import (no torch), rolling the back-port back re-ran the whitelist
   spec's checks at import level and refused "…needs this spec": a false cause. Now its checks
   run no deeper than it was verified at, and a check that fails with the back-port in place
   too is "could not check here".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import envs
from tests.conftest import REPO, SPEC, Env, vpatch
from tests.support import vllm_models
from tests.support.catalog import sha256
from tests.support.handedits import record_sha

pytestmark = pytest.mark.vllm
BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
SPEC_REL = "vllm/config/speculative.py"
VERSION = "0.16.0"


def env_of(tmp_path: Path) -> Env:
    root = envs.clone(VERSION, tmp_path / "vllm")
    return Env(root, root / "bin" / "python")


def run(cmd: str, *args: str | Path, code: int = 0) -> dict[str, Any]:
    got = vpatch(cmd, *args, "--json")
    assert got.code == code, got.out + got.err
    return got.patch()


def test_rollback_keeps_the_spec_that_relied_on_it(tmp_path: Path) -> None:
    env = env_of(tmp_path)
    py = ("--python", str(env.python), "--level", "static")
    assert run("apply", BACKPORT, *py)["outcome"] == "applied"
    white = run("apply", SPEC, *py)
    assert white["outcome"] == "applied", white
    assert "relying on it" in white["message"] and "vllm-eagle3-mla-backport" in white["message"]
    assert all(not f["diff"] for f in white["files"])  # nothing written for it
    entries = [json.loads(ln) for ln in env.journal.read_text().splitlines()]
    mine = [e for e in entries if e.get("spec") == "vllm-eagle3-mla-targets"]
    assert [e.get("relies_on") for e in mine] == [["vllm-eagle3-mla-backport"]]

    back = run("rollback", BACKPORT, *py)
    assert back["outcome"] == "rolled_back"
    assert "relied on vllm-eagle3-mla-backport" in back["message"], back["message"]
    text = env.file(SPEC_REL).read_text()
    assert '"kimi_k2",' in text and '"deepseek_v3",' in text and '"deepseek_v2",' not in text
    assert all(sha256(env.file(r)) == record_sha(env.site, r) for r in vllm_models.FILES[1:])
    assert run("verify", SPEC, *py)["outcome"] == "applied"
    assert run("rollback", SPEC, *py)["outcome"] == "rolled_back"
    assert all(sha256(env.file(r)) == record_sha(env.site, r) for r in vllm_models.FILES)


def test_partial_rollback_where_nothing_imports_blames_no_spec(tmp_path: Path) -> None:
    env = env_of(tmp_path)
    py = ("--python", str(env.python))
    # verified at import level while torch was there, the back-port at static
    assert run("apply", SPEC, *py, "--level", "import")["outcome"] == "applied"
    assert run("apply", BACKPORT, *py, "--level", "static")["outcome"] == "applied"
    (env.site / "_vpatch_test_base.pth").unlink()  # the clone's own link: torch is gone
    back = run("rollback", BACKPORT, *py)  # default --level full: capped at import
    assert back["outcome"] == "rolled_back", back
    assert "vllm-eagle3-mla-targets: could not check here" in back["message"], back["message"]
    assert "needs this spec" not in back["message"]
    text = env.file(SPEC_REL).read_text()
    assert '"kimi_k2",' in text and '"deepseek_v2",' not in text
    assert all(sha256(env.file(r)) == record_sha(env.site, r) for r in vllm_models.FILES[1:])
    st = vpatch("status", *py, "--json")
    assert [(p["id"], p["outcome"]) for p in st.doc["hosts"][0]["patches"]] == [
        ("vllm-eagle3-mla-targets", "applied")
    ]
