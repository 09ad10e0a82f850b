"""A rollout's restart over a container (patcher/rollout/persist.py), on the golden cases of
tests/cases/rollout/restarts.json: what re-creates the container is refused before any host
is contacted, what restarts it in place is run as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patcher.errors import UsageError
from patcher.inventory.targets import Target
from patcher.rollout.persist import check_restarts, recreates

CASES = json.loads((Path(__file__).parent.parent / "cases/rollout/restarts.json").read_text())
BOX = Target("c1", "local", local=True, transport="podman", container="vllm")


@pytest.mark.parametrize(("command", "want"), CASES["cases"], ids=[c[0] for c in CASES["cases"]])
def test_the_words_that_recreate_a_container(command: str, want: str | None) -> None:
    assert recreates(command) == want


def test_a_recreating_restart_of_a_container_is_refused_with_the_recipes() -> None:
    with pytest.raises(UsageError, match="re-creates container 'vllm'") as exc:
        check_restarts([BOX], "docker rm -f vllm && docker run -d --name vllm img")
    assert "vpatch wheel" in exc.value.hint and "initContainer" in exc.value.hint
    # the host's own restart wins over the flag's, as it does when the rollout runs
    check_restarts([BOX._replace(restart="podman restart vllm")], "podman rm -f vllm")
    # a host is no container: its restart re-creates nothing vpatch patched
    check_restarts([Target("h1", "h1", restart="docker rm -f x && docker run x")], None)


def test_a_restart_that_makes_a_new_pod_is_refused_with_the_pod_recipe() -> None:
    pod = Target("p1", "local", local=True, transport="kubectl", container="serve/vllm-0")
    with pytest.raises(UsageError, match="makes a new pod for 'serve/vllm-0'") as exc:
        check_restarts([pod], "kubectl -n serve delete pod vllm-0")
    assert "initContainer" in exc.value.hint and "kill 1" in exc.value.hint
    check_restarts([pod], "kubectl exec -n serve vllm-0 -- kill 1")
