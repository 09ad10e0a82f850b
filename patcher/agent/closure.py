"""The trust closure: what the code a step runs will read, who can write any of it, and so
as whom that code may run (privsep.py applies the answer).

Why: trust decided from a partial list (the interpreter's path, `pyvenv.cfg`, the site dirs
and their `.pth` files, mode bits only) let another user's code run as root: a directory a
root-owned `.pth` puts on `sys.path` (an editable checkout, with the `sitecustomize` or
`apport_python_hook` a bare import falls through to), a `.pth` made writable to a user by a
POSIX ACL (the group bits are then only the ACL's mask), a package directory one service user
owns in a root venv, a `--copies` venv whose `home` (so its standard library) is a user's.

The rule, in one place (`decide`): gather every path that the step's code will read (and
each parent directory of it), ask of each who can write it (`writers`: its owner always,
since an owner can chmod; group and others by the mode bits, or by the ACL's entries under
its mask when the file has one; a sticky parent lets others write nothing of what is not
theirs), resolve groups to their members, and drop root. Nobody left: root may run it. One
user: it runs as that user. More (or a group whose members cannot be told, or everyone):
refused, naming the paths and their writers, unless the operator named the user to run as
(`--run-as`). The decision is pure (facts in, uid or Refusal out); the gathering is the
thin I/O of closurefacts.py.
"""

from __future__ import annotations

import stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from typing import Optional, Tuple

    Acl = Tuple[Tuple[int, int, int], ...]
    # (path, uid, gid, mode, acl entries or None, content): `content` is a directory whose
    # entries are read by name (a sys.path entry, a package, the standard library), so
    # whoever may add an entry to it writes the closure, sticky bit or not.
    Fact = Tuple[str, int, int, int, Optional[Acl], bool]
    Principal = Tuple[str, int]  # ("user", uid), ("group", gid) unresolved, ("anyone", -1)

# The kernel's binary form of a POSIX ACL (posix_acl_xattr.h): a little-endian u32 version
# (2), then 8-byte entries (u16 tag, u16 perm, u32 id).
_ACL_VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_WRITE = 0x02

ANYONE = ("anyone", -1)


class Refusal(Exception):
    """Why the step's code does not run (more than one writer, and no --run-as)."""


# ---------------------------------------------------------------------------------------------
# Pure: an ACL's bytes, one path's writers, the decision


def parse_acl(data: bytes) -> Acl | None:
    """The entries of a `system.posix_acl_access` value; None for anything that is not one
    (then the mode bits are all there is to go by)."""
    if len(data) < 4 or (len(data) - 4) % 8 or int.from_bytes(data[:4], "little") != 2:
        return None
    out = []
    for i in range(4, len(data), 8):
        tag = int.from_bytes(data[i : i + 2], "little")
        perm = int.from_bytes(data[i + 2 : i + 4], "little")
        out.append((tag, perm, int.from_bytes(data[i + 4 : i + 8], "little")))
    return tuple(out)


def writers(fact: Fact) -> set[Principal]:
    """Who can change what `fact` names: its owner (who can always chmod it), and whoever
    its mode bits, or its ACL's entries under the mask, give write. A symlink's own mode means
    nothing (its owner and its directory's writers are what count); a sticky directory that
    is only a parent lets others add entries but not replace the one on the path."""
    _path, uid, gid, mode, acl, content = fact
    out = {("user", uid)}
    if stat.S_ISLNK(mode):
        return out
    if stat.S_ISDIR(mode) and mode & stat.S_ISVTX and not content:
        return out
    if acl is None:
        if mode & stat.S_IWGRP:
            out.add(("group", gid))
        if mode & stat.S_IWOTH:
            out.add(ANYONE)
        return out
    mask = next((perm for tag, perm, _id in acl if tag == MASK), 0x07)
    for tag, perm, ident in acl:
        if tag == USER and perm & mask & _WRITE:
            out.add(("user", ident))
        elif tag == GROUP_OBJ and perm & mask & _WRITE:
            out.add(("group", gid))
        elif tag == GROUP and perm & mask & _WRITE:
            out.add(("group", ident))
        elif tag == OTHER and perm & _WRITE:
            out.add(ANYONE)
    return out


def decide(
    facts: list[Fact],
    members: dict[int, frozenset[int]],
    run_as: int | None = None,
    owner: int | None = None,
) -> int | None:
    """The uid the step's code runs as (None: root may run it), for a root agent.

    `members`: each group's users (by uid) as the host's user and group databases list them;
    a group missing there cannot be told and counts as a writer of its own. `run_as`: the
    operator's explicit choice, which wins (it is how more than one writer is accepted).
    `owner`: a writer already known (the uid stage 0 dropped to for the environment's
    interpreter), whose facts are not in `facts`."""
    if run_as is not None:
        return run_as or None
    who: dict[Principal, list[str]] = {}
    if owner:
        who[("user", owner)] = ["the environment's interpreter"]
    for fact in facts:
        for w in writers(fact):
            if w[0] == "group" and w[1] in members:
                users = [("user", u) for u in sorted(members[w[1]])]
            else:
                users = [w]
            for u in users:
                if u != ("user", 0) and fact[0] not in who.setdefault(u, []):
                    who[u].append(fact[0])
    if not who:
        return None
    if len(who) == 1:
        ((kind, ident),) = who
        if kind == "user":
            return ident
    raise Refusal(
        "the code this step runs can be changed by %s: %s; vpatch runs it as no one of them "
        "(pass --run-as USER to choose)"
        % (
            "more than one user" if len(who) > 1 else _label(next(iter(who))),
            "; ".join("%s: %s" % (_label(w), _paths(ps)) for w, ps in sorted(who.items())),
        )
    )


def _label(w: Principal) -> str:
    kind, ident = w
    if kind == "user":
        return "uid %d" % ident
    if kind == "group":
        return "group %d (its members cannot be told)" % ident
    return "any user"


def _paths(paths: list[str]) -> str:
    more = len(paths) - 3
    return ", ".join(paths[:3]) + (" and %d more" % more if more > 0 else "")


def pth_lines(text: str) -> tuple[list[str], list[str]]:
    """(path lines, imported top-level module names) of a .pth file, as site.addpackage
    reads it: `#` and blank lines skipped, a line starting with `import` (space or tab) run
    as code (the names after `import` are what it imports by name: `import a, b.c; ...`),
    every other line a directory (relative to the site dir) added to sys.path."""
    paths: list[str] = []
    mods: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith(("import ", "import\t")):
            for name in line[len("import") :].split(";")[0].split(","):
                top = name.strip().split(" ")[0].split(".")[0]
                if top.isidentifier() and top not in mods:
                    mods.append(top)
            continue
        paths.append(line.rstrip())
    return paths, mods


# Code (run where root is about to run the environment's code, before `site`): an audit hook
# that refuses to open for reading any code file (`.py`, `.pyc` and its source, `.pth`) that a
# user other than root, or a group with a member other than root (as `decide` resolves groups;
# one whose members cannot be told counts as another user), could write, or whose directories up to
# `/` are not root's alone (a root sticky directory may be on the way). The walk above (`decide`
# on gathered facts) says ahead of time as whom code runs from the packages' top entries; this
# enforces the rule on every file the import system actually opens, a module deep inside a
# dependency and a `.pth`'s imports included. A refused file raises PermissionError naming it
# (`vpatch: FILE ...; refused to run it as root`), also kept in `_vp_said`; `_vp_on[0] = 0`
# turns the hook off (hooks cannot be removed) once root's run of that code is over. Used by
# root probes and import checks (probe.py, started `-I -S`) and the root worker's `site` run
# (privsep.worker).
GUARD = (
    "import os,sys\n"
    "_vp_ok={}\n"
    "_vp_g={}\n"
    "def _vp_members(g):\n"
    "    if g not in _vp_g:\n"
    "        import grp,pwd\n"
    "        try:\n"
    "            m=set(grp.getgrgid(g).gr_mem)\n"
    "        except KeyError:\n"
    "            m={'?'}\n"
    "        m|={u.pw_name for u in pwd.getpwall() if u.pw_gid==g}\n"
    "        m.discard('root')\n"
    "        _vp_g[g]=sorted(m)\n"
    "    return _vp_g[g]\n"
    "def _vp_bad(p,st,d):\n"
    "    if st.st_uid!=0:return '%s is owned by uid %d'%(p,st.st_uid)\n"
    "    m=st.st_mode\n"
    "    if m&2 and not(d and m&512):return '%s is writable by every user'%p\n"
    "    if m&16:\n"
    "        try:\n"
    "            a=os.getxattr(p,'system.posix_acl_access')\n"
    "        except (OSError,AttributeError):\n"
    "            a=b''\n"
    "        if a:return '%s has an ACL whose mask lets others write it'%p\n"
    "    if m&16 and st.st_gid!=0 and not(d and m&512) and _vp_members(st.st_gid):\n"
    "        w=','.join(_vp_members(st.st_gid))\n"
    "        return '%s is writable by group %d (members: %s)'%(p,st.st_gid,w)\n"
    "def _vp_dir(d):\n"
    "    if d not in _vp_ok:\n"
    "        try:\n"
    "            w=_vp_bad(d,os.stat(d),True)\n"
    "        except OSError:\n"
    "            w=None\n"
    "        u=os.path.dirname(d)\n"
    "        _vp_ok[d]=w or (_vp_dir(u) if u!=d else None)\n"
    "    return _vp_ok[d]\n"
    "def _vp_why(p):\n"
    "    try:\n"
    "        st=os.stat(p)\n"
    "    except OSError:\n"
    "        return None\n"
    "    w=_vp_bad(p,st,False)\n"
    "    for d in (os.path.dirname(p),os.path.dirname(os.path.realpath(p))):\n"
    "        w=w or _vp_dir(d)\n"
    "    return w\n"
    "def _vp_hook(ev,a):\n"
    "    if not _vp_on[0] or ev!='open' or len(a)<2:return\n"
    "    if not isinstance(a[1],str) or set(a[1])&set('wax+'):return\n"
    "    p=os.fsdecode(a[0]) if isinstance(a[0],(str,bytes)) else ''\n"
    "    if not p.endswith(('.py','.pyc','.pth')):return\n"
    "    ps=[p]\n"
    "    h,t=os.path.split(p)\n"
    "    if p.endswith('.pyc') and os.path.basename(h)=='__pycache__':\n"
    "        ps.append(os.path.join(os.path.dirname(h),t.split('.')[0]+'.py'))\n"
    "    for q in ps:\n"
    "        w=_vp_why(os.path.abspath(q))\n"
    "        if w:\n"
    "            _vp_said.append('vpatch: %s; refused to run it as root'%w)\n"
    "            raise PermissionError(_vp_said[-1])\n"
    "_vp_on,_vp_said=[1],[]\n"
    "sys.addaudithook(_vp_hook)\n"
)
