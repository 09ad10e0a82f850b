"""The trust closure's facts: lstat and the POSIX ACL of every path the code a step runs
will read (closure.py holds the rule that decides from them).

Only metadata is read (lstat, the `system.posix_acl_access` xattr) and, as text, the files
`site` itself reads as data (`.pth` files, an editable finder's `MAPPING`, pyvenv.cfg): on a
descriptor opened with O_NOFOLLOW|O_NONBLOCK, a regular file only, bounded. Nothing of the
environment is imported or run here. Gathered once per worker start (`start_facts`, before
`site`), and once more per set of packages a probe imports (`import_facts`).
"""

from __future__ import annotations

import os
import stat
import sys

from . import closure

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from typing import Any

    from .closure import Fact

ACL_XATTR = "system.posix_acl_access"
_PTH_MAX = 1 << 20  # bytes of one .pth file read (site reads them whole; a real one is small)


def fact(path: str, content: bool = False) -> Fact:
    """(path, uid, gid, mode, ACL entries or None, content) of `path` itself (lstat: a link
    is a link; `followed` adds what it points to)."""
    st = os.lstat(path)
    acl = None
    if not stat.S_ISLNK(st.st_mode):
        try:
            acl = closure.parse_acl(os.getxattr(path, ACL_XATTR, follow_symlinks=False))
        except (OSError, AttributeError):  # no ACL, or no ACL interface: mode bits only
            acl = None
    return (path, st.st_uid, st.st_gid, st.st_mode, acl, content)


def chain(path: str, content: bool = False) -> list[Fact]:
    """Facts of every component of `path` and of its real path (the last one `content`
    when it is a directory read by name)."""
    out: list[Fact] = []
    seen = set()
    for p in (os.path.abspath(path), os.path.realpath(path)):
        parts = p.split(os.sep)
        for i in range(1, len(parts) + 1):
            where = os.sep.join(parts[:i]) or os.sep
            if where in seen:
                continue
            seen.add(where)
            out.append(fact(where, content and where == p))
    return out


def followed(f: Fact) -> list[Fact]:
    """`f`, and where it is a link, the chain of what it points to (site and the import
    system read through links: a root-owned link to a user's file is the user's)."""
    if not stat.S_ISLNK(f[3]):
        return [f]
    real = os.path.realpath(f[0])
    return [f, *chain(real, f[5])] if os.path.lexists(real) else [f]


def tree(root: str, skip: tuple[str, ...] = ()) -> list[Fact]:
    """Facts of `root` and everything below it (no link followed; names in `skip` left out
    at any depth): a standard library, or a package a step imports."""
    out = [fact(root, True)]
    todo = [root]
    while todo:
        d = todo.pop()
        try:
            found = list(os.scandir(d))
        except OSError:
            continue
        for e in found:
            if e.name in skip:
                continue
            f = fact(e.path, True)
            out += followed(f)
            if stat.S_ISDIR(f[3]):
                todo.append(e.path)
    return out


def entries(d: str, names: tuple[str, ...] | None = None) -> list[Fact]:
    """Facts of the entries of directory `d` (those whose module name is in `names`: `x`,
    `x.py`, `x.cpython-311-x86_64-linux-gnu.so`, ...; all when None)."""
    out: list[Fact] = []
    try:
        listed = sorted(os.listdir(d))
    except OSError:
        return out
    for name in listed:
        if names is None or name.split(".")[0] in names:
            try:
                out += followed(fact(os.path.join(d, name), True))
            except OSError:
                continue
    return out


def read_pth(path: str) -> str:
    """A .pth file's text: on a descriptor opened without following a link or blocking on a
    FIFO, a regular file only, bounded ("" otherwise: site would not read a FIFO either)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, _PTH_MAX).decode("utf-8", "replace")
    finally:
        os.close(fd)


def members(facts: list[Fact]) -> dict[int, frozenset[int]]:
    """Each group that some fact's writers name, resolved to its users (primary group, and
    listed members) from the host's user and group databases; a group it does not know is
    left out (a writer that cannot be told)."""
    gids = {w[1] for f in facts for w in closure.writers(f) if w[0] == "group"}
    if not gids:
        return {}
    import grp
    import pwd

    users = pwd.getpwall()
    out: dict[int, frozenset[int]] = {}
    for gid in gids:
        try:
            listed = grp.getgrgid(gid).gr_mem
        except KeyError:
            continue
        uids = {p.pw_uid for p in users if p.pw_gid == gid or p.pw_name in listed}
        out[gid] = frozenset(uids)
    return out


def stdlib_dirs(start: str, version: str = "") -> list[str]:
    """The standard library directories an interpreter whose search starts at `start` (its
    real directory, or a venv's `home`) finds, as CPython's getpath looks for its landmark:
    `lib/pythonX.Y/os.py` in `start`'s parent or above; of `version` ("3.11") where it is
    known, else every version found there (one too many only ever drops or refuses)."""
    want = "python" + version if version else "python3"
    d = os.path.realpath(start)
    while True:
        found = []
        for lib in ("lib", "lib64"):
            base = os.path.join(d, lib)
            try:
                names = os.listdir(base)
            except OSError:
                continue
            for name in sorted(names):
                if (name == want or (not version and name.startswith(want))) and os.path.isfile(
                    os.path.join(base, name, "os.py")
                ):
                    found.append(os.path.join(base, name))
        if found:
            return found
        up = os.path.dirname(d)
        if up == d:
            return []
        d = up


# Left out of a standard library's walk: its site dirs (the worker checks what `site` reads
# there), and CPython's own test suites (`test`, `unittest/test`, `idlelib/idle_test`, ...),
# which no server or agent imports and which are most of the tree's files (pyenv's 3.9:
# 7,471 entries, 29 ms of CPU to walk; 3,067 and 11 ms without them).
STDLIB_SKIP = ("site-packages", "dist-packages", "test", "tests", "idle_test")


def start_facts(site: Any) -> tuple[list[Fact], list[str]]:
    """What `site.main()` reads and runs, as facts: each site dir (the dir and its parents),
    its `.pth` files, the directories their path lines add and what editable finders map
    (each with its parents and entries: a bare import that falls through, such as the
    `sitecustomize` a stdlib without one looks for, or the `apport_python_hook` Debian's
    imports, reaches them), the modules their `import` lines name, and every
    `sitecustomize`/`usercustomize` of those dirs."""
    facts: list[Fact] = []
    dirs = [d for d in site_dirs(site, site_prefixes()) if os.path.isdir(d)]
    added: list[str] = []
    names = ["sitecustomize", "usercustomize"]
    for d in dirs:
        facts += [f for f in chain(d, True) if f not in facts]
        try:
            listed = sorted(os.listdir(d))
        except OSError:  # not ours to read (a base's site dir): `site` cannot read it either
            listed = []
        for name in listed:
            if not name.endswith(".pth"):
                continue
            pth = os.path.join(d, name)
            facts += followed(fact(pth))
            paths, mods = closure.pth_lines(read_pth(pth))
            for line in paths:
                where = os.path.abspath(os.path.join(d, line))
                if where not in added and where not in dirs and os.path.isdir(where):
                    added.append(where)
            names += [m for m in mods if m not in names]
    for d in dirs:
        for f in entries(d, tuple(names)):
            facts.append(f)
            if f[0].endswith("_finder.py") and os.path.basename(f[0]).startswith("__editable__"):
                found = finder_paths(f[0])  # (a stale mapping names nothing: skipped)
                added += [m for m in found if m not in added and os.path.exists(m)]
    for where in added:
        facts += [f for f in chain(where, True) if f not in facts]
        facts += entries(where)
    return facts, dirs + added


def finder_paths(path: str) -> list[str]:
    """The directories a setuptools editable finder (`__editable___NAME_finder.py`) maps
    its packages to: its `MAPPING` literal, read as data."""
    text = read_pth(path)
    i = text.find("\nMAPPING")
    j = text.find("{", i)
    k = text.find("}", j)
    if i < 0 or j < 0 or k < 0:
        return []
    import ast

    try:
        found = ast.literal_eval(text[j : k + 1])
    except (ValueError, SyntaxError):
        return []
    if not isinstance(found, dict):
        return []
    return [v for v in found.values() if isinstance(v, str) and os.path.isabs(v)]


def import_facts(tops: tuple[str, ...], dirs: list[str]) -> list[Fact]:
    """What importing the top-level packages `tops` reads besides the start's: each one's
    whole tree as the import system finds it (`find_spec`: nothing imported) with its
    parents, and every entry of `dirs` (sys.path's site and added dirs: a package directory
    another user owns there is imported by name by whatever imports it)."""
    import importlib.util

    facts: list[Fact] = []
    for d in dirs:
        facts += entries(d)
    for top in tops:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        for loc in list(spec.submodule_search_locations or []):
            if os.path.isdir(loc):
                facts += chain(loc, True) + tree(loc)
        if not spec.submodule_search_locations and spec.origin and os.path.isabs(spec.origin):
            facts += chain(spec.origin)
    return facts


# pyvenv.cfg as CPython finds and reads it: stage 0's env_facts (privsep) and the worker's
# site_prefixes below both need it, so it sits here, below privsep.


def parse_pyvenv(text: str) -> dict[str, str]:
    """pyvenv.cfg's `key = value` lines, as site.venv reads them (keys lower-cased, first
    `=` splits, blank and `#` lines skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" not in line or line.lstrip().startswith("#"):
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key and key not in out:
            out[key] = value.strip()
    return out


def env_prefix(executable: str, has_cfg: Any) -> str:
    """The environment's prefix as CPython finds it: the directory of `pyvenv.cfg` next to
    the executable (as given, not resolved) or one level up; else the installation's own,
    two levels above the resolved executable. `has_cfg(dir)` says whether dir holds one."""
    here = os.path.dirname(executable)
    for d in (here, os.path.dirname(here)):
        if has_cfg(d):
            return d
    return os.path.dirname(os.path.dirname(os.path.realpath(executable)))


def has_cfg(d: str) -> bool:
    """Whether directory `d` holds a pyvenv.cfg (lexists: a link there counts, as one)."""
    return os.path.lexists(os.path.join(d, "pyvenv.cfg"))


def site_prefixes() -> list[str]:
    """The prefixes whose site dirs `site` will read here: the env's, and the base
    interpreter's when pyvenv.cfg includes the system site packages (their .pth files run
    at `site.main()` too)."""
    prefix = env_prefix(sys.executable, has_cfg)
    cfg = os.path.join(prefix, "pyvenv.cfg")
    out = [prefix]
    if os.path.isfile(cfg):  # root's: stage 0 checked it
        with open(cfg, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 16)
        if parse_pyvenv(text).get("include-system-site-packages", "").lower() == "true":
            out.append(sys.base_prefix)
    return out


def site_dirs(site: Any, prefixes: list[str]) -> list[str]:
    """Every directory whose .pth files `site.main()` may run for these prefixes: what
    `site.getsitepackages` names here, and each prefix's `lib/pythonX.Y/site-packages`
    besides. Under -S a venv's sys.prefix is still the base's (`site` itself switches it), and
    Debian's `getsitepackages` then names only `dist-packages` dirs: the venv's own
    site-packages, whose .pth files `site.main()` runs after the switch, went unchecked (a
    root-owned venv with another user's .pth ran it as root). Checking a directory too many
    only ever drops or refuses."""
    out = list(site.getsitepackages(prefixes))
    version = "python%d.%d" % sys.version_info[:2]
    for prefix in prefixes:
        for lib in dict.fromkeys((getattr(sys, "platlibdir", "lib"), "lib")):
            d = os.path.join(prefix, lib, version, "site-packages")
            if d not in out:
                out.append(d)
    return out
