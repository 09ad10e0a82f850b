"""The bad-input corpus (tests/cases/bad_inputs/): every mistake costs one `error:` line and one
`hint:` line, the right exit code, no traceback, and not a single byte on the host.

Why so strict: vpatch edits production serving environments, and the inputs it gets are typed
by people under pressure (a spec, a flag, an inventory) or found on hosts nobody fully knows
(a symlinked package, a read-only image, a full disk). A traceback or a half-written state dir
there is an outage; a precise line and a hint are a two-minute fix. The format of a case file is
in tests/cases/bad_inputs/README.md; this runner reads its header, prepares the environment
(SETUPS), runs the real CLI, and compares a hash of the whole test directory (environment,
symlink targets, mounts) before and after.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from patcher.specs.model import MAX_SPEC_BYTES
from tests import jsondoc, standin
from tests.conftest import REPO, vpatch
from tests.support.badinputs import (
    Ctx,
    _umount,  # noqa: F401
    tree_hash,
)

CASES_DIR = REPO / "tests" / "cases" / "bad_inputs"
CASES = sorted(CASES_DIR.glob("*.toml"))
REL = "servekit/config.py"
VALID = (CASES_DIR / "spec_twice.toml").read_text()  # header comments + the corpus' base spec


@dataclass
class Case:
    path: Path
    what: str
    error: str
    exit: int = 2
    setup: str = ""
    args: str = "apply {case} --python {python}"


def parse(path: Path) -> Case:
    """The `# key: value` header of a case file (bytes: some cases are not UTF-8 on purpose)."""
    what, fields = "", {}
    for raw in path.read_bytes().splitlines():
        if not raw.startswith(b"# "):
            break
        line = raw[2:].decode("utf-8", "replace")
        key, sep, value = line.partition(": ")
        if sep and key in ("setup", "args", "exit", "error"):
            fields[key] = value.strip()
        elif not what:
            what = line
    assert "error" in fields, f"{path.name}: no `# error:` line"
    return Case(
        path,
        what,
        fields["error"],
        int(fields.get("exit", "2")),
        fields.get("setup", ""),
        fields.get("args", Case.args),
    )


def _read_only(ctx: Ctx, where: Path) -> None:
    """A read-only bind mount: root ignores permission bits, but not EROFS."""
    ctx.mount("--bind", str(where), where=where)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(where)], check=True, capture_output=True)


def _symlink_file_out(ctx: Ctx) -> None:
    outside = ctx.tmp / "outside" / "config.py"
    outside.parent.mkdir()
    shutil.copy2(ctx.target, outside)
    ctx.target.unlink()
    ctx.target.symlink_to(outside)


def _symlink_dir_out(ctx: Ctx) -> None:
    pkg = ctx.target.parent
    outside = ctx.tmp / "outside" / "servekit"
    outside.parent.mkdir()
    shutil.move(str(pkg), str(outside))
    pkg.symlink_to(outside, target_is_directory=True)


def _disk_full(ctx: Ctx) -> None:
    """The env moves onto a 1 MiB tmpfs, which is then filled to the last byte."""
    fs = ctx.tmp / "fs"
    fs.mkdir()
    ctx.mount("-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", where=fs)
    shutil.copytree(ctx.root, fs / "venv", symlinks=True)
    shutil.rmtree(ctx.root)
    ctx.root = fs / "venv"
    ctx.vars["python"] = str(ctx.root / "bin" / "python")
    fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:  # ENOSPC: full
        pass
    finally:
        os.close(fd)
    assert shutil.disk_usage(fs).free < 4096


def _huge_spec(ctx: Ctx) -> None:
    spec = ctx.tmp / "huge.toml"
    spec.write_text(VALID + "# " + "x" * (2 * MAX_SPEC_BYTES) + "\n")
    ctx.vars["generated"] = str(spec)


def _readonly_backups(ctx: Ctx) -> None:
    backups = ctx.root / ".vpatch" / "backups"
    backups.mkdir(parents=True, mode=0o700)
    _read_only(ctx, backups)


def _foreign_file(ctx: Ctx) -> None:
    (ctx.site / "foreign.py").write_text("x = 1\n")  # in site-packages, in no one's RECORD


def _not_utf8(ctx: Ctx) -> None:
    ctx.target.write_bytes(ctx.target.read_bytes().replace(b"Stand-in", b"Caf\xe9 stand-in"))


def _syntax_error(ctx: Ctx) -> None:
    ctx.target.write_text(ctx.target.read_text() + "def (:\n")


def _hand_edited(ctx: Ctx) -> None:
    ctx.target.write_text(ctx.target.read_text() + "# local hack\n")


def _state_link(name: str) -> Callable[[Ctx], None]:
    """`.vpatch` (or an entry of it) is a symlink to somewhere else in the test dir (whose
    bytes the runner hashes): vpatch must refuse it, never follow it."""

    def setup(ctx: Ctx) -> None:
        outside = ctx.tmp / "outside"
        outside.mkdir()
        (outside / "file").write_text("not vpatch's\n")
        state = ctx.root / ".vpatch"
        if name == ".vpatch":
            state.symlink_to(outside, target_is_directory=True)
            return
        state.mkdir(mode=0o700)
        (state / name).symlink_to(outside if name == "backups" else outside / "file")

    return setup


def _huge_target(ctx: Ctx) -> None:
    with open(ctx.target, "a") as fh:
        fh.write("#" + "x" * (9 << 20) + "\n")


SETUPS: dict[str, Callable[[Ctx], None]] = {
    "": lambda ctx: None,
    "foreign-file": _foreign_file,
    "symlink-file-out": _symlink_file_out,
    "symlink-dir-out": _symlink_dir_out,
    "not-utf8": _not_utf8,
    "syntax-error": _syntax_error,
    "hand-edited": _hand_edited,
    "readonly-site": lambda ctx: _read_only(ctx, ctx.site),
    "readonly-backups": _readonly_backups,
    "disk-full": _disk_full,
    "huge-spec": _huge_spec,
    "state-dir-link": _state_link(".vpatch"),
    "state-backups-link": _state_link("backups"),
    "state-journal-link": _state_link("journal.jsonl"),
    "state-lock-link": _state_link("lock"),
    "huge-target": _huge_target,
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pip install for the whole corpus; each case gets its own copy of the venv."""
    python = standin.make_env(tmp_path_factory.mktemp("bad-inputs") / "host")
    return python.parent.parent


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 40
    assert {parse(c).setup for c in CASES} == set(SETUPS), "every setup is used, none unknown"


@pytest.mark.parametrize("path", CASES, ids=[c.stem for c in CASES])
def test_bad_input(path: Path, tmp_path: Path, template: Path) -> None:
    case = parse(path)
    work = tmp_path / "t"
    work.mkdir()
    root = work / "venv"
    shutil.copytree(template, root, symlinks=True)
    ctx = Ctx(work, root)
    shutil.copy2(path, work / "case.toml")
    (work / "spec.toml").write_text(VALID)
    ctx.vars.update(
        case=str(work / "case.toml"),
        python=str(root / "bin" / "python"),
        spec=str(work / "spec.toml"),
        tmp=str(work),
    )
    try:
        SETUPS[case.setup](ctx)
        before = tree_hash(work)
        argv = shlex.split(case.args.format(**ctx.vars))
        res = vpatch(*argv)
        as_json = vpatch(*argv, "--json") if case.exit == 2 else None
        after = tree_hash(work)
    finally:
        for undo in reversed(ctx.cleanups):
            undo()
    lines = res.err.splitlines()
    assert res.code == case.exit, res.out + res.err
    assert len(lines) == 2, res.err
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: "), res.err
    assert case.error in lines[0], res.err
    assert len(lines[1]) > len("hint: ") + 10, res.err
    assert "Traceback" not in res.out + res.err
    assert (res.out == "") == (case.exit == 2), res.out
    assert before == after, "the environment changed"
    if as_json is not None:  # the same refusal, also as one JSON document on stdout
        assert as_json.code == 2 and as_json.err == res.err, as_json.err
        doc = jsondoc.check(json.loads(as_json.out))
        assert f"error: {doc['error']}" == lines[0] and f"hint: {doc['hint']}" == lines[1]


def test_enospc_inside_the_commit_leaves_nothing(tmp_path: Path) -> None:
    """The preflight can be outrun (something fills the disk between inspect and commit). The
    agent's commit then fails on the first byte it stages, before any backup or journal line,
    and takes its temp file with it. Driven as one request to the agent of a venv that lives on
    a really full tmpfs (a commit writes only inside its env's site-packages)."""
    from patcher.plan.base import sha256_text

    fs = tmp_path / "fs"
    fs.mkdir()
    ctx = Ctx(tmp_path, tmp_path)
    ctx.mount("-t", "tmpfs", "-o", "size=256k", "tmpfs", where=fs)
    try:
        python, site = standin.bare_venv(fs / "venv")
        mod = site / "pkg" / "mod.py"
        mod.parent.mkdir()
        mod.write_text("x = 1\n")
        fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        before = tree_hash(fs, dir_mtime=False)  # a temp file made and removed moves mtimes
        state = tmp_path / "state"
        res, _ = standin.handle_in(
            python,
            {
                "op": "commit",
                "state_dir": str(state),
                "writes": [
                    {
                        "path": str(mod),
                        "expect_sha256": sha256_text("x = 1\n"),
                        "text": "x = 2\n" * 5000,
                    }
                ],
                "journal": [{"action": "apply", "path": str(mod), "spec": "s"}],
            },
            tmp_path,
        )
        after = tree_hash(fs, dir_mtime=False)
    finally:
        for undo in reversed(ctx.cleanups):
            undo()
    assert not res["ok"] and res["kind"] == "os" and "No space left" in res["error"], res
    assert before == after
    assert not (state / "journal.jsonl").exists()
    assert list((state / "backups").iterdir()) == []
