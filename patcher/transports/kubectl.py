"""Kind `kubectl`: the agent in a running pod's container, `kubectl [--kubeconfig=F]
[--context=C] exec -i [-n NS] POD [-c CONTAINER] -- sh -c LINE` here, or through SSH on a host
whose kubectl reaches the cluster (patcher.transports.container: the same session and agent
start as podman's and docker's, with an exec command of this shape).

A pod is named `NS/NAME` (or `NAME`: the kubeconfig's namespace). What a patch in a pod keeps:
nothing of the container's own filesystem survives a container restart (the kubelet starts a
new container of the image), so a patch is kept only where the environment is on a volume
(the agent's `env_mounted`; docs/hooks.md, the initContainer recipe). Every name is an argv
item, checked first as Kubernetes names them, so none is taken for an option or shell text.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from patcher.errors import HostError, Unreachable
from patcher.transports import container

if TYPE_CHECKING:
    from patcher.transports import Settings, Target
    from patcher.transports.pipe import PipeTransport

# A namespace and a container are DNS labels, a pod a DNS subdomain (Kubernetes' own rules);
# a context a kubeconfig's name, which kubectl takes as one word.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_CONTEXT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:/-]{0,252}")
POD_HINT = "a pod is NAMESPACE/NAME (or NAME), as `kubectl get pods -A` lists them"
# kubectl's own words (1.20+) for a pod or container that is not there, or not running.
_MISSING = ("notfound", "not found")
_STOPPED = ("container not found", "is not running", "cannot exec into a container")


def pod_problem(pod: str) -> str | None:
    """Why `pod` cannot name a pod (`NS/NAME` or `NAME`), or None."""
    ns, _, name = pod.rpartition("/")
    if (ns and not _LABEL.fullmatch(ns)) or not _SUBDOMAIN.fullmatch(name):
        return f"{pod!r} is not a pod (NAMESPACE/NAME, lower-case letters, digits, - and .)"
    return None


def word_problem(field: str, value: str) -> str | None:
    """Why a pod's `container_name`, `namespace` or `kube_context` cannot be one, or None."""
    rule = _CONTEXT if field == "kube_context" else _LABEL
    if not rule.fullmatch(value):
        return f"{value!r} is not a {field.replace('_', ' ')}"
    return None


def exec_words(
    pod: str, name: str | None, context: str | None, kubeconfig: str | None
) -> tuple[str, ...]:
    """kubectl's exec command up to `--`: the agent's shell line follows it."""
    ns, _, pod_name = pod.rpartition("/")
    words = ["kubectl"]
    words += [f"--kubeconfig={kubeconfig}"] if kubeconfig else []
    words += [f"--context={context}"] if context else []
    words += ["exec", "-i"]
    words += ["-n", ns] if ns else []
    words += [pod_name]
    words += ["-c", name] if name else []
    return (*words, "--")


class Restarting(Unreachable):
    """The pod is there and its container is not running (the kubelet restarting it): no
    agent ran, nothing was asked."""


def kube_error(target: str, pod: str, err: bytes, code: int) -> HostError | None:
    """Why `kubectl exec` ended without an answer, in kubectl's words; None: not one of its."""
    text = err.decode("utf-8", "replace").lower()
    last = text.strip().splitlines()[-1][:300] if text.strip() else ""
    if any(w in text for w in _STOPPED):
        return Restarting(
            f"{target}: the container of pod {pod!r} is not running: {last}",
            "`kubectl get pod` shows its state; run vpatch again once it is Ready",
        )
    if any(w in text for w in _MISSING):
        return HostError(
            f"{target}: no pod {pod!r}: {last}",
            f"`kubectl get pods -A` lists them; {POD_HINT}",
        )
    if code == 1 and ("unable to connect" in text or "connection refused" in text):
        return HostError(
            f"{target}: kubectl cannot reach the cluster: {last}",
            "check the kubeconfig and context (`kubectl get pods` must work as vpatch runs)",
        )
    return None


class PodTransport(container.ContainerTransport):
    """The agent in a pod's container: one `kubectl exec -i` child per session.

    The kubelet restarts a container on its own time, after a back-off of 10 s doubling for
    each recent restart, and `kubectl exec` refuses until it runs: a restart in place
    (`kill 1`) returns before the container is back. A session whose exec found no running
    container (no agent started, nothing asked) is begun again until `restart_wait` seconds
    have passed, so the call after a rollout's restart waits for the container as `docker
    restart` would."""

    restart_wait = 90.0

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        end = time.monotonic() + self.restart_wait
        while True:
            try:
                return super()._call(request, timeout)
            except Restarting:
                if self._session is not None or time.monotonic() > end:
                    raise
                time.sleep(1.0)

    def _no_answer(self, out: bytes, err: bytes, code: int) -> dict[str, Any]:
        if not out.strip() and code > 0:
            exc = kube_error(self.target, self.box.name, err, code)
            if exc is not None:
                raise exc
        return super()._no_answer(out, err, code)


def make(target: Target, settings: Settings) -> PipeTransport:
    """A pod target: this machine's kubectl for a local target, else the kubectl of the SSH
    host `target.address` (always the OpenSSH client)."""
    from patcher.transports.ssh import options

    pod = target.container or ""
    problem = pod_problem(pod)
    for field in ("container_name", "kube_context"):
        value = getattr(target, field)
        problem = problem or (word_problem(field, value) if value is not None else None)
    if problem is None and target.container_user is not None:
        problem = "`kubectl exec` has no --user: the container's own user runs the agent"
    if problem is None and (target.kubeconfig or "").startswith("-"):
        problem = f"kubeconfig {target.kubeconfig!r} is not a file name"
    if problem is not None:
        raise HostError(f"{target.name}: {problem}", POD_HINT)
    words = exec_words(pod, target.container_name, target.kube_context, target.kubeconfig)
    box = container.Box("kubectl", pod, words=words)
    if not target.local:
        return container.over_ssh(target, settings, box)
    return PodTransport(target.name, box, options(target, settings)._replace(keep_agent=False))
