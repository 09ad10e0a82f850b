"""What the agent does instead of importing json, py_compile and the rest gives the same bytes,
on every Python the agent supports, and its common path really imports none of them."""

from __future__ import annotations

import binascii
import json
import marshal
import os
import py_compile
import subprocess
import sys
import zipfile
import zlib
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any

import pytest

from patcher.agent import fsops, locate
from patcher.agent.protocol import stable
from patcher.transports import bundle
from patcher.transports.bundle import BOOT, _code, agent_bundle, request_line
from tests import pythons, standin

AGENT = Path(__file__).resolve().parents[2] / "patcher" / "agent"
VERSIONS = ("3.9", "3.10", "3.11", "3.12", "3.13")

# Run in a fresh `python -I -S` (json NOT imported first: before 3.12 the C scanner reports an
# error only through an already-imported json.decoder). Prints "ok" or raises.
_COMPARE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import wire
assert "json" not in sys.modules
docs = [
    {"a": 1, "b": [1.5, None, True, False, "\u00e9\u2028\n\"x\\"], "z": {"k": 1e300}},
    [], "str", 3, -0.0, {"b": 1, "a": {"d": 2, "c": 3}}, {"t": "\U0001f600" * 3},
]
texts = []
for d in docs:
    texts.append(wire.dumps(d))
    texts.append(wire.dumps(d, sort_keys=True))
got = [repr(wire.loads(t)) for t in texts] + [repr(wire.loads("  " + texts[0] + "\n"))]
loaded = []
for bad in ["", "{", "{} x", "[1,]", "\ufeff{}", '{"a": nan}', "[1] [2]", "{'a': 1}"]:
    try:
        wire.loads(bad)
        loaded.append("no error for %r" % bad)
    except ValueError as exc:
        loaded.append("%s: %s" % (type(exc).__name__, exc))
import json
for d, t in zip([x for d in docs for x in (d, d)], texts):
    assert t in (json.dumps(d), json.dumps(d, sort_keys=True)), (d, t)
assert got == [repr(json.loads(t)) for t in texts] + [repr(json.loads(texts[0]))]
want = []
for bad in ["", "{", "{} x", "[1,]", "\ufeff{}", '{"a": nan}', "[1] [2]", "{'a': 1}"]:
    try:
        json.loads(bad)
    except ValueError as exc:
        want.append("%s: %s" % (type(exc).__name__, exc))
assert loaded == want, (loaded, want)
print("ok")
"""


@pytest.mark.parametrize("version", VERSIONS)
def test_wire_is_json_on_every_supported_python(version: str) -> None:
    python = pythons.find(version)
    res = subprocess.run(
        [python, "-I", "-S", "-B", "-c", _COMPARE, str(AGENT)], capture_output=True, text=True
    )
    assert res.stdout.strip() == "ok", res.stdout + res.stderr


@pytest.mark.parametrize("epoch", ["", "1700000000"])
@pytest.mark.parametrize("checked", ["", "same", "other"])
def test_bytecode_is_py_compiles_byte_for_byte(
    epoch: str, checked: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also when compile_check compiled the bytes first (its code object is reused), or other
    bytes for that path (they are not)."""
    src = tmp_path / "mod.py"
    src.write_text("X = 1\n\ndef f(a):\n    assert a\n    return a + X\n")
    if checked:
        data = src.read_bytes() if checked == "same" else b"X = 2\n"
        assert fsops.compile_check(data, str(src)) is None
    if epoch:
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    else:
        monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    ours = tmp_path / "ours.pyc"
    fsops.write_bytecode(str(src), str(ours))
    theirs = py_compile.compile(
        str(src),
        cfile=str(tmp_path / "theirs.pyc"),
        doraise=True,
        invalidation_mode=py_compile._get_default_invalidation_mode(),
    )
    assert ours.read_bytes() == Path(theirs).read_bytes()
    assert fsops.cache_from_source(str(src)) == py_compile.importlib.util.cache_from_source(  # type: ignore[attr-defined]
        str(src)
    )


def test_bytecode_refused_on_a_link(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text("X = 1\n")
    (tmp_path / "elsewhere").write_bytes(b"")
    link = tmp_path / "link.pyc"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        fsops.write_bytecode(str(src), str(link))


@pytest.mark.parametrize(
    ("name", "want"),
    [("Foo.Bar", "foo_bar"), ("a--b__c..d", "a_b_c_d"), ("x-_.-y", "x_y"), ("___", "_")],
)
def test_normalize_is_pep503(name: str, want: str) -> None:
    import re

    assert locate._normalize(name) == want == re.sub(r"[-_.]+", "_", name).lower()


def test_record_rows_as_csv_reads_them() -> None:
    import csv

    text = "a/b.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n\n a,,\nc/d.py,,\n"
    rows = [r for r in csv.reader(text.splitlines()) if r]
    assert locate._parse_record(text) == {
        r[0]: locate._hex(r[1]) if len(r) > 1 else None for r in rows
    }
    quoted = '"x,y.py",sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n'
    assert list(locate._parse_record(quoted)) == ["x,y.py"]


# The agent's static apply on a stand-in env, in-process under BOOT's own loader; then which of
# the modules its common path must not need got imported anyway.
_HEAVY = [
    "json", "re", "typing", "enum", "hashlib", "py_compile", "importlib.util", "getpass",
    "signal", "csv", "base64", "importlib.metadata", "email", "subprocess", "tempfile",
    "collections", "functools",
]  # fmt: skip
# The agent's own modules a static apply on a host without a rollout lease, where stage 0 did
# not start the worker, does not need (each is host CPU at every start: its decode and body).
_SPARED = ["vpatch_agent.lease", "vpatch_agent.leasing", "vpatch_agent.privsep"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_static_apply_imports_none_of_the_heavy_modules(version: str, tmp_path: Path) -> None:
    """On each supported Python (the controller's own: from its code objects; the others: from
    source), an inspect and a commit through BOOT work, write py_compile's .pyc, and import
    none of `_HEAVY` that the interpreter had not loaded at its start, nor the agent's
    modules of `_SPARED`."""
    venv = tmp_path / "venv"
    subprocess.run(
        [pythons.find(version), "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    py = venv / "bin" / "python"
    site = next((venv / "lib").glob("python3*/site-packages"))
    # Unpacked as pip would (pip itself no longer runs for 3.9): files, dist-info, RECORD.
    with zipfile.ZipFile(standin.build_wheel(tmp_path)) as whl:
        whl.extractall(site)
    target = site / "servekit" / "config.py"
    text = target.read_text()
    sha = fsops.sha256_bytes(text.encode())
    inspect = {"op": "inspect", "packages": {"servekit": ["servekit/config.py"]}, "state_dir": None}
    commit = {
        "op": "commit",
        "writes": [{"path": str(target), "expect_sha256": sha, "text": text + "\nY = 2\n"}],
        "journal": [],
        "state_dir": None,
    }
    loader = "import sys\nBEFORE = set(sys.modules)\n" + BOOT.replace("vpatch_agent.main()\n", "")
    check = (
        "for line in sys.stdin:\n"
        "    res = vpatch_agent.answer(line)\n"
        "    assert res['ok'], res\n"
        "    assert res['packages' if 'packages' in res else 'written']\n"
        "new = [m for m in sys.modules if m not in BEFORE]\n"
        f"print(vpatch_agent.wire.dumps([m for m in {_HEAVY + _SPARED!r} if m in new]))\n"
    )
    res = subprocess.run(
        [str(py), "-I", "-c", loader + check],
        input=agent_bundle() + request_line(inspect) + request_line(commit),
        capture_output=True,
    )
    assert res.returncode == 0, res.stderr.decode()
    assert json.loads(res.stdout) == []
    assert target.read_text().endswith("Y = 2\n")
    pyc = subprocess.run(
        [
            str(py),
            "-I",
            "-c",
            "import importlib.util as u, sys; print(u.cache_from_source(sys.argv[1]))",
            str(target),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = Path(pyc).read_bytes()
    subprocess.run([str(py), "-I", "-m", "py_compile", str(target)], check=True)
    theirs = Path(pyc).read_bytes()
    # The same header and code; before 3.11 marshal's reference flags follow the objects'
    # reference counts in the writing process, so the bytes themselves may differ (as two
    # py_compile runs' may).
    same = (
        "import marshal, sys; a, b = (open(p, 'rb').read() for p in sys.argv[1:]);"
        "print(a[:16] == b[:16] and marshal.loads(a[16:]) == marshal.loads(b[16:]))"
    )
    Path(pyc + ".ours").write_bytes(ours)
    got = subprocess.run(
        [str(py), "-I", "-c", same, pyc + ".ours", pyc], capture_output=True, text=True
    )
    assert got.stdout.strip() == "True", (got.stdout, got.stderr, theirs[:16])


def _session(python: str, bundle: bytes, state: Path) -> dict[str, object]:
    req = {"op": "inspect", "packages": {"pip": ["pip/__init__.py"]}, "state_dir": str(state)}
    res = subprocess.run(
        [python, "-I", "-c", BOOT], input=bundle + request_line(req), capture_output=True
    )
    assert res.returncode == 0, res.stderr.decode()
    answer: dict[str, object] = json.loads(res.stdout)
    assert answer["ok"], answer
    return answer


def _packed(data: bytes) -> str:
    return binascii.b2a_base64(zlib.compress(data), newline=False).decode()


def _unpacked(value: str) -> bytes:
    return zlib.decompress(binascii.a2b_base64(value))


def test_bundle_code_is_used_only_with_its_magic(tmp_path: Path) -> None:
    """Same interpreter: the code objects are used (the source is never compiled: broken
    here, it would fail); another bytecode magic: only the source counts. Every module's
    source is the agent's file, byte for byte, once decompressed."""
    mods = json.loads(agent_bundle())
    code = {k: v for k, v in mods.items() if k.startswith("#") and ":" in k}
    source = {k: v for k, v in mods.items() if not k.startswith("#")}
    assert len(code) == len(source) and all(k.split(":")[1] in source for k in code)
    agent_dir = Path(bundle.__file__).parent.parent / "agent"
    assert _unpacked(source["vpatch_agent.wire"]) == (agent_dir / "wire.py").read_bytes()
    assert _unpacked(source["vpatch_agent"]) == (agent_dir / "__init__.py").read_bytes()
    broken = {**{k: _packed(b"raise SystemExit(3)") for k in source}, **code}
    state = tmp_path / "state"  # one state dir (inspect writes none): the answers may be equal
    _session(sys.executable, json.dumps(broken).encode() + b"\n", state)
    # Another magic's code, with the source intact: compiled from source.
    other = {**source, **{"#00000000:" + k.split(":")[1]: v for k, v in code.items()}}
    plain = _session(sys.executable, json.dumps(other).encode() + b"\n", state)
    same = _session(sys.executable, agent_bundle(), state)
    # Whole answers, through the protocol's own volatility list (free disk bytes and pids move
    # between two runs on a busy machine); and the list leaves the facts in.
    assert stable(plain) == stable(same)
    assert stable(plain)["packages"]["pip"]["files"]["pip/__init__.py"]["sha256"]
    bare = json.loads(agent_bundle(code=False))
    assert {k: v for k, v in bare.items() if not k.startswith("#")} == source
    assert set(bare) - set(source) == {"#n", "#child"}  # its length, the worker's loader
    assert int(bare["#n"]) == len(agent_bundle(code=False))


def test_the_bundle_is_kept_and_a_kept_file_is_checked(tmp_path: Path) -> None:
    """The bundle is built once per agent source and kept beside the agent's .pyc files; a
    kept file is used only when it is a whole regular file of the agent's owner, with one link
    and writable by nobody else: anything else is built again, never sent to a host."""
    fresh = bundle.agent_bundle.__wrapped__()
    assert fresh == agent_bundle()
    agent_dir = Path(bundle.__file__).parent.parent / "agent"
    kept = sorted((agent_dir / "__pycache__").glob(f"vpatch-bundle.{MAGIC_NUMBER.hex()}.*.line"))
    assert len(kept) == 1 and kept[0].read_bytes() == fresh
    root = tmp_path / "agent"
    root.mkdir()
    good = root / "b.line"
    good.write_bytes(fresh)
    good.chmod(0o644)
    assert bundle._read_kept(good, root) == fresh
    cases = {
        "truncated": lambda p: p.write_bytes(fresh[:-100]),
        "longer": lambda p: p.write_bytes(fresh + b"x"),
        "group-writable": lambda p: p.chmod(0o664),
        "a symlink": lambda p: (p.unlink(), p.symlink_to(good)),
        "a second link": lambda p: (p.unlink(), os.link(good, p)),
        "another owner's": lambda p: os.chown(p, 65534, 65534),
    }
    for why, spoil in cases.items():
        bad = root / f"{why}.line"
        bad.write_bytes(fresh)
        bad.chmod(0o644)
        spoil(bad)
        assert bundle._read_kept(bad, root) is None, why
        (root / f"{why}.line").unlink()


def test_boot_without_the_c_scanner_or_the_frozen_import_modules(tmp_path: Path) -> None:
    """BOOT's fallbacks (json; importlib.machinery and importlib.util) load the same agent."""
    boot = BOOT.replace("from _json import", "from _no_json import").replace(
        "import _frozen_importlib as B,_frozen_importlib_external as E",
        "import _no_frozen_importlib as B",
    )
    assert boot.count("_no_") == 2
    req = {"op": "inspect", "packages": {"pip": ["pip/__init__.py"]}, "state_dir": str(tmp_path)}
    answers = []
    for loader in (BOOT, boot):
        res = subprocess.run(
            [sys.executable, "-I", "-c", loader],
            input=agent_bundle() + request_line(req),
            capture_output=True,
        )
        assert res.returncode == 0, res.stderr.decode()
        answers.append(json.loads(res.stdout))
    assert answers[0]["ok"] and stable(answers[0]) == stable(answers[1])


def _module(tmp_path: Path, text: str) -> Path:
    src = tmp_path / "pkg" / "mod.py"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(text)
    return src


def test_a_kept_bundle_carries_slim_code_that_behaves_as_the_source(tmp_path: Path) -> None:
    """Where the bundle is kept, its code objects are compiled without docstrings (a body that
    was only one runs as `pass`) and, from 3.11, without column positions; asserts, line
    numbers and every other constant stay. The agent's own kept bundle is such a build; one that
    cannot be kept (the agent's directory read-only to this user) takes the .pyc bodies."""
    text = (
        '"""module doc"""\n'
        "X = 0\n"
        "def f():\n"
        '    """only a doc"""\n'
        "class C:\n"
        '    """class doc"""\n'
        "    y = 'kept'\n"
        "def g():\n"
        "    assert X, 'asserts stay'\n"
    )
    slim = bundle._slim_codes({"vpatch_agent.mod": text.encode()})
    assert slim is not None
    code = marshal.loads(slim["vpatch_agent.mod"])
    assert code.co_filename == "<vpatch_agent.mod>"
    ns: dict[str, Any] = {}
    exec(code, ns)
    f, c, g = ns["f"], ns["C"], ns["g"]
    assert ns.get("__doc__") is None and f.__doc__ is None and c.__doc__ is None
    assert f() is None and c.y == "kept"
    with pytest.raises(AssertionError, match="asserts stay"):
        g()
    assert 9 in {line for _, _, line in g.__code__.co_lines()}  # the assert's own line
    if sys.version_info >= (3, 11):
        assert {p[2] for p in g.__code__.co_positions()} == {None}
    plain = compile(text, "<vpatch_agent.mod>", "exec", dont_inherit=True)
    assert len(marshal.dumps(code)) < len(marshal.dumps(plain))
    # The agent's own: the kept bundle has no module docstring among its constants.
    mods = json.loads(agent_bundle())
    key = f"#{MAGIC_NUMBER.hex()}:vpatch_agent.wire"
    wire_code = marshal.loads(_unpacked(mods[key]))
    source = (Path(bundle.__file__).parent.parent / "agent" / "wire.py").read_text()
    assert compile(source, "x", "exec").co_consts[0] not in wire_code.co_consts
    assert not bundle._keepable(tmp_path / "no" / "such")  # nowhere to make it
    if os.geteuid() != 0:  # (root may write anywhere: os.access says so)
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        assert not bundle._keepable(ro)


def test_bundle_code_comes_from_a_current_pyc_only(tmp_path: Path) -> None:
    """transport._code: what it returns is what compiling the source gives (named as BOOT
    names it), from the .pyc it wrote; a source changed since, or a .pyc it cannot write, is
    compiled afresh, never served stale."""
    src = _module(tmp_path, "X = 1\nassert X\n")
    want = compile(src.read_text(), "<vpatch_agent.mod>", "exec", dont_inherit=True, optimize=0)
    got = marshal.loads(_code(src, "vpatch_agent.mod"))
    assert got == want and got.co_filename == "<vpatch_agent.mod>"
    pyc = next((src.parent / "__pycache__").glob("mod.*.pyc"))
    assert pyc.read_bytes()[16:] == _code(src, "vpatch_agent.mod")  # served from the .pyc
    src.write_text("X = 22\n")  # another size: the .pyc no longer matches
    assert marshal.loads(_code(src, "vpatch_agent.mod")).co_consts[0] == 22
    pyc.write_bytes(pyc.read_bytes()[:16] + marshal.dumps(compile("X = 3", "x", "exec")))
    src.write_text("X = 4\n")  # same size; mtime moved on
    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 5 * 10**9))
    assert marshal.loads(_code(src, "vpatch_agent.mod")).co_consts[0] == 4
    # Nowhere to write a .pyc: compiled in memory, every time.
    ro = _module(tmp_path / "ro", "Y = 5\n")
    (ro.parent / "__pycache__").write_text("not a directory")
    assert marshal.loads(_code(ro, "vpatch_agent.mod")).co_consts[0] == 5


def test_record_digests_decoded_at_once_as_one_by_one() -> None:
    """_parse_record's one decode of every usual digest gives each row's own decode, in the
    rows' order; rows it cannot take so (a path twice, a character outside the alphabet, a
    digest of another length or kind) leave the whole RECORD to the row-by-row loop."""
    import hashlib

    from patcher.agent.fsops import sha256_bytes

    def b64(data: bytes) -> str:
        import base64

        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    rows = [f"pkg/m{i}.py,sha256={b64(bytes([i]))},{i}" for i in range(200)]
    odd = ["pkg/a.py,,", "pkg/b.py,md5=abc,1", "pkg/c.py,sha256=" + b64(b"c")[:-1] + ",1"]
    text = "\n".join(rows[:50] + odd + rows[50:]) + "\n"
    got = locate._parse_record(text)
    assert list(got) == [r.split(",")[0] for r in rows[:50] + odd + rows[50:]]
    assert got["pkg/m7.py"] == sha256_bytes(bytes([7])) and got["pkg/a.py"] is None
    want = {r.split(",")[0]: locate._hex(r.split(",")[1]) for r in rows[:50] + odd + rows[50:]}
    assert got == want
    again = [*rows, rows[3].split(",")[0] + ",,"]  # the same path again: the last row counts
    once = locate._parse_record("\n".join(again))
    by_row = {r.split(",")[0]: locate._hex(r.split(",")[1]) for r in again}
    assert once == by_row and list(once) == list(by_row) and once["pkg/m3.py"] is None
    # 43 characters, one outside the alphabet: refused as the row-by-row decode refuses it
    bad = "pkg/bad.py,sha256=*" + b64(b"x")[1:] + ",1"
    assert len(bad.split(",")[1]) == 50
    with pytest.raises(ValueError):
        locate._hex(bad.split(",")[1])
    with pytest.raises(ValueError):
        locate._parse_record("\n".join([*rows, bad]))


def test_the_agent_process_collects_garbage_less_often_its_caller_as_it_was() -> None:
    """main() raises the first collector threshold in the agent process (BOOT's
    `vpatch_agent`), leaving the others as they were; imported in-process (`patcher.agent`,
    the local transport's caller), the collector stays the caller's."""
    import gc

    from patcher import agent

    before = gc.get_threshold()
    agent._collect_less()
    assert gc.get_threshold() == before
    tail = "import vpatch_agent\nvpatch_agent.main()\n"
    assert BOOT.endswith(tail)
    # each answer says the threshold main() left (main calls `answer` by its module name)
    told = (
        "import gc\nT = list(gc.get_threshold())\nimport vpatch_agent\nA = vpatch_agent.answer\n"
        "vpatch_agent.answer = lambda line: dict(A(line), gc=[T, list(gc.get_threshold())])\n"
    )
    res = subprocess.run(
        [sys.executable, "-I", "-c", BOOT[: -len(tail)] + told + tail],
        input=agent_bundle() + request_line({"op": "nothing"}),
        capture_output=True,
    )
    assert res.returncode == 0, res.stderr.decode()
    start, now = json.loads(res.stdout)["gc"]
    assert now == [agent.GC_THRESHOLD, *start[1:]] and start[0] < agent.GC_THRESHOLD
