"""What the host runs and reads: the agent bundle, its loaders, the argv that starts them, and
the line format of requests and answers. Every transport sends these same bytes.

The target's interpreter runs `python -I -c BOOT` with the agent's source as the first stdin
line (a JSON map of module name to source, and to code objects for an interpreter like the
controller's, loaded by a tiny in-memory importer). Nothing has to be installed on the host,
the host's own `vpatch` (if any) is never used, and no value from a spec ever reaches a shell.
As root, privsep's stage 0 (BOOT0, under the trusted interpreter) starts first and decides who
runs the environment's interpreter (patcher/agent/privsep.py). The bundle is exactly
`patcher/agent/*.py`. Over SSH the loaders are sent the bundle's hash instead, and the host
keeps the bundle between runs (`kept_boot`, patcher/agent/kept.py): it is sent only when the
host has no copy it can trust.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

from patcher.errors import AgentError

# The loader the host runs as `python -I -c BOOT`. What it costs is paid by every agent start,
# so it imports nothing it can do without: the bundle line (a JSON object of strings, ASCII as
# json.dumps writes it below, read as bytes: the text layer's decoding of it cost ~0.5 ms) is
# parsed with the C string scanner json itself uses (`json` would import `re` and `enum`),
# module specs come from the import system's own frozen module (`importlib.util` costs ~4 ms),
# and a module's code object is taken from the bundle when it carries one for this
# interpreter's bytecode magic (compiling the agent's source is ~12 ms per start), decoded only
# when the module is imported. Every module travels zlib-compressed and base64-encoded, its
# code object and its source alike (level 6), the code objects kept without docstrings and
# column positions (_SLIM): the bundle went from 707 KB (plain source, plain code) to ~245 KB,
# which every host's sshd decrypts and pipes and every agent reads and scans
# before its first answer (~19 ms of CPU per MB over a host's ssh session, both ends). An
# interpreter of another magic decompresses and compiles the source; one without zlib cannot
# load the agent and says so (pip itself needs zlib to install a wheel).
BOOT = """\
import sys
try:
    from _json import scanstring as s
except ImportError:
    s=None
l=sys.stdin.buffer.readline().decode('latin-1')
if s:
    m={};i=l.find('"')
    while i>=0:
        k,i=s(l,i+1);v,i=s(l,l.index('"',i)+1);m[k]=v;i=l.find('"',i)
else:
    import json;m=json.loads(l)
try:
    import _frozen_importlib as B,_frozen_importlib_external as E
except ImportError:
    import importlib.machinery as B,importlib.util as E
import marshal,binascii
try:
    from zlib import decompress as z
except ImportError:
    raise SystemExit('vpatch agent: this python has no zlib module')
c='#'+E.MAGIC_NUMBER.hex()+':'
class F:
    def find_spec(self,name,path=None,target=None):
        if name in m:
            return B.ModuleSpec(name,self,is_package=name=='vpatch_agent')
    def create_module(self,spec):
        return None
    def exec_module(self,mod):
        n=mod.__name__;x=m.get(c+n)
        if x:x=marshal.loads(x if type(x) is bytes else z(binascii.a2b_base64(x)))
        else:x=compile(z(binascii.a2b_base64(m[n])),'<'+n+'>','exec')
        exec(x,mod.__dict__)
sys.meta_path.insert(0,F())
import vpatch_agent
vpatch_agent.main()
"""

_READLINE = "l=sys.stdin.buffer.readline().decode('latin-1')\n"
_IMPORTER = "sys.meta_path.insert(0,F())\n"
# privsep's stage 0 (patcher/agent/privsep.py), run as root by the trusted interpreter with
# `-I -S`: it reads the bundle by its length (the fixed-width `#n` that opens it), never a
# byte further, in pipe-sized reads joined once (reads of the whole rest grown by `+=` cost
# ~2 ms of CPU more per start), so the worker reads the requests from the same stdin. It needs
# only privsep, procs, protocol and wire: the package's own modules are not run. (Its
# command line names no `import vpatch_agent`: that marks the worker, the one that answers.)
BOOT0 = BOOT.replace(
    _READLINE,
    "import os\n"
    "def r(n):\n"
    "    p=[]\n"
    "    while n>0:\n"
    "        x=os.read(0,min(n,65536))\n"
    "        if not x:break\n"
    "        p.append(x);n-=len(x)\n"
    "    return b''.join(p)\n"
    "h=r(18);l=(h+r(int(h[8:18])-18)).decode('latin-1')\n",
).replace(
    "import vpatch_agent\nvpatch_agent.main()\n",
    "P=sys.modules['vpatch_agent']=type(sys)('vpatch_agent');P.__path__=[]\n"
    "__import__('vpatch_agent.privsep');P.privsep.stage0(l)\n",
)
# The checks on the directory the agent's code is kept in and on a file in it, shared by the
# loaders that look for a kept bundle (`kept_boot`) and the worker's (CHILD_BOOT): the
# directory opened from `/` one component at a time without following a link, each
# component root's or this user's and writable by nobody else, the last one closed to
# others (`make`: its last three components made 0700 where missing); the file opened
# O_NOFOLLOW on that descriptor and, on its own descriptor, this user's regular file with one
# link, writable by nobody else.
_KEPT_CHECKS = r"""import os
def D(u,make):
    import pwd
    p=os.path.realpath(pwd.getpwuid(u).pw_dir).strip('/').split('/')
    p=[n for n in p if n]+['.cache','vpatch','agent']
    f=os.open('/',os.O_RDONLY|os.O_DIRECTORY|os.O_CLOEXEC);w='/'
    try:
        for i,n in enumerate(['']+p):
            if n:
                if make and i>len(p)-3:
                    try:os.mkdir(n,0o700,dir_fd=f)
                    except FileExistsError:pass
                g=os.open(n,os.O_RDONLY|os.O_DIRECTORY|os.O_NOFOLLOW|os.O_CLOEXEC,dir_fd=f)
                os.close(f);f=g;w=w.rstrip('/')+'/'+n
            s=os.fstat(f)
            if s.st_uid not in(0,u):return f,'%s is owned by uid %d'%(w,s.st_uid)
            if s.st_mode&0o22:return f,'%s is writable by others'%w
        if s.st_uid!=u or s.st_mode&0o77:return f,'%s is not closed to others'%w
        return f,''
    except BaseException:
        os.close(f);raise
def Y(u,n):
    f,w=D(u,False)
    try:
        if w:return None,w
        b=os.open(n,os.O_RDONLY|os.O_NOFOLLOW|os.O_CLOEXEC,dir_fd=f)
        try:
            s=os.fstat(b)
            if s.st_mode&0o170022!=0o100000 or s.st_uid!=u or s.st_nlink!=1 or s.st_size>1<<26:
                return None,'the kept bundle is not a file of this user only'
            p=[];n=s.st_size
            while n>0:
                x=os.read(b,n)
                if not x:break
                p.append(x);n-=len(x)
            return b''.join(p),''
        finally:os.close(b)
    finally:os.close(f)
"""
# The worker's loader (the environment's interpreter, after the drop): BOOT reading the
# bundle stage 0 re-feeds on fd 3; the requests then come on stdin. Carried by the bundle.
# Where the bundle has no code objects for its interpreter's magic, it keeps the ones it
# compiles (patcher/agent/kept.py) in its own user's directory, as the other loaders do, but
# only where that directory exists and passes the checks (made by nothing here: root's is
# made by stage 0's own kept bundle, over SSH), so a local, Ray or Ansible run as root never
# writes one, nor does a worker dropped to an owner who never ran vpatch's agent as itself.
CHILD_BOOT = (
    BOOT.replace("sys.stdin.buffer.readline()", "open(3,'rb').readline()")
    .replace(
        _IMPORTER,
        _IMPORTER
        + "if c+'vpatch_agent' not in m:\n"
        + "    exec(C)\n"
        + "    try:f,w=D(os.geteuid(),False);os.close(f)\n"
        + "    except (OSError,KeyError):w='-'\n"
        + "    if not w:\n"
        + "        t=type(sys)('vpatch_agent.kept');F().exec_module(t)\n"
        + "        t.settle(m,c,t.name_of(l.encode('latin-1')),None,lambda u,k:D(u,False),Y)\n",
    )
    .replace("import sys\n", "import sys\nC=" + repr(_KEPT_CHECKS) + "\n", 1)
)
_HEADER = '{"#n": "%010d", '  # 18 bytes: the bundle's length, first


def agent_argv(
    python: str, root: bool, trusted: str, run_as: str = "", kept: bool = False
) -> list[str]:
    """How the agent starts: as root, under the trusted interpreter (privsep's stage 0, which
    decides who works and starts the environment's interpreter as that user; `run_as`, the
    operator's --run-as, names that user); else the environment's interpreter itself, with
    the login user's power. `kept`: the loader looks for the bundle kept on the host first
    (`kept_boot`) and asks for it only on a miss."""
    if root:
        boot0 = kept_boot(BOOT0, agent_key()) if kept else BOOT0
        return [trusted, "-I", "-S", "-c", boot0, python, *([run_as] if run_as else [])]
    boot = kept_boot(BOOT, agent_key()) if kept else BOOT
    return [python, "-I", "-c", boot, *(["run-as", run_as] if run_as else [])]


# The agent's code kept on the host between runs (the SSH transports' sessions). The loader
# is sent the bundle's hash (agent_key, in its own text: the command line carries it), not
# the bundle, and looks in the login user's cache directory (`~/.cache/vpatch/agent`, the
# home from the password database, not $HOME) for `HASH.bundle`. It uses the file only when
# every directory from `/` down was opened without following a link (each the next one's
# `dir_fd`) and is root's or this user's and writable by nobody else, the last one this
# user's own and closed to everyone else (mode bits: an ACL entry that grants a write shows
# in the group bits), the file itself opened on that descriptor with O_NOFOLLOW and, checked
# on the descriptor, this user's regular file with one link, writable by nobody else, and
# its bytes, read once, hash to the key: what runs is exactly the bytes the controller would
# have sent. As root that is stage 0 (the trusted interpreter) in root's own home, so the
# environment's owner can plant nothing root runs: a planted or changed file is not used.
# Anything else is a miss: the loader writes one line, `{"#miss": "why"}`, before any
# answer, and reads stdin until the bundle's line (lines before it are requests the
# controller sent before it heard of the miss: it sends them again after the bundle) and goes
# on as BOOT; once its importer is in place, patcher/agent/kept.py (from the bundle, with the
# loader's own checks) keeps the bundle, only one whose hash is the key, and, for an
# interpreter whose magic the bundle has no code objects for, the code objects it compiles
# once. Stage 0 reads by the bundle's length as before, in reads no longer than the shortest
# bundle, so it never takes a byte past it: the worker reads the requests from the same stdin.
MISS = b'{"#miss": '  # the agent's first line when it has no usable kept bundle
_KEPT_HEAD = r"""import os
KEY=@KEY@;H=b'{"#n": "';W=None
def V(x):
    try:
        from _blake2 import blake2b
    except ImportError:
        from hashlib import blake2b
    return blake2b(x,digest_size=32).hexdigest()==KEY
"""
_KEPT_G = r"""def G():
    global W
    try:
        x,w=Y(os.geteuid(),KEY+'.bundle')
        if x is not None and not V(x):x=None;w='the kept bundle is not the one asked for'
    except (OSError,KeyError) as e:
        x=None;w='kept bundle: %s'%getattr(e,'strerror',e)
        if isinstance(e,FileNotFoundError):w='no kept bundle'
    if x is None:
        w=''.join(c for c in w if c.isalnum() or c in ' ./_-:')
        os.write(1,b'{"#miss": "'+w.encode()+b'"}\n');x=W=R()
    return x.decode('latin-1')
"""
# After a miss: the plain loader reads whole lines (its own buffered stdin, which the agent
# goes on reading); stage 0 reads at most 4 KiB at a time until it has the bundle's header,
# then exactly the rest by its length (a bundle is far longer than one such read).
_KEPT_READ = r"""def R():
    while 1:
        x=sys.stdin.buffer.readline()
        if not x:os._exit(0)
        if x.startswith(H):return x
"""
_KEPT_READ0 = r"""def R():
    b=b'';m=0
    while 1:
        if m:
            e=b.find(b'\n')
            if e<0:b=b''
            else:b=b[e+1:];m=0;continue
        elif len(b)>=18:
            if b[:8]==H:break
            m=1;continue
        elif b[:8]!=H[:len(b)]:
            m=1;continue
        x=os.read(0,4096)
        if not x:os._exit(0)
        b+=x
    return b+r(int(b[8:18])-len(b))
"""
# Once the importer is in place: after a miss, or where the bundle has no code objects for
# this interpreter's magic, the rest is patcher/agent/kept.py, run as a bare module from the
# bundle (not through the package: its code objects may not be there yet) with the loader's
# own checks.
_KEPT_AFTER = (
    "if W is not None or c+'vpatch_agent' not in m:\n"
    "    t=type(sys)('vpatch_agent.kept');F().exec_module(t);t.settle(m,c,KEY,W,D,Y)\n"
)
_READ0 = "h=r(18);l=(h+r(int(h[8:18])-18)).decode('latin-1')\n"


def kept_boot(boot: str, key: str) -> str:
    """BOOT or BOOT0 that loads the bundle kept on the host under `key` (agent_key), and
    asks for it only on a miss (the comment above)."""
    read = _KEPT_READ0 if boot is BOOT0 else _KEPT_READ
    lookup = _KEPT_HEAD.replace("@KEY@", repr(key)) + _KEPT_CHECKS + _KEPT_G + read
    if boot is BOOT0:
        boot = boot.replace(_READ0, lookup + "l=G()\n")
    else:
        boot = boot.replace(_READLINE, lookup + "l=G()\n")
    return boot.replace(_IMPORTER, _IMPORTER + _KEPT_AFTER)


def miss_reason(line: bytes) -> str:
    """Why the host had no usable kept bundle: its agent's miss line (`{"#miss": "why"}`)."""
    return line[len(MISS) :].strip(b' "}').decode("ascii", "replace")


@cache
def agent_key() -> str:
    """The bundle's BLAKE2b-256 digest: the name it is kept under on a host, and what its
    bytes are checked against there (BLAKE2b, not SHA-256: the interpreter's own C module
    hashes the ~300 KB in ~0.4 ms where its SHA-256 takes ~1 ms, on every agent start)."""
    from patcher.transports.fasthash import blake2b_hex

    return blake2b_hex([agent_bundle()])


# The bundle's layout, part of the kept file's key: a loader that reads another layout never
# meets a bundle kept for this one.
_LAYOUT = "zlib6-source+slimcode"
_KEPT = "vpatch-bundle"


@cache
def agent_bundle(code: bool = True) -> bytes:
    """First stdin line for BOOT: every agent module keyed by its import name, its source and
    (`code`) under `#MAGIC:name` its marshalled code object (_code), each zlib-compressed and
    base64-encoded.

    BOOT uses the code objects only on an interpreter whose bytecode magic number is this
    one's: the number CPython itself checks before trusting a .pyc, and the one that changes
    whenever the marshal format or the bytecode does. Any other interpreter compiles the
    source.

    Built once per agent source and kept next to the agent's .pyc files (`_kept`): building it
    (a child's slim compile, marshal, zlib, base64, JSON) is ~0.2 s, on the path of the run
    before its first host gets the bundle; reading it back is ~1 ms. Where it cannot be kept,
    the code objects are the .pyc bodies (~20 ms a build)."""
    try:  # the import system's own module: importlib.util costs ms more to import
        from _frozen_importlib_external import MAGIC_NUMBER
    except ImportError:  # pragma: no cover - CPython has it
        from importlib.util import MAGIC_NUMBER

    root = Path(__file__).parent.parent / "agent"
    sources = {
        ("vpatch_agent" if f.stem == "__init__" else f"vpatch_agent.{f.stem}"): f
        for f in sorted(root.glob("*.py"))
    }
    texts = {name: f.read_bytes() for name, f in sources.items()}
    if not code:
        return _build(texts, {})
    from patcher.transports.fasthash import blake2b_hex

    head = f"{_LAYOUT}\0{MAGIC_NUMBER.hex()}\0{CHILD_BOOT}\0".encode()
    parts = (b"%s\0%d\0%s" % (name.encode(), len(text), text) for name, text in texts.items())
    digest = blake2b_hex([head, *parts], digest_size=16)
    kept = root / "__pycache__" / f"{_KEPT}.{MAGIC_NUMBER.hex()}.{digest}.line"
    found = _read_kept(kept, root)
    if found is not None:
        return found
    key = f"#{MAGIC_NUMBER.hex()}:"
    slim = _slim_codes(texts) if _keepable(kept.parent) else None
    codes = slim or {name: _code(f, name) for name, f in sources.items()}
    built = _build(texts, {key + name: code for name, code in codes.items()})
    _keep(kept, built)
    return built


# Compiles the agent's modules as BOOT would compile their source (no inherited future flags,
# asserts kept) without what no host reads: docstrings (the agent never looks at a `__doc__`;
# a body that was only one becomes `pass`, on the same line) and, under `-X no_debug_ranges`,
# the column positions of every instruction (a traceback from the host still names the module
# and the line). Sources as JSON on stdin; marshal of {name: marshalled code} on stdout.
_SLIM = """\
import ast,json,marshal,sys
D=(ast.Module,ast.ClassDef,ast.FunctionDef,ast.AsyncFunctionDef)
def doc(b):
    return b and isinstance(b[0],ast.Expr) and isinstance(b[0].value,ast.Constant) \\
        and isinstance(b[0].value.value,str)
def slim(t):
    for n in ast.walk(t):
        if isinstance(n,D) and doc(n.body):
            n.body=n.body[1:] or [ast.copy_location(ast.Pass(),n.body[0])]
    return t
def code(k,v):
    return marshal.dumps(compile(slim(ast.parse(v)),'<'+k+'>','exec',dont_inherit=True))
m=json.loads(sys.stdin.buffer.read())
sys.stdout.buffer.write(marshal.dumps({k:code(k,v) for k,v in m.items()}))
"""


def _keepable(where: Path) -> bool:
    """Whether a bundle built now is kept for the next runs (this user may write beside the
    agent's .pyc files, `__pycache__` made here where it is missing, as py_compile would
    make it: under PYTHONDONTWRITEBYTECODE nothing else does): only then is the slimmer
    compile worth its one interpreter start."""
    try:
        where.mkdir(exist_ok=True)
    except OSError:
        return False
    return where.is_dir() and os.access(where, os.W_OK)


def _slim_codes(texts: dict[str, bytes]) -> dict[str, bytes] | None:
    """Every module's code object without docstrings and column positions, compiled by this
    very interpreter in a child started with `-X no_debug_ranges` (a flag read only at an
    interpreter's start): ~40 % fewer compressed bytes for every host's sshd to decrypt and every
    agent to read, once per agent source. None where that child fails: the .pyc bodies then."""
    import json
    import marshal
    import subprocess
    import sys

    flags = ["-X", "no_debug_ranges"] if sys.version_info >= (3, 11) else []
    sources = json.dumps({name: text.decode("utf-8") for name, text in texts.items()})
    try:
        res = subprocess.run(
            [sys.executable, "-I", "-S", *flags, "-c", _SLIM],
            input=sources.encode(),
            capture_output=True,
            timeout=120,
            # patcher/isolate.py's rules, written out (a transport imports no executor): `/` as
            # the cwd, no PYTHON* variable
            cwd="/",
            env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
            check=False,
        )
        got = marshal.loads(res.stdout) if res.returncode == 0 else None
    except (OSError, ValueError, EOFError, TypeError, subprocess.SubprocessError):
        return None
    if not isinstance(got, dict) or set(got) != set(texts):
        return None
    return got if all(isinstance(v, bytes) for v in got.values()) else None


def _build(texts: dict[str, bytes], codes: dict[str, bytes]) -> bytes:
    import binascii  # (not base64: its import is a ~1 ms of the run's start it need not pay)
    import zlib

    def packed(data: bytes) -> str:
        return binascii.b2a_base64(zlib.compress(data, 6), newline=False).decode()

    mods = {name: packed(text) for name, text in texts.items()}
    mods |= {name: packed(code) for name, code in codes.items()}
    import json

    body = json.dumps({"#child": CHILD_BOOT} | mods)
    size = len(_HEADER % 0) + len(body)  # the header replaces body's "{", the newline ends it
    return (_HEADER % size + body[1:]).encode() + b"\n"


def _read_kept(path: Path, root: Path) -> bytes | None:
    """The kept bundle (ownedfile.read_owned: on the descriptor, one link, writable by nobody
    else), owned by whoever owns the agent's source and whole by its own length header; None
    for anything else. It is code every host runs: no more trusted than the .pyc files beside
    it, which this very interpreter runs."""
    from patcher.transports.ownedfile import read_owned

    try:
        owner = os.stat(root).st_uid
    except OSError:
        return None
    data = read_owned(path, 64 << 20, owner)
    if data is None or len(data) < 18:
        return None
    head = (_HEADER % len(data)).encode()
    return data if data.startswith(head) and data.endswith(b"}\n") else None


def _keep(path: Path, data: bytes) -> None:
    """Keep the bundle for the next runs (a temp file renamed over it, the older bundles
    removed); where the package is read-only, or anything fails, the next run builds it again."""
    if not path.parent.is_dir():
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
        try:
            os.write(fd, data)  # (a regular file takes it in one write)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        for old in path.parent.glob(path.name.rsplit(".", 2)[0] + ".*.line"):  # this magic's
            if old.name != path.name:
                old.unlink(missing_ok=True)
    except OSError:
        tmp.unlink(missing_ok=True)


def _code(path: Path, name: str) -> bytes:
    """The module's marshalled code object: the body of its `__pycache__` .pyc when that is
    current by the import system's own test (timestamp-based, this interpreter's magic, the
    source's mtime and size), else compiled once more and the .pyc rewritten (py_compile,
    atomic; skipped where the package is read-only). Compiled as BOOT would compile the
    source: no inherited future flags, asserts kept (the host runs without -O). Reading it
    back costs ~1 ms where compiling every module costs ~20 ms on every run."""
    import marshal
    from importlib.util import MAGIC_NUMBER, cache_from_source

    pyc = Path(cache_from_source(str(path), optimization=""))
    for attempt in range(2):
        try:
            st, data = path.stat(), pyc.read_bytes()
        except OSError:
            data = b""
        header = (
            MAGIC_NUMBER + bytes(4) + _u32(int(st.st_mtime)) + _u32(st.st_size) if data else b""
        )
        if data and data[:16] == header:
            return data[16:]
        if attempt == 0:
            import py_compile  # (only for a stale .pyc: it imports traceback and tokenize)

            try:
                py_compile.compile(
                    str(path),
                    cfile=str(pyc),
                    dfile=f"<{name}>",
                    doraise=True,
                    optimize=0,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )
            except (OSError, py_compile.PyCompileError):
                break
    obj = compile(path.read_text(), f"<{name}>", "exec", dont_inherit=True, optimize=0)
    return marshal.dumps(obj)


def _u32(n: int) -> bytes:
    return (n & 0xFFFFFFFF).to_bytes(4, "little")


# The interpreter privsep's stage 0 runs under as root (--trusted-python): the host's own,
# root-owned python3, checked by stage 0 before it looks at anything else.
TRUSTED_PYTHON = "/usr/bin/python3"


def request_line(request: dict[str, Any]) -> bytes:
    """One request of a session: compact JSON never contains a raw newline."""
    import json  # (here, not at the top: a session starts before any request is made)

    return json.dumps(request).encode() + b"\n"


def decode_answer(target: str, stdout: bytes, stderr: bytes, status: int) -> dict[str, Any]:
    """The agent's JSON answer, or an AgentError that says what went wrong on the host. One
    answer past base.MAX_ANSWER_BYTES is refused before it is decoded (a transport that hands
    over its whole stdout, Ray's, never streamed it through read_answer's cap)."""
    from patcher.transports.base import MAX_ANSWER_BYTES, too_big

    if len(stdout) > MAX_ANSWER_BYTES:
        raise too_big(target)
    try:
        import json

        res = json.loads(stdout.decode("utf-8", "replace"))
    except ValueError:
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {status}"]
        raise AgentError(
            f"{target}: agent gave no answer ({tail[0][:300]})",
            "check that the target's python is 3.9+ and can run `python -I -c pass`",
        ) from None
    if not isinstance(res, dict):
        raise AgentError(f"{target}: agent answer is not an object", "report this as a bug")
    return res
