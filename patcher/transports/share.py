"""Shared SSH connections by default, as Ansible has them: one OpenSSH master per host, kept
60 s after the command, so the next command to that host (a pre-start `ensure`, a `verify`
after an `apply`, a rollout's next step) opens a session over it: no key exchange, no
authentication, 5 round trips fewer (11 -> 6 for an apply, bench/delay.py counted).

How the operator's ssh_config still wins: ssh takes the first value it reads for each option,
and `-o` on the command line would come before the config (overriding an operator who wrote
`ControlMaster no`). So vpatch gives ssh one `-F` file of its own instead, which includes the
configuration ssh would have read (the `--ssh-config` file, else `~/.ssh/config` and
`/etc/ssh/ssh_config`) and only then, for every host, `ControlMaster auto`, `ControlPath
DIR/%C`, `ControlPersist 60s`. Whatever the operator set, `ControlMaster no` included, is read
first and kept; only hosts their config says nothing about get vpatch's values. No `ssh -G`
per host: the decision is ssh's own, made while it reads its config anyway.

DIR is vpatch's own: `<cache dir>/cm` (patcher.caches.rewrites's base: `$VPATCH_CACHE_DIR`, else
`$XDG_CACHE_HOME/vpatch`, else `~/.cache/vpatch`), or `/tmp/vpatch-cm-UID` where that path
would be too long for a unix socket (ssh binds `PATH.` + 16 random characters first: 108 bytes
in all). Made 0700; used only when it is a real directory (no link), this user's, and open to
nobody else, its parent writable by nobody else: whoever could write there could stand in a
socket of their own between vpatch and every host. Otherwise, and with `--no-share` or
`share = false` in an inventory, each command connects on its own, as before.

Decided in pure functions (the config's text, whether a path can be included, whether a
ControlPath fits); the directory and the file are made by `prepare`, once per process.
"""

from __future__ import annotations

import os
import stat
import time
from typing import NamedTuple

PERSIST = "60s"
KEEP_CONFIGS = 64  # -F files kept in the control directory (one per --ssh-config path)
PRUNE_AFTER = 86400.0  # ...and none pruned that a run used within this many seconds
SOCKET_MAX = 107  # sun_path is 108 bytes with its NUL
_SSH_TEMP_SUFFIX = 17  # ssh binds "PATH." + 16 random characters, then renames it to PATH
_HASH_LEN = 40  # %C: a SHA-1 in hex
_UNSAFE = set(" \t\n\r\"'\\*?[]#%")  # Include splits at blanks and globs; ssh_config comments


class Sharing(NamedTuple):
    """The run's connection sharing: the `-F` file to hand ssh (None: no sharing) and, for
    `-v`, what was decided and why."""

    config: str | None
    note: str


def fits(control_dir: str) -> bool:
    """Whether `DIR/%C` and ssh's temporary name beside it fit a unix socket's path."""
    return len(control_dir) + 1 + _HASH_LEN + _SSH_TEMP_SUFFIX <= SOCKET_MAX


def include_problem(path: str) -> str | None:
    """Why `path` cannot be an `Include` line's one literal file (None: it can): Include
    splits its value at blanks and expands globs, and `#` starts a comment."""
    if not os.path.isabs(path):
        return "not an absolute path"
    bad = sorted(set(path) & _UNSAFE)
    return f"has {''.join(bad)!r} in its path" if bad else None


def config_text(ssh_config: str | None, control_dir: str) -> str:
    """The `-F` file: what ssh would have read, then vpatch's sharing for every host. Without
    `--ssh-config` ssh reads ~/.ssh/config and then /etc/ssh/ssh_config (a missing one is
    skipped, as ssh skips it)."""
    read = [ssh_config] if ssh_config else ["~/.ssh/config", "/etc/ssh/ssh_config"]
    lines = ["# vpatch: the ssh_config below first (its values win), then shared connections"]
    lines += [f"Include {path}" for path in read]
    lines += [
        "Host *",
        "  ControlMaster auto",
        f"  ControlPath {control_dir}/%C",
        f"  ControlPersist {PERSIST}",
    ]
    return "\n".join(lines) + "\n"


def cache_base() -> str:
    """patcher.caches.rewrites's base directory (without its VPATCH_NO_CACHE switch: sharing
    is not a cache of results)."""
    return os.environ.get("VPATCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vpatch"
    )


def owned_dir(path: str, parent_owners: tuple[int, ...]) -> str | None:
    """Make `path` (0700) if missing; why it cannot be used (None: it can). Checked on a
    descriptor opened without following a link."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot make {path} ({exc.strerror})"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return f"{path} is not a directory of ours ({exc.strerror})"
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        return f"{path} is not this user's alone (owner {st.st_uid}, mode {mode:o})"
    try:
        up = os.stat(os.path.dirname(path))
    except OSError as exc:
        return f"cannot stat {os.path.dirname(path)} ({exc.strerror})"
    sticky_tmp = up.st_mode & stat.S_ISVTX and up.st_uid == 0
    if up.st_uid not in parent_owners or (up.st_mode & 0o022 and not sticky_tmp):
        return f"{os.path.dirname(path)} is writable by others"
    return None


def control_dir() -> tuple[str | None, str]:
    """vpatch's ControlPath directory, made if missing, and what was decided (None: no
    directory that is safe and short enough)."""
    base = cache_base()
    mine = os.path.join(os.path.abspath(base), "cm")
    uid = os.geteuid()
    if fits(mine):
        try:
            os.makedirs(base, mode=0o700, exist_ok=True)
        except OSError as exc:
            return None, f"cannot make {base} ({exc.strerror})"
        why = owned_dir(mine, (uid, 0))
        return (None, why) if why else (mine, "")
    tmp = f"/tmp/vpatch-cm-{uid}"
    why = owned_dir(tmp, (0,))
    return (None, f"{mine} is too long for a socket; {why}") if why else (tmp, "")


def write_config(directory: str, text: str) -> str:
    """The -F file in `directory` (ours, checked), named by its content: written once,
    atomically (O_EXCL temp file, rename); a later run finds it in place."""
    from patcher.transports.fasthash import blake2b_hex

    digest = blake2b_hex([text.encode()], digest_size=8)
    path = os.path.join(directory, f"ssh_config-{digest}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    else:
        try:
            if os.read(fd, len(text) + 1) == text.encode():
                os.utime(fd)  # in use: not pruned while a run may still read it
                return path
        finally:
            os.close(fd)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _prune(directory, keep=KEEP_CONFIGS)
    return path


def _prune(directory: str, keep: int) -> None:
    """At most `keep` -F files (one per --ssh-config path met), the least recently used
    going first, and none used in the last PRUNE_AFTER seconds: a run started then may still
    hand its file to an `ssh` (a reused file's mtime is renewed, write_config)."""
    try:
        names = [n for n in os.listdir(directory) if n.startswith("ssh_config-")]
        if len(names) <= keep:
            return
        used = {n: os.stat(os.path.join(directory, n)).st_mtime for n in names}
        old = time.time() - PRUNE_AFTER
        for name in sorted(names, key=used.__getitem__)[: len(names) - keep]:
            if used[name] < old:
                os.unlink(os.path.join(directory, name))
    except OSError:
        pass  # another run pruned meanwhile


_made: dict[tuple[str | None, tuple[int, ...]], Sharing] = {}


def prepare(ssh_config: str | None) -> Sharing:
    """The run's sharing for this `--ssh-config`, made once for the file as it is on disk
    (path, inode, size, mtime): every host of a command shares it, and a later run in the
    same process after the file changed makes it anew."""
    ident: tuple[int, ...]
    try:
        st = os.stat(ssh_config) if ssh_config is not None else None
        ident = (st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else ()
    except OSError:
        ident = (-1,)
    key = (ssh_config, ident)
    got = _made.get(key)
    if got is None:
        got = _made[key] = _prepare(ssh_config)
    return got


def _prepare(ssh_config: str | None) -> Sharing:
    if ssh_config is not None:
        ssh_config = os.path.abspath(ssh_config)
        problem = include_problem(ssh_config)
        if problem is None:
            try:
                st = os.stat(ssh_config)
            except OSError as exc:
                problem = f"cannot stat it ({exc.strerror})"
            else:  # an included file must pass ssh's owner/mode check, a -F file need not
                if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
                    problem = "it is writable by others or not this user's"
        if problem:
            return Sharing(None, f"not shared: --ssh-config {ssh_config} {problem}")
    directory, why = control_dir()
    if directory is None:
        return Sharing(None, f"not shared: {why}")
    if include_problem(directory):  # a ControlPath value is split at blanks too
        return Sharing(None, f"not shared: {directory} {include_problem(directory)}")
    try:
        config = write_config(directory, config_text(ssh_config, directory))
    except OSError as exc:
        return Sharing(None, f"not shared: cannot write the ssh_config ({exc.strerror})")
    return Sharing(
        config,
        f"connections shared (ControlMaster auto, ControlPersist {PERSIST}, ControlPath "
        f"{directory}/%C) where the ssh_config sets no ControlMaster/ControlPath; "
        "--no-share to connect on their own",
    )
