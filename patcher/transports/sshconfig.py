"""SSH client settings resolved the way OpenSSH resolves them, and known_hosts read the way
OpenSSH reads it.

paramiko's ssh_config parser knows no `Include`, and evaluates `Match` only in part, so a fleet
whose config works for `ssh` could resolve differently for vpatch. When an OpenSSH client is
installed, vpatch therefore asks it: `ssh -G [-F FILE] [-l USER] [-p PORT] -- HOST` prints the
final settings for that host (Include, Match, defaults and all). Without one, paramiko's parser
is the fallback (fabric's own config loading, as before).

`ssh -G` evaluates `Match exec` lines, which run shell commands with the host name (`%h`) and
user (`%r`) substituted in. So every host name and user from the command line or an inventory
is checked first (transports.sshnames): `--host 'x;touch M'` is an input error, and nothing ever
sees it.

known_hosts: every UserKnownHostsFile (new keys go to the first) and GlobalKnownHostsFile
OpenSSH would read. paramiko's loader stops with InvalidHostKey at the first `@revoked` or
`@cert-authority` line; here those lines are understood instead: a revoked key is refused even
where another line lists it, and a `@cert-authority` line is explained (vpatch's SSH client
cannot check host certificates) rather than crashing the run.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from patcher.errors import HostError
from patcher.transports.sshnames import host_problem, openssh, user_problem

if TYPE_CHECKING:
    import paramiko


# ---------------------------------------------------------------------------------------------
# ssh -G


@dataclass(frozen=True)
class Resolved:
    """What `ssh -G` says about one host (only the settings vpatch uses)."""

    hostname: str
    port: int
    user: str | None
    identity_files: list[str] = field(default_factory=list)  # existing files only
    user_known_hosts: list[str] = field(default_factory=list)
    global_known_hosts: list[str] = field(default_factory=list)
    proxied: bool = False  # ProxyJump or ProxyCommand: fabric's own handling connects
    identities_only: bool = False  # IdentitiesOnly yes: no ~/.ssh/id_* beyond those listed
    agent: bool = True  # IdentityAgent none: no ssh-agent


def _expand(path: str) -> str:
    return os.path.expanduser(path.replace("%d", "~", 1) if path.startswith("%d") else path)


def resolve(
    target: str,
    host: str,
    user: str | None,
    port: int | None,
    config_file: str | None,
    timeout: float,
) -> Resolved | None:
    """`ssh -G` for `host`, or None when no OpenSSH client is installed. Host and user must have
    passed host_problem/user_problem (the CLI and the inventory check them)."""
    ssh = openssh()
    if ssh is None:
        return None
    assert host_problem(host) is None and (user is None or user_problem(user) is None), host
    argv = [ssh, "-G"]
    argv += ["-F", config_file] if config_file else []
    argv += ["-l", user] if user else []
    argv += ["-p", str(port)] if port else []
    argv += ["--", host]
    try:
        # process-start: the OpenSSH client's `ssh -G` (not a Python)
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise HostError(
            f"{target}: `ssh -G {host}` did not answer within {timeout:g}s",
            "a `Match exec` command in the ssh_config hangs; fix it or pass --ssh-config",
        ) from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]
        raise HostError(
            f"{target}: the ssh client configuration does not resolve {host!r}: {why}",
            "run `ssh -G HOST` to see it; fix the ssh_config (or pass --ssh-config FILE)",
        )
    values: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        values.setdefault(key.lower(), []).append(value.strip())

    def one(key: str) -> str | None:
        got = values.get(key)
        return got[0] if got and got[0] not in ("", "none") else None

    identities = [_expand(p) for p in values.get("identityfile", [])]
    return Resolved(
        hostname=one("hostname") or host,
        port=int(one("port") or 22),
        user=one("user"),
        identity_files=[p for p in identities if os.path.isfile(p)],
        user_known_hosts=[_expand(p) for p in (one("userknownhostsfile") or "").split()],
        global_known_hosts=[_expand(p) for p in (one("globalknownhostsfile") or "").split()],
        proxied=bool(one("proxyjump") or one("proxycommand")),
        identities_only=one("identitiesonly") == "yes",
        agent=values.get("identityagent", [""])[0] != "none",
    )


# ---------------------------------------------------------------------------------------------
# known_hosts


@dataclass
class KnownHosts:
    """Keys of every known_hosts file read, the revoked keys, and the @cert-authority lines."""

    user: paramiko.HostKeys
    system: paramiko.HostKeys
    revoked: set[str] = field(default_factory=set)  # base64 key blobs
    cert_authorities: list[tuple[str, str]] = field(default_factory=list)  # (patterns, file)

    def is_revoked(self, key: paramiko.PKey) -> bool:
        return key.get_base64() in self.revoked

    def authority_for(self, hostname: str) -> str | None:
        """The file of a @cert-authority line whose patterns match `hostname`, if any."""
        bare = hostname
        if hostname.startswith("[") and "]:" in hostname:  # "[host]:port", as paramiko asks
            bare = hostname[1 : hostname.index("]:")]
        for patterns, path in self.cert_authorities:
            if _matches(patterns, (hostname, bare)):
                return path
        return None


def _matches(patterns: str, names: tuple[str, ...]) -> bool:
    """known_hosts pattern list semantics: any positive match, and no negated one."""
    hit = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if any(_glob(pattern.lstrip("!")).fullmatch(n) for n in names):
            if negated:
                return False
            hit = True
    return hit


def _glob(pattern: str) -> re.Pattern[str]:
    """OpenSSH patterns know `*` and `?` only (`[` is literal: `[host]:port` is common)."""
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    )


def cert_authority_for(files: list[str], hostname: str) -> str | None:
    """The first of `files` with a @cert-authority line whose patterns match `hostname` (as
    ssh names it: `host` or `[host]:port`), if any; read without paramiko."""
    bare = hostname
    if hostname.startswith("[") and "]:" in hostname:
        bare = hostname[1 : hostname.index("]:")]
    for path in files:
        try:
            text = Path(path).read_text("utf-8", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[0] == "@cert-authority":
                if _matches(fields[1], (hostname, bare)):
                    return path
    return None


def load_known_hosts(user_files: list[str], system_files: list[str]) -> KnownHosts:
    """Every readable file's keys; lines OpenSSH would skip (malformed) are skipped too."""
    import paramiko
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

    known = KnownHosts(paramiko.HostKeys(), paramiko.HostKeys())
    for files, keys in ((user_files, known.user), (system_files, known.system)):
        for path in files:
            try:
                text = Path(path).read_text("utf-8", "replace")
            except OSError:
                continue  # absent or unreadable: as for ssh
            for raw in text.splitlines():
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                fields = line.split()
                if fields[0] == "@revoked" and len(fields) >= 4:
                    known.revoked.add(fields[3])
                    continue
                if fields[0] == "@cert-authority" and len(fields) >= 2:
                    known.cert_authorities.append((fields[1], path))
                    continue
                if fields[0].startswith("@"):
                    continue  # a marker this OpenSSH-compatible reader does not know
                try:
                    entry = HostKeyEntry.from_line(line)
                except (paramiko.SSHException, InvalidHostKey, ValueError, TypeError):
                    continue
                if entry is not None:
                    # HostKeys has no public "add an entry" (add() cannot keep hashed names).
                    # Reached through vars(): types-paramiko (a dependency of the bench's
                    # pyinfra) declares no _entries, and mypy must pass with or without it.
                    vars(keys)["_entries"].append(entry)
    for keys in (known.user, known.system):
        kept = [e for e in vars(keys)["_entries"] if not known.is_revoked(e.key)]
        vars(keys)["_entries"] = kept
    return known
