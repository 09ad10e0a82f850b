"""The recipes in docs/hooks.md, read from the doc itself and run.

systemd: the doc's drop-in is exactly what `vpatch hook systemd` prints. Docker and Kubernetes:
their exact argv (ENTRYPOINT + a CMD, the initContainer's command) runs against a test env with
only the paths swapped, which is what the container runtime would exec; the Kubernetes recipe
also runs in a real pod in `make k8s-lab` (tests/k8slab/test_pods.py). The CI step runs
against real sshd hosts in test_hooks_ssh.py. The acceptance run on real vLLM is marked `vllm`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SPEC, Env, vpatch
from tests.support.hooklab import DOC, DOC_VPATCH, SERVE, counting_spec, recipe, swap  # noqa: F401
from tests.support.standin_specs import REL


def dockerfile() -> dict[str, Any]:
    """ENTRYPOINT/CMD as the JSON arrays Docker reads, and the RUN lines."""
    out: dict[str, Any] = {"RUN": []}
    for line in recipe("docker").splitlines():
        word, _, rest = line.partition(" ")
        if word in ("ENTRYPOINT", "CMD"):
            out[word] = json.loads(rest)
        elif word == "RUN":
            out["RUN"].append(rest)
    return out


def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=600, **kw)


def test_systemd_recipe_is_what_the_tool_prints() -> None:
    command = shlex.split(recipe("systemd-command").replace("\\\n", " "))
    command = command[: command.index("|")]
    assert command[:3] == [DOC_VPATCH, "hook", "systemd"]
    doc_spec = next(a for a in command if a.endswith(".toml"))
    args = [str(SPEC) if a == doc_spec else a for a in command[1:]]
    res = vpatch(*args, "--vpatch", DOC_VPATCH)
    assert res.code == 0, res.err
    assert res.out.replace(str(SPEC), doc_spec) == recipe("systemd") + "\n"


def test_docker_entrypoint_is_a_vpatch_exec(tmp_path: Path, standin_env: Env) -> None:
    """Build step (RUN ensure), then `docker run IMAGE CMD...` = ENTRYPOINT + CMD."""
    d = dockerfile()
    assert d["ENTRYPOINT"][:2] == [DOC_VPATCH, "exec"] and d["ENTRYPOINT"][-1] == "--"
    assert d["CMD"][:2] == ["vllm", "serve"]
    spec, _ = counting_spec(tmp_path)
    doc_spec = next(a for a in d["ENTRYPOINT"] if a.endswith(".toml"))
    paths = {doc_spec: str(spec), "/usr/bin/python3": str(standin_env.python)}

    [build] = [r for r in d["RUN"] if r.startswith(DOC_VPATCH)]
    built = run(swap(shlex.split(build), paths))
    assert built.returncode == 0, built.stderr
    assert built.stdout.startswith("applied: local: servekit-kimi")

    command = [str(standin_env.python), "-c", SERVE]  # `docker run IMAGE <this>`
    proc = subprocess.Popen(
        swap(d["ENTRYPOINT"], paths) + command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.split()[0] == str(proc.pid)
    assert "1 already_applied" in err  # baked at build: the start only checks


def test_dockerfiles_leave_no_pip_cache_in_the_image() -> None:
    """A layer keeps what its RUN leaves behind: pip's cache of the wheel it installed (the
    patched vLLM's is hundreds of MB) would stay in the image for nothing."""
    installs = [
        line
        for name in ("docker", "docker-wheel")
        for line in recipe(name).splitlines()
        if "pip install" in line
    ]
    assert len(installs) == 2 and all("--no-cache-dir" in line for line in installs), installs


def test_kubernetes_init_container_ensures_the_shared_venv(
    tmp_path: Path, standin_env: Env
) -> None:
    pod = yaml.safe_load(recipe("kubernetes"))
    [init] = pod["spec"]["initContainers"]
    [server] = pod["spec"]["containers"]
    mounts = {m["name"]: m for m in init["volumeMounts"]}
    served = {m["name"]: m for m in server["volumeMounts"]}
    venv = mounts["venv"]["mountPath"]
    assert served["venv"]["mountPath"] == venv and served["venv"].get("readOnly") is True
    assert not mounts["venv"].get("readOnly")  # the initContainer writes, the server cannot
    assert server["command"][0].startswith(venv + "/bin/")
    assert init["image"] == server["image"]  # same base interpreter behind the venv symlink
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert volumes == set(mounts) and set(served) <= volumes

    spec, _ = counting_spec(tmp_path)
    doc_spec = next(a for a in init["command"] if a.endswith(".toml"))
    assert doc_spec.startswith(mounts["vpatch-specs"]["mountPath"] + "/")
    paths = {doc_spec: str(spec), f"{venv}/bin/python": str(standin_env.python)}
    res = run(swap(init["command"], paths))
    assert res.returncode == 0, res.stderr
    assert '"kimi_k2",' in standin_env.file(REL).read_text()


@pytest.mark.vllm
def test_exec_before_a_real_vllm_start(tmp_path: Path, vllm_env: Callable[[str], Env]) -> None:
    """Acceptance: the Docker ENTRYPOINT on vLLM 0.16.0, with a CMD that imports the patched
    module and runs the EAGLE-3 check a server start would, then says "serving". On 0.10.2 (no
    variant) ensure fails and the command never starts."""
    d = dockerfile()
    doc_spec = next(a for a in d["ENTRYPOINT"] if a.endswith(".toml"))
    probe = SPEC.read_text().split("code = '''", 1)[1].split("'''", 1)[0]
    serve = "import os\nimport vllm.config.speculative as module\n" + probe
    serve += "\nprint('serving', os.getpid())"
    env = vllm_env("0.16.0")
    paths = {doc_spec: str(SPEC), "/usr/bin/python3": str(env.python)}
    proc = subprocess.Popen(
        [*swap(d["ENTRYPOINT"], paths), "python", "-c", serve],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PATH": f"{env.python.parent}:{os.environ['PATH']}"},
    )
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1].split() == ["serving", str(proc.pid)]  # after vLLM's INFO lines
    assert err.splitlines()[0].startswith("applied: local: vllm-eagle3-mla-targets (vllm 0.16.0)")

    old = vllm_env("0.10.2")
    started = tmp_path / "started"
    paths["/usr/bin/python3"] = str(old.python)
    res = run([*swap(d["ENTRYPOINT"], paths), "touch", str(started)])
    assert res.returncode == 1 and not started.exists()
    assert "not_applicable: vllm 0.10.2 is in no variant's range" in res.stderr
