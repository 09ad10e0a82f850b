"""`--kubectl NS -l SELECTOR` (patcher.inventory.kubepods): `kubectl get pods -o json` read on
the golden cases of tests/cases/kubepods/pods.json, and the CLI through a stand-in kubectl
that answers the listing and runs each exec's line here."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from patcher.inventory.kubepods import pods
from tests.conftest import vpatch

CASES = json.loads((Path(__file__).parent.parent / "cases/kubepods/pods.json").read_text())


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_the_running_pods_are_the_targets(case: dict[str, Any]) -> None:
    got = pods(case["doc"], "/srv/venv/bin/python", case["container"], "prod")
    assert [[t.name, t.container, t.container_name] for t in got.targets] == case["targets"]
    assert [list(s) for s in got.skipped] == case["skipped"]
    for t in got.targets:
        assert (t.transport, t.local, t.kube_context, t.python) == (
            "kubectl", True, "prod", "/srv/venv/bin/python")  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> dict[str, str]:
    """PATH with a `kubectl` whose `get pods` prints the golden listing and whose `exec ...
    -- sh -c LINE` runs LINE here; its argv logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    listing = tmp_path / "pods.json"
    listing.write_text(json.dumps(CASES["cases"][0]["doc"]))
    log = tmp_path / "argv"
    exe = bin_dir / "kubectl"
    exe.write_text(
        f'#!/bin/sh\necho "$@" >>{log}\n'
        f'case " $* " in *" get pods "*) exec cat {listing};; esac\n'
        'while [ "$1" != sh ]; do shift; done\nexec "$@"\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "LOG": str(log)}


def test_status_over_the_pods_a_selector_picks(cluster: dict[str, str]) -> None:
    ran = vpatch("status", "--kubectl", "serve", "-l", "app=vllm", "--python", sys.executable,
                 "--json", env={"PATH": cluster["PATH"]})  # fmt: skip
    assert ran.code == 0, ran.err
    hosts = ran.doc["hosts"]
    assert [h["target"] for h in hosts] == [f"kubectl://serve/vllm-{i}" for i in range(3)]
    assert {h["transport"] for h in hosts} == {"kubectl"}
    assert "pod serve/vllm-3 left out (Pending)" in ran.err
    argv = Path(cluster["LOG"]).read_text().splitlines()
    assert argv[0] == "get pods -n serve --selector=app=vllm -o json"
    assert sorted(a.split(" -- ")[0] for a in argv[1:] if a.startswith("exec ")) == [
        f"exec -i -n serve vllm-{i} -c server" for i in range(3)
    ]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--kubectl", "serve"], "--kubectl and --selector go together"),
        (["-l", "app=vllm"], "--kubectl and --selector go together"),
        (["--kubectl", "serve", "-l", "a=b", "--host", "h1"], "cannot be combined with --host"),
        (["--kubectl", "Serve", "-l", "a=b"], "is not a namespace"),
        (["--kubectl", "serve", "--selector=--all"], "not a label selector"),
        (["--kubectl", "serve", "-l", "a=b", "--kube-container=-x"], "not a container name"),
        (["--kubectl", "serve", "-l", "app=none"], None),
    ],
)
def test_what_kubectl_flags_refuse(cluster: dict[str, str], argv: list[str], words: str) -> None:
    """Exit 2, one error and a hint, no pod reached; `app=none` (the stand-in's listing with
    no pod running of it) is checked by an empty listing."""
    if words is None:
        Path(cluster["PATH"].split(os.pathsep)[0], "kubectl").write_text(
            '#!/bin/sh\necho \'{"apiVersion": "v1", "items": [], "kind": "List"}\'\n'
        )
        words = "no running pod"
    ran = vpatch("verify", "x.toml", *argv, env={"PATH": cluster["PATH"]})
    assert ran.code == 2, ran.err
    assert [ln.split(":")[0] for ln in ran.err.strip().splitlines()] == ["error", "hint"], ran.err
    assert words in ran.err
