"""Pods as targets on a real one-node Kubernetes (tests/support/k8slab.py): kind kubectl's
`kubectl exec -i`, `--kubectl NS -l SELECTOR`, and what a pod keeps. Run by `make k8s-lab`
(VPATCH_K8S_LAB=1); skipped otherwise: the first build of the node's binaries takes ~20 min.

Each pod runs the stand-in image's server (PID 1 imports the stand-in at start). In the
`volume` pods an initContainer copies the image's venv into an emptyDir that the server
mounts at /srv/venv (docs/hooks.md's recipe): the patch lives on the volume, so a container
restart keeps it. The `bare` pod has its venv in the container's own filesystem: ephemeral.
The `ensure` pods run docs/hooks.md's initContainer recipe as written: the image has vpatch
at /opt/vpatch (tests/support/vpatchimage.py), the specs come from a ConfigMap.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests import standin
from tests.conftest import Run, vpatch
from tests.support import containerlab, k8slab, vpatchimage
from tests.support.hooklab import recipe
from tests.support.standin_specs import REL, SPEC_A, SPEC_B, spec_a

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(
        os.environ.get("VPATCH_K8S_LAB") != "1" or os.geteuid() != 0,
        reason="the one-node Kubernetes lab: `make k8s-lab` (root, ~20 min build once)",
    ),
]

VENV = containerlab.VENV
PYTHON = containerlab.PYTHON
TARGET = f"{VENV}/lib/python3.11/site-packages/{REL}"
PODS = ("vllm-0", "vllm-1", "vllm-2")
ROLL_PODS = ("roll-0", "roll-1", "roll-2")
TIMINGS: dict[str, float] = {}
# The first initContainer of a `volume` pod: the image's venv onto the emptyDir at /vol.
COPY_VENV = ["sh", "-c", f"cp -a {VENV}/. /vol/ && chown app: /vol"]


def _pod(name: str, volume: bool, program: str = containerlab.SERVER) -> dict[str, Any]:
    server: dict[str, Any] = {
        "name": "server",
        "image": k8slab.IMAGE,
        "imagePullPolicy": "Never",
        "command": [PYTHON, "-c", program],
    }
    spec: dict[str, Any] = {"nodeName": "node1", "containers": [server]}
    if volume:
        server["volumeMounts"] = [{"name": "venv", "mountPath": VENV}]
        spec["volumes"] = [{"name": "venv", "emptyDir": {}}]
        spec["initContainers"] = [{
            "name": "venv", "image": k8slab.IMAGE, "imagePullPolicy": "Never",
            "command": COPY_VENV,
            "volumeMounts": [{"name": "venv", "mountPath": "/vol"}],
        }]  # fmt: skip
    labels = {"app": "bare" if not volume else "vllm" if program == containerlab.SERVER else "roll"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": spec}  # fmt: skip


@pytest.fixture(scope="module")
def kube() -> Iterator[k8slab.Cluster]:
    t = time.monotonic()
    with k8slab.cluster() as c:
        TIMINGS["cluster up (images + node)"] = time.monotonic() - t
        cached = "cached" if vpatchimage.TIMINGS["cached"] else "built"
        TIMINGS[f"image with vpatch ({cached} /opt/vpatch)"] = vpatchimage.TIMINGS["seconds"]
        t = time.monotonic()
        for name in PODS:
            c.apply(_pod(name, volume=True))
        c.apply(_pod("bare-0", volume=False))
        for name in ROLL_PODS:
            c.apply(_pod(name, volume=True, program=containerlab.LAB_SERVER))
        for name in (*PODS, "bare-0", *ROLL_PODS):
            c.wait_ready(name)
        TIMINGS["7 pods ready"] = time.monotonic() - t
        yield c
    print("\nk8s lab timings:", {k: round(v, 1) for k, v in TIMINGS.items()})


def ok(res: Run) -> Run:
    assert res.code == 0, res.out + res.err
    return res


def _vp(kube: k8slab.Cluster, *args: str | Path, name: str = "") -> Run:
    t = time.monotonic()
    res = vpatch(*args, env=kube.env)
    if name:
        TIMINGS[name] = time.monotonic() - t
    return res


def _spec(tmp_path: Path, text: str = SPEC_A) -> Path:
    spec = tmp_path / ("a.toml" if text == SPEC_A else "b.toml")
    spec.write_text(text)
    return spec


def _rollout_inventory(path: Path) -> Path:
    """The roll pods as a hosts.toml: each restarted in place, its endpoint on its loopback."""
    url = containerlab.LAB_URL
    rows = [
        {
            "name": n,
            "address": "local",
            "pod": f"default/{n}",
            "container_name": "server",
            "python": PYTHON,
            "restart": f"kubectl exec {n} -c server -- sh -c 'kill 1'",
            "health": f"{url}/health",
            "metrics": f"{url}/metrics",
        }
        for n in ROLL_PODS
    ]
    path.write_text("".join(
        "[[host]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in row.items())
        for row in rows
    ))  # fmt: skip
    return path


def _host(pod: str) -> tuple[str, ...]:
    """`--host` of a pod in namespace default, its venv's python."""
    return ("--host", f"kubectl://default/{pod}", "--python", PYTHON)


def _restart_in_place(kube: k8slab.Cluster, pod: str, restarts: int) -> None:
    """SIGTERM to PID 1 (the server exits 0): the kubelet starts a new container of the image
    in the same pod, on the same volumes."""
    kube.kubectl("exec", pod, "-c", "server", "--", PYTHON, "-c",
                 "import os, signal; os.kill(1, signal.SIGTERM)", check=False)  # fmt: skip
    kube.wait_ready(pod, restarts)


def test_status_apply_verify_restart_verify_rollback_in_a_pod(
    kube: k8slab.Cluster, tmp_path: Path
) -> None:
    spec, host = _spec(tmp_path), _host("vllm-0/server")
    before = kube.read("vllm-0", TARGET)
    st = ok(_vp(kube, "status", *host, "--json", name="status (1 pod)"))
    [h] = st.doc["hosts"]
    assert (h["transport"], h["env_mounted"], h["ephemeral"], h["patches"]) == (
        "kubectl", True, False, [])  # fmt: skip
    applied = ok(_vp(kube, "apply", spec, *host, "--json", name="apply (level full)"))
    assert applied.patch()["outcome"] == "applied", applied.out
    assert b"kimi_k2" in kube.read("vllm-0", TARGET)
    ok(_vp(kube, "verify", spec, *host, name="verify"))
    t = time.monotonic()
    _restart_in_place(kube, "vllm-0", 1)
    TIMINGS["container restart (SIGTERM to PID 1, until Ready)"] = time.monotonic() - t
    ok(_vp(kube, "verify", spec, *host, name="verify after restart"))
    ok(_vp(kube, "rollback", *host, name="rollback"))
    after = kube.read("vllm-0", TARGET)
    assert hashlib.sha256(after).hexdigest() == hashlib.sha256(before).hexdigest()
    # the agent worked as the venv's owner (the image's `app`), not as the container's root
    owners = kube.kubectl("exec", "vllm-0", "-c", "server", "--", "stat", "-c", "%u", TARGET)
    assert owners == str(containerlab.APP_UID)


def test_status_and_verify_over_the_pods_a_selector_picks(
    kube: k8slab.Cluster, tmp_path: Path
) -> None:
    """One pod patched, two not: `verify --kubectl` says which pod runs what."""
    spec = _spec(tmp_path)
    ok(_vp(kube, "apply", spec, *_host("vllm-1")))
    fleet = ("--kubectl", "default", "-l", "app=vllm", "--python", PYTHON, "--json")
    st = ok(_vp(kube, "status", *fleet, name="status --kubectl (3 pods)"))
    got = {h["target"]: [p["id"] for p in h["patches"]] for h in st.doc["hosts"]}
    assert got == {"kubectl://default/vllm-0": [], "kubectl://default/vllm-1": ["servekit-kimi"],
                   "kubectl://default/vllm-2": []}  # fmt: skip
    assert {h["transport"] for h in st.doc["hosts"]} == {"kubectl"}
    res = _vp(kube, "verify", spec, *fleet, name="verify --kubectl (3 pods)")
    assert res.code != 0, res.out
    passed = {h["target"]: h["patches"][0]["outcome"] for h in res.doc["hosts"]}
    assert passed == {"kubectl://default/vllm-0": "not_applied",
                      "kubectl://default/vllm-1": "applied",
                      "kubectl://default/vllm-2": "not_applied"}  # fmt: skip
    # diff over the same pods: only vllm-1's file differs, against vpatch's own backup there
    # (no wheel needed: the cluster's node reaches no index)
    diff = ok(_vp(kube, "diff", "servekit", *fleet, name="diff --kubectl (3 pods)"))
    groups = {tuple(g["hosts"]): [f["file"] for f in g["files"]] for g in diff.doc["groups"]}
    assert {k: v for k, v in groups.items() if v} == {
        ("kubectl://default/vllm-1",): [REL]}, diff.out  # fmt: skip
    human = ok(_vp(kube, "diff", "servekit", *fleet[:-1]))
    assert "+" in human.out and "kimi_k2" in human.out, human.out
    ok(_vp(kube, "rollback", *_host("vllm-1")))


def test_a_patch_in_a_pods_own_filesystem_is_ephemeral_and_gone_after_a_restart(
    kube: k8slab.Cluster, tmp_path: Path
) -> None:
    spec, host = _spec(tmp_path), _host("bare-0")
    ok(_vp(kube, "apply", spec, *host))
    st = ok(_vp(kube, "status", *host, "--json"))
    [h] = st.doc["hosts"]
    assert (h["env_mounted"], h["ephemeral"]) == (False, True), h
    assert [p["id"] for p in h["patches"]] == ["servekit-kimi"]
    assert "ephemeral" in ok(_vp(kube, "status", *host)).out
    _restart_in_place(kube, "bare-0", 1)
    st = ok(_vp(kube, "status", *host, "--json"))
    assert st.doc["hosts"][0]["patches"] == [], st.out
    assert b"kimi_k2" not in kube.read("bare-0", TARGET)


def test_a_missing_pod_is_one_error_with_a_hint(kube: k8slab.Cluster) -> None:
    res = _vp(kube, "status", "--host", "kubectl://default/nope-0", "--python", PYTHON)
    assert res.code != 0
    assert "no pod 'default/nope-0'" in res.err and "hint:" in res.err, res.err


ROLL = ["--canary", "1", "--control", "1", "--level", "static", "--json", "--window", "2",
        "--scrape-every", "0.4", "--min-drafts", "0", "--max-window", "20",
        "--min-throughput-ratio", "0.9"]  # fmt: skip


def test_a_rollout_over_pods_keeps_the_good_patch_and_rolls_back_the_bad(
    kube: k8slab.Cluster, tmp_path: Path
) -> None:
    """Three pods serving the stand-in endpoint (no Service: health and metrics are fetched by
    the agent inside each), venvs on emptyDir volumes, the last pod the control; each restarted
    in place (SIGTERM to PID 1 through `kubectl exec`: a new container on the same volume).
    SPEC_B halves the tokens/s: rolled back on the canary. SPEC_A: kept, but on the control."""
    inv = _rollout_inventory(tmp_path / "hosts.toml")
    pristine = {n: kube.read(n, TARGET) for n in ROLL_PODS}
    bad = _spec(tmp_path, SPEC_B)
    res = _vp(kube, "rollout", bad, "--inventory", inv, *ROLL, name="rollout (bad, 3 pods)")
    assert res.code == 1, res.out + res.err
    hosts = {h["target"]: h for h in res.doc["hosts"]}
    assert hosts["roll-0"]["rollout"]["verdict"] == "rolled_back", res.out + res.err
    assert {n: kube.read(n, TARGET) for n in ROLL_PODS} == pristine
    restarts = kube.pod("roll-0")["status"]["containerStatuses"][0]["restartCount"]
    res = _vp(kube, "rollout", _spec(tmp_path), "--inventory", inv, *ROLL,
              name="rollout (good, 3 pods)")  # fmt: skip
    assert res.code == 0, res.out + res.err
    hosts = {h["target"]: h for h in res.doc["hosts"]}
    assert hosts["roll-0"]["rollout"]["verdict"] == "kept", hosts["roll-0"]["rollout"]
    assert kube.pod("roll-0")["status"]["containerStatuses"][0]["restartCount"] > restarts
    assert [b"kimi_k2" in kube.read(n, TARGET) for n in ROLL_PODS] == [True, True, False]


def test_a_rollout_whose_restart_makes_a_new_pod_is_refused(
    kube: k8slab.Cluster, tmp_path: Path
) -> None:
    before = kube.read("vllm-2", TARGET)
    res = _vp(kube, "rollout", _spec(tmp_path), *_host("vllm-2"), "--restart",
              "kubectl delete pod vllm-2")  # fmt: skip
    assert res.code == 2, res.out + res.err
    assert "makes a new pod" in res.err and "initContainer" in res.err, res.err
    assert kube.read("vllm-2", TARGET) == before


SPEC_FILE = "servekit-kimi.toml"


def _ensure_pod(name: str, configmap: str) -> dict[str, Any]:
    """docs/hooks.md's Kubernetes recipe as the lab runs it: its volumes, mounts and the
    initContainer's exact argv, with the lab's image, the stand-in spec's file name, the
    stand-in server, and an emptyDir for the recipe's PVC, into which a first initContainer
    copies the image's venv (as the `volume` pods do; a PVC would hold it already)."""
    pod = yaml.safe_load(recipe("kubernetes"))
    spec = pod["spec"]
    [init], [server] = spec["initContainers"], spec["containers"]
    doc_spec = next(a for a in init["command"] if a.endswith(".toml"))
    mine = str(PurePosixPath(doc_spec).with_name(SPEC_FILE))
    init["command"] = [mine if a == doc_spec else a for a in init["command"]]
    venv = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == "venv")
    assert venv == VENV and init["command"][-1] == PYTHON, init  # the image's venv
    spec["volumes"] = [{"name": "venv", "emptyDir": {}} if v["name"] == "venv" else v
                       for v in spec["volumes"]]  # fmt: skip
    for v in spec["volumes"]:
        if "configMap" in v:
            v["configMap"]["name"] = configmap
    copy = {"name": "venv-copy", "command": COPY_VENV,
            "volumeMounts": [{"name": "venv", "mountPath": "/vol"}]}  # fmt: skip
    server.update(name="server", command=[PYTHON, "-c", containerlab.SERVER])
    spec["initContainers"] = [copy, init]
    for c in (copy, init, server):
        c.update(image=k8slab.IMAGE, imagePullPolicy="Never")
    spec["nodeName"] = "node1"
    pod["metadata"] = {"name": name, "labels": {"app": "ensure"}}
    return pod


def _init_exit(kube: k8slab.Cluster, pod: str, timeout: float = 240) -> int:
    """The exit code of the pod's vpatch initContainer once it has ended at least once."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = kube.pod(pod).get("status", {}).get("initContainerStatuses") or []
        ended = [s.get("terminated") for c in st if c["name"] == "vpatch"
                 for s in (c.get("state", {}), c.get("lastState", {}))]  # fmt: skip
        codes = [e["exitCode"] for e in ended if e]
        if codes:
            return int(codes[0])
        time.sleep(0.5)
    raise AssertionError(f"pod {pod}: vpatch initContainer never ended: {kube.pod(pod)}")


def test_the_init_container_recipe_ensures_the_spec_before_the_server_starts(
    kube: k8slab.Cluster, tmp_path: Path
) -> None:
    """docs/hooks.md's recipe for real: the pod becomes Ready on a venv patched before its
    server started; on a spec that cannot apply (a range the venv is not in) ensure exits 1
    and the server never starts."""
    off = tmp_path / "off.toml"
    off.write_text(spec_a(versions=">=2.0"))
    for name, path in (("vpatch-specs", _spec(tmp_path)), ("vpatch-specs-off", off)):
        kube.kubectl("create", "configmap", name, f"--from-file={SPEC_FILE}={path}")
    try:
        t = time.monotonic()
        kube.apply(_ensure_pod("ensure-0", "vpatch-specs"))
        kube.wait_ready("ensure-0")
        TIMINGS["pod Ready through the vpatch initContainer"] = time.monotonic() - t
        log = kube.kubectl("logs", "ensure-0", "-c", "vpatch")
        assert log.startswith("applied: local: servekit-kimi") and "[1 applied]" in log, log
        probe = "import servekit.config as module\n" + standin.PROBE
        kube.kubectl("exec", "ensure-0", "-c", "server", "--", PYTHON, "-c", probe)
        st = ok(_vp(kube, "status", *_host("ensure-0/server"), "--json"))
        [h] = st.doc["hosts"]
        assert [(p["id"], p["outcome"]) for p in h["patches"]] == [("servekit-kimi", "applied")], h
        kube.apply(_ensure_pod("ensure-off-0", "vpatch-specs-off"))
        assert _init_exit(kube, "ensure-off-0") == 1
        log = kube.kubectl("logs", "ensure-off-0", "-c", "vpatch", check=False)
        log += kube.kubectl("logs", "ensure-off-0", "-c", "vpatch", "--previous", check=False)
        assert "not_applicable" in log, log
        status = kube.pod("ensure-off-0")["status"]
        [server] = status["containerStatuses"]
        assert "waiting" in server["state"] and server["restartCount"] == 0, server
        assert not server.get("lastState") and status["phase"] == "Pending", status
    finally:
        kube.kubectl("delete", "pod", "ensure-0", "ensure-off-0", "--ignore-not-found", check=False)
        kube.kubectl("delete", "configmap", "vpatch-specs", "vpatch-specs-off", check=False)
