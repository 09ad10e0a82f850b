"""Targets from a Kubernetes namespace: every running pod a label selector picks, each reached
by kind kubectl (`vpatch status|diff|verify --kubectl NS -l SELECTOR`: a read-only audit of
what each pod of a deployment really runs).

`pods(doc, ...)` is pure: `kubectl get pods -o json`'s document to targets and the pods left
out (not Running, or being deleted: no container to exec into); `listing(...)` runs kubectl.
Pods come sorted by name, so reports read the same way every run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any, NamedTuple

from patcher.errors import HostError, UsageError
from patcher.inventory.targets import Target
from patcher.transports import kubectl


class Pods(NamedTuple):
    targets: list[Target]
    skipped: list[tuple[str, str]]  # (NS/NAME, why: its phase, or "terminating")


def pods(doc: dict[str, Any], python: str, container: str | None, context: str | None) -> Pods:
    """The running pods of a `kubectl get pods -o json` document as targets: `container`
    names the container in each (None: the pod's first, as `kubectl exec` picks it)."""
    out, skipped = [], []
    items = doc.get("items") if isinstance(doc, dict) else None
    for item in sorted(items or [], key=_name):
        meta, spec = item.get("metadata") or {}, item.get("spec") or {}
        pod = f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/")
        phase = (item.get("status") or {}).get("phase") or "Unknown"
        if kubectl.pod_problem(pod) is not None:
            skipped.append((pod, "not a pod name"))
            continue
        if meta.get("deletionTimestamp"):
            skipped.append((pod, "terminating"))
            continue
        if phase != "Running":
            skipped.append((pod, phase))
            continue
        names = [c.get("name") for c in spec.get("containers") or []]
        name = container or (names[0] if names else None)
        if container is not None and container not in names:
            skipped.append((pod, f"no container {container!r}"))
            continue
        out.append(
            Target(
                f"kubectl://{pod}",
                "local",
                python=python,
                local=True,
                transport="kubectl",
                container=pod,
                container_name=name,
                kube_context=context,
            )
        )
    return Pods(out, skipped)


def _name(item: Any) -> tuple[str, str]:
    meta = item.get("metadata") or {} if isinstance(item, dict) else {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def listing(namespace: str, selector: str, context: str | None, timeout: float) -> Any:
    """`kubectl get pods -n NS -l SELECTOR -o json` on this machine, its document."""
    problem = kubectl.word_problem("namespace", namespace) if namespace else "no namespace"
    if context is not None:
        problem = problem or kubectl.word_problem("kube_context", context)
    if problem or selector.startswith("-"):
        raise UsageError(
            f"--kubectl {namespace!r} -l {selector!r}: {problem or 'not a label selector'}",
            "e.g. --kubectl serve -l app=vllm",
        )
    exe = shutil.which("kubectl")
    if exe is None:
        raise UsageError("--kubectl: no `kubectl` on PATH", "install kubectl (kubernetes-client)")
    argv = [exe, *([f"--context={context}"] if context else [])]
    argv += ["get", "pods", "-n", namespace, f"--selector={selector}", "-o", "json"]
    try:
        # process-start: the Kubernetes client `kubectl get pods` (not a Python)
        ran = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise HostError(
            f"kubectl get pods: no answer in {timeout:g} s", "is the cluster up?"
        ) from None
    if ran.returncode != 0:
        err = ran.stderr.decode("utf-8", "replace").strip().splitlines()
        raise UsageError(
            f"kubectl get pods -n {namespace}: {err[-1][:300] if err else ran.returncode}",
            "`kubectl get pods -n NS -l SELECTOR` must work as vpatch runs",
        )
    try:
        return json.loads(ran.stdout)
    except ValueError:
        raise HostError(
            "kubectl get pods: not a JSON document", "check kubectl's version"
        ) from None
