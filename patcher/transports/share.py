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
`$XDG_CACHE_HOME/vpatch`, else `~/.cache/vpatch`), by its real path, or `/tmp/vpatch-cm-UID`
where that path would be too long for a unix socket (ssh binds `PATH.` + 16 random characters
first: 108 bytes in all). Made 0700. Every component from `/` down to DIR and to the `-F` file
must be root's or this user's, no link, and writable by nobody else (a root-owned sticky
directory such as /tmp may hold it): whoever could rename a directory on that way could put an
ssh_config of their own under the `-F` name (`Match exec` runs its command as this user) or a
socket of their own between vpatch and every host. ssh checks no owner of a `-F` file and
re-opens it at every start, so the walk is done again before every `ssh` vpatch starts
(`check_in_use`), not once per process. A cache base others can write is refused with an error
that names it (`Sharing.refused`); a squatted /tmp fallback only turns sharing off.

A master is reused only by a run that trusts the same things: OpenSSH names a master by host,
port and user (`%C`), so the ControlPath adds a digest of everything else that decides what is
trusted (`trust_digest`): the known-hosts files named and their content, StrictHostKeyChecking,
the identity file, the user and port given, and the ssh_config text (its proxy/jump, its
known-hosts and identity lines). A run with other known hosts makes a master of its own, so its
host key is checked exactly as with `--no-share`.

With `--no-share` or `share = false` in an inventory each command connects on its own.

Decided in pure functions (the config's text, whether a path can be included, whether a
ControlPath fits, whether one path component may be trusted, the trust digest); the directory
and the file are made by `prepare`, once per process and trust digest.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from patcher.transports.ownedfile import group_named, user_named

if TYPE_CHECKING:
    from patcher.transports.ssh import SshOptions

PERSIST = "60s"
KEEP_CONFIGS = 64  # -F files kept in the control directory (one per config and trust digest)
PRUNE_AFTER = 86400.0  # ...and none pruned that a run used within this many seconds
SOCKET_MAX = 107  # sun_path is 108 bytes with its NUL
_SSH_TEMP_SUFFIX = 17  # ssh binds "PATH." + 16 random characters, then renames it to PATH
_HASH_LEN = 40  # %C: a SHA-1 in hex
TRUST_LEN = 12  # hex digits of the trust digest after %C in the ControlPath ("-" before it)
_UNSAFE = set(" \t\n\r\"'\\*?[]#%")  # Include splits at blanks and globs; ssh_config comments
_READ_MAX = 1 << 22  # bytes of one trusted file hashed into the trust digest
REFUSED_HINT = (
    "set VPATCH_CACHE_DIR to a directory only you (or root) can write, all the way from /, "
    "or pass --no-share"
)


class Sharing(NamedTuple):
    """The run's connection sharing: the `-F` file to hand ssh (None: no sharing), for `-v`
    what was decided and why, and why it is refused (None: it is not): a cache directory
    someone else could swap is an error, never a silent fallback."""

    config: str | None
    note: str
    refused: str | None = None


def fits(control_dir: str) -> bool:
    """Whether `DIR/%C-TRUST` and ssh's temporary name beside it fit a unix socket's path."""
    return len(control_dir) + 1 + _HASH_LEN + 1 + TRUST_LEN + _SSH_TEMP_SUFFIX <= SOCKET_MAX


def include_problem(path: str) -> str | None:
    """Why `path` cannot be an `Include` line's one literal file (None: it can): Include
    splits its value at blanks and expands globs, and `#` starts a comment."""
    if not os.path.isabs(path):
        return "not an absolute path"
    bad = sorted(set(path) & _UNSAFE)
    return f"has {''.join(bad)!r} in its path" if bad else None


def config_text(ssh_config: str | None, control_dir: str, trust: str = "") -> str:
    """The `-F` file: what ssh would have read, then vpatch's sharing for every host. Without
    `--ssh-config` ssh reads ~/.ssh/config and then /etc/ssh/ssh_config (a missing one is
    skipped, as ssh skips it). `trust` (trust_digest) ends the ControlPath's name: a master
    serves only runs that trust the same things."""
    read = [ssh_config] if ssh_config else ["~/.ssh/config", "/etc/ssh/ssh_config"]
    lines = ["# vpatch: the ssh_config below first (its values win), then shared connections"]
    lines += [f"Include {path}" for path in read]
    lines += [
        "Host *",
        "  ControlMaster auto",
        f"  ControlPath {control_dir}/%C" + (f"-{trust}" if trust else ""),
        f"  ControlPersist {PERSIST}",
    ]
    return "\n".join(lines) + "\n"


def trust_digest(facts: Iterable[tuple[str, str]]) -> str:
    """TRUST_LEN hex digits naming what a run trusts: (what, value) pairs such as
    ("known_hosts", "/path sha256:...") or ("strict", "yes"), in the order given."""
    from patcher.transports.fasthash import blake2b_hex  # no hashlib before the first ssh

    lines = (f"{what}={value}\n".encode("utf-8", "surrogateescape") for what, value in facts)
    return blake2b_hex(lines, digest_size=TRUST_LEN // 2)


def component_problem(
    path: str, st: os.stat_result, last: bool, uid: int, want_dir: bool
) -> str | None:
    """Why one component of a path vpatch hands ssh (`st`, its lstat) could be changed by
    someone other than `uid` or root (None: it cannot). `last` is the path itself (a
    directory when `want_dir`, else a regular file); every other component is a directory on
    the way to it, which a root-owned sticky bit makes safe to share (others cannot rename
    what is not theirs)."""
    mode, owner, group = st.st_mode, st.st_uid, st.st_gid
    if stat.S_ISLNK(mode):
        return f"{path} is a symbolic link"
    if owner not in (0, uid):
        return f"{path} is owned by {user_named(owner)}"
    if (not last or want_dir) and not stat.S_ISDIR(mode):
        return f"{path} is not a directory"
    if last and not want_dir and not stat.S_ISREG(mode):
        return f"{path} is not a regular file"
    if not mode & 0o022 or (not last and mode & stat.S_ISVTX and owner == 0):
        return None
    writer = "every user" if mode & 0o002 else f"group {group_named(group)}"
    return f"{path} is writable by {writer} (mode {stat.S_IMODE(mode):o})"


def chain_problem(path: str, want_dir: bool = True) -> str | None:
    """Why what `path` names could be changed by a user other than this one or root (None:
    it cannot): every component from `/` down, lstat'ed (a link anywhere is refused: pass a
    real path), judged by `component_problem`."""
    if not os.path.isabs(path):
        return f"{path} is not an absolute path"
    uid = os.geteuid()
    parts = [p for p in path.split("/") if p]
    here = "/"
    for i in range(len(parts) + 1):
        here = os.path.join(here, parts[i - 1]) if i else "/"
        try:
            st = os.lstat(here)
        except OSError as exc:
            return f"cannot stat {here} ({exc.strerror})"
        why = component_problem(here, st, i == len(parts), uid, want_dir)
        if why:
            return why
    return None


def check_in_use(config: str) -> str | None:
    """Why the `-F` file must not be handed to the `ssh` about to start (None: it may): its
    directory (the ControlPath's) and the file itself checked from `/` down again, since ssh
    re-opens the file by name at every start."""
    why = chain_problem(config, want_dir=False)
    return f"the shared-connection ssh_config {config}: {why}" if why else None


_hashed: dict[tuple[str, int, int, int], str] = {}


def file_fact(path: str) -> str:
    """`path` and its content's BLAKE2b (or why there is none), for trust_digest; a file of
    the same inode, size and mtime is hashed once per process."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path} {exc.strerror}"
    from patcher.transports.fasthash import blake2b_hex

    key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    got = _hashed.get(key)
    if got is None:
        try:
            with open(path, "rb") as fh:
                got = blake2b_hex([fh.read(_READ_MAX)], digest_size=16)
        except OSError as exc:
            got = exc.strerror or "unreadable"
        _hashed[key] = got
    return f"{path} {got}"


_NAMED = ("userknownhostsfile", "globalknownhostsfile", "identityfile", "certificatefile")


def named_files(config_text_: str) -> list[str]:
    """The files an ssh_config's own lines name as known hosts or identities (`~/` expanded;
    values with `%` tokens or `${}` are kept as written, the text's digest covers them)."""
    found: list[str] = []
    for line in config_text_.splitlines():
        words = line.replace("=", " ", 1).split()
        if len(words) > 1 and words[0].lower() in _NAMED:
            found += [os.path.expanduser(w.strip('"')) for w in words[1:]]
    return found


_named: dict[tuple[str, str], list[str]] = {}


def _named_by(path: str, fact: str) -> list[str]:
    """named_files of the ssh_config at `path`, read once per content (`fact`)."""
    got = _named.get((path, fact))
    if got is None:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                got = named_files(fh.read(_READ_MAX))
        except OSError:
            got = []
        _named[(path, fact)] = got
    return got


DEFAULT_KNOWN_HOSTS = (
    "~/.ssh/known_hosts",
    "~/.ssh/known_hosts2",
    "/etc/ssh/ssh_known_hosts",
    "/etc/ssh/ssh_known_hosts2",
)


def trust_facts(
    opts: SshOptions, strict: str, user: str | None, port: int | None
) -> list[tuple[str, str]]:
    """What a run trusts for one host, read where ssh reads it: the ssh_config files and the
    files their lines name, the known-hosts files ssh consults (--known-hosts alone when
    given, else the defaults and the config's), host-key checking, identity, user, port."""
    ssh_config, known_hosts, identity = opts.ssh_config, opts.known_hosts, opts.identity
    facts = [("strict", strict), ("user", user or ""), ("port", str(port or ""))]
    configs = [ssh_config] if ssh_config else [os.path.expanduser("~/.ssh/config")]
    configs += [] if ssh_config else ["/etc/ssh/ssh_config"]
    named: list[str] = []
    for path in configs:
        fact = file_fact(path)
        facts.append(("config", fact))
        named += _named_by(path, fact)
    if known_hosts:
        facts.append(("known_hosts", file_fact(known_hosts)))
    else:
        for path in [*map(os.path.expanduser, DEFAULT_KNOWN_HOSTS), *named]:
            facts.append(("named", file_fact(path)))
    if identity:
        facts.append(("identity", file_fact(identity)))
    return facts


def cache_base() -> str:
    """patcher.caches.rewrites's base directory (without its VPATCH_NO_CACHE switch: sharing
    is not a cache of results)."""
    return os.environ.get("VPATCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vpatch"
    )


def owned_dir(path: str, parent_owners: tuple[int, ...]) -> str | None:
    """Make `path` (0700) if missing; why it cannot be used (None: it can). Checked on a
    descriptor opened without following a link, then from `/` down (chain_problem)."""
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
    if up.st_uid not in parent_owners:
        return f"{os.path.dirname(path)} is owned by {user_named(up.st_uid)}"
    return chain_problem(path)


def control_dir() -> tuple[str | None, str, str | None]:
    """vpatch's ControlPath directory (a real path), made if missing, what was decided, and
    why it is refused (None: it is not). A cache base that others could swap is refused; a
    /tmp fallback someone else holds only turns sharing off."""
    base = cache_base()
    uid = os.geteuid()
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
    except OSError as exc:
        return None, f"not shared: cannot make {base} ({exc.strerror})", None
    real = os.path.realpath(base)
    mine = os.path.join(real, "cm")
    why = chain_problem(real)
    if why:
        said = f"the cache directory {base}" + (f" ({real})" if real != base else "")
        return None, "not shared: refused", f"connection sharing refused: {said}: {why}"
    if fits(mine):
        why = owned_dir(mine, (uid, 0))
        return (None, f"not shared: {why}", None) if why else (mine, "", None)
    tmp = f"/tmp/vpatch-cm-{uid}"
    why = owned_dir(tmp, (0,))
    if why:
        return None, f"not shared: {mine} is too long for a socket; {why}", None
    return tmp, "", None


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


_made: dict[tuple[str | None, tuple[int, ...], str], Sharing] = {}


def prepare(ssh_config: str | None, trust: str = "") -> Sharing:
    """The run's sharing for this `--ssh-config` and trust digest, made once for the file as
    it is on disk (path, inode, size, mtime): every host of a command that trusts the same
    things shares it, and a later run in the same process after the file changed makes it
    anew."""
    ident: tuple[int, ...]
    try:
        st = os.stat(ssh_config) if ssh_config is not None else None
        ident = (st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else ()
    except OSError:
        ident = (-1,)
    key = (ssh_config, ident, trust)
    got = _made.get(key)
    if got is None:
        got = _made[key] = _prepare(ssh_config, trust)
    return got


def _prepare(ssh_config: str | None, trust: str) -> Sharing:
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
    directory, why, refused = control_dir()
    if directory is None:
        return Sharing(None, why, refused)
    if include_problem(directory):  # a ControlPath value is split at blanks too
        return Sharing(None, f"not shared: {directory} {include_problem(directory)}")
    try:
        config = write_config(directory, config_text(ssh_config, directory, trust))
    except OSError as exc:
        return Sharing(None, f"not shared: cannot write the ssh_config ({exc.strerror})")
    return Sharing(
        config,
        f"connections shared (ControlMaster auto, ControlPersist {PERSIST}, ControlPath "
        f"{directory}/%C-{trust}) where the ssh_config sets no ControlMaster/ControlPath; "
        "--no-share to connect on their own",
    )
