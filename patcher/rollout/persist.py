"""Whether a rollout's `restart` keeps the patch it restarts for: pure, read before any host is
contacted (patcher/rollout/driver.py).

A patch in a container lives in the container's writable layer: a restart of the container
(`podman restart C`, `docker restart C`, a signal to its PID 1) keeps it; a re-create (`rm`
then `run`, `compose down`/`up --force-recreate`, `kubectl delete pod`, a rolling update) starts
a new container of the image, without the patch. A rollout whose restart re-creates would
judge a server that no longer runs the patch, so it is refused (exit 2, nothing written).

The command is read as words (shlex), split at the shell's `&&`, `||`, `;` and `|`; in each
simple command the program (after `sudo` and `VAR=value` words) and its subcommand (the first
word not an option) decide. Only what is known to re-create is refused: a command this does
not know (a systemd unit, a script) is run as written.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from patcher.errors import UsageError

if TYPE_CHECKING:
    from patcher.inventory.targets import Target

_ENGINES = {"docker", "podman", "nerdctl"}
_COMPOSE = {"docker-compose", "podman-compose"}
# Per CLI, the subcommands that make a new container (or remove the one patched); `flags`:
# what makes a compose `up` re-create.
_RECREATE: dict[str, frozenset[str]] = {
    "engine": frozenset({"rm", "run", "create", "kube", "play"}),
    "compose": frozenset({"down", "rm", "create", "run"}),
    "flags": frozenset({"--force-recreate", "--renew-anon-volumes", "-V"}),
    "kubectl": frozenset({"delete", "rollout", "replace", "scale", "apply", "set"}),
}
_SEPARATORS = {"&&", "||", ";", "|", "&", ";;"}
HINT = (
    "restart the container in place (`podman restart C`, `docker restart C`); to keep a patch "
    "across re-creates, bake it into the image (`vpatch wheel` builds the patched wheel to "
    "install there), or on Kubernetes run `vpatch ensure` in an initContainer into a venv on "
    "a volume"
)
# A pod's: the kubelet restarts a container as a new one, so only a venv on a volume keeps
# a patch; a restart in place is a signal to its PID 1 (`kubectl exec POD -- kill 1`).
POD_HINT = (
    "restart the pod's container in place (`kubectl exec -n NS POD -- kill 1`: the kubelet "
    "starts it again in the same pod) with the venv on a volume; to keep a patch across new "
    "pods, an initContainer runs `vpatch ensure` into a venv on a volume (emptyDir) the server "
    "mounts (docs/hooks.md), or bake it into the image (`vpatch wheel`)"
)


def simple_commands(command: str) -> list[list[str]]:
    """The command's simple commands as words; [] when it is not shell words shlex reads."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return []
    out: list[list[str]] = [[]]
    for w in words:
        if w in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(w)
    return [c for c in out if c]


def _program(words: list[str]) -> tuple[str, list[str]]:
    """(program's base name, its arguments), past `sudo [-opts]`, `env` and `VAR=value`."""
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("sudo", "env", "exec", "nice", "timeout") or w.startswith("-") or "=" in w:
            i += 1
            continue
        if words[i - 1 : i] == ["timeout"] and w[:1].isdigit():
            i += 1
            continue
        break
    if i >= len(words):
        return "", []
    return words[i].rsplit("/", 1)[-1], words[i + 1 :]


# Global options that take the next word as their value (before the subcommand).
_VALUED = {"-H", "--host", "-c", "--context", "--config", "-l", "--log-level", "--url",
           "--connection", "--root", "--runroot", "-n", "--namespace", "--kubeconfig", "-s",
           "--server", "--cluster", "--user", "-f", "--file", "-p", "--project-name"}  # fmt: skip


def _sub(args: list[str]) -> list[str]:
    """The words of a CLI's command that are not options or their values (`-n serve rollout
    restart` -> [rollout, restart])."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in _VALUED:
            skip = True
        elif not a.startswith("-"):
            out.append(a)
    return out


def recreates(command: str) -> str | None:
    """The words of `command` that re-create a container (e.g. `docker rm`), or None."""
    for words in simple_commands(command):
        prog, args = _program(words)
        sub = _sub(args)
        if prog in _ENGINES:
            sub = sub[1:] if sub[:1] == ["container"] else sub
            if sub[:1] == ["compose"]:
                prog, args, sub = f"{prog} compose", args[args.index("compose") + 1 :], sub[1:]
            elif sub[:1] and sub[0] in _RECREATE["engine"]:
                return f"{prog} {sub[0]}"
        if prog in _COMPOSE or prog.endswith(" compose"):
            if sub[:1] and sub[0] in _RECREATE["compose"]:
                return f"{prog} {sub[0]}"
            flags = _RECREATE["flags"] & set(args)
            if sub[:1] == ["up"] and flags:
                return f"{prog} up {' '.join(sorted(flags))}"
        if prog == "kubectl" and sub[:1] and sub[0] in _RECREATE["kubectl"]:
            return f"kubectl {sub[0]}"
    return None


def check_restarts(targets: Sequence[Target], restart: str | None) -> None:
    """Refuse (UsageError: exit 2, before anything is written) a rollout over a container
    whose restart would re-create it and throw the patch away."""
    for t in targets:
        command = t.restart or restart
        if t.container is None or not command:
            continue
        how = recreates(command)
        if how is not None and t.transport == "kubectl":
            raise UsageError(
                f"host {t.name}: restart {command!r} makes a new pod for {t.container!r} "
                f"(`{how}`): the patch in the old pod would be gone before the canary is judged",
                POD_HINT,
            )
        if how is not None:
            raise UsageError(
                f"host {t.name}: restart {command!r} re-creates container {t.container!r} "
                f"(`{how}`): the patch lives in its writable layer and would be gone before "
                "the canary is judged",
                HINT,
            )
