"""The journal is the record of every patched file: a write of it that stops partway must never
leave a patched file without its record.

A full disk or a file size limit makes `write()` return short WITHOUT an error (the next write
raises). Both are produced for real here: RLIMIT_FSIZE on the vpatch process (inherited by its
agent) stops the journal at a chosen byte, and a small tmpfs holds the state dir for the
space preflight. The agent is the real one, in a real venv, driven by the real CLI.
"""

from __future__ import annotations

import json
import resource
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.conftest import REPO, VPATCH, Env, Run, vpatch
from tests.support.badinputs import Ctx
from tests.support.standin_specs import REL, SPEC_A, spec_a

PAD = 400  # commit markers padding the journal: it must be the largest file vpatch writes


def limited(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def cli(*args: str | Path, preexec: Callable[[], None] | None = None) -> Run:
    proc = subprocess.run(
        [*VPATCH, *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=preexec,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def measure(tmp_path: Path, env: Env) -> tuple[Path, int, int]:
    """(spec, bytes of an apply's journal entries, bytes of its commit marker line), measured
    by one real apply + rollback; the journal is then padded past every other file's size."""
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    py = ["--python", str(env.python), "--level", "static"]
    assert vpatch("apply", spec, *py).code == 0
    lines = env.journal.read_bytes().splitlines(keepends=True)
    marker, entries = len(lines[-1]), sum(map(len, lines[:-1]))
    assert vpatch("rollback", spec, "--python", env.python).code == 0
    with open(env.journal, "a") as fh:
        for i in range(PAD):
            fh.write(json.dumps({"action": "commit", "txn": f"pad-{i:06d}"}) + "\n")
    return spec, entries, marker


def test_short_write_of_the_entries_changes_nothing(tmp_path: Path, standin_env: Env) -> None:
    """The entries' write stops 100 bytes in: it used to count as written (one os.write, its
    return value ignored), the file was renamed and the record was a torn line."""
    spec, _entries, _marker = measure(tmp_path, standin_env)
    journal = standin_env.journal.read_bytes()
    pristine = standin_env.file(REL).read_bytes()
    limit = len(journal) + 100
    py = ["--python", str(standin_env.python), "--level", "static"]
    res = cli("apply", spec, *py, preexec=limited(limit))
    assert res.code == 1 and "File too large" in res.err, res.out + res.err
    assert standin_env.file(REL).read_bytes() == pristine
    assert standin_env.journal.read_bytes() == journal  # cut back: no torn line left
    again = vpatch("apply", spec, *py)
    assert again.code == 0, again.out + again.err


def test_marker_that_cannot_be_written_puts_the_files_back(
    tmp_path: Path, standin_env: Env
) -> None:
    """Entries written, files renamed, then the commit marker stops short: the commit used to
    report success over a torn marker; now every renamed file is put back before the error."""
    spec, entries, marker = measure(tmp_path, standin_env)
    journal = standin_env.journal.read_bytes()
    pristine = standin_env.file(REL).read_bytes()
    limit = len(journal) + entries + marker // 2  # txn ids vary by a few bytes, markers ~60
    py = ["--python", str(standin_env.python), "--level", "static"]
    res = cli("apply", spec, *py, "--json", preexec=limited(limit))
    assert res.code == 1, res.out + res.err
    [patch] = res.doc["hosts"][0]["patches"]
    assert patch["outcome"] == "failed" and "put back" in patch["message"], patch
    assert standin_env.file(REL).read_bytes() == pristine
    status = vpatch("status", "--python", standin_env.python, "--json")
    assert status.code == 0 and status.doc["hosts"][0]["patches"] == [], status.out


def test_preflight_counts_the_journal_line(tmp_path: Path, standin_env: Env) -> None:
    """A spec whose edits are large makes a large journal line (the edits are in it) and a
    tiny backup: the preflight counted only the backup, so the commit ran out of space in the
    state dir after staging; now the preflight refuses with nothing written."""
    values = [f"model-{i:04d}-" + "x" * 200 for i in range(500)]
    spec = tmp_path / "big.toml"
    spec.write_text(spec_a(values=values, probes=()))
    fs = tmp_path / "fs"
    fs.mkdir()
    ctx = Ctx(tmp_path, tmp_path)
    ctx.mount("-t", "tmpfs", "-o", "size=256k", "tmpfs", where=fs)
    try:
        filler = fs / "filler"
        with open(filler, "wb") as fh:
            fh.write(b"\0" * (256 - 160) * 1024)  # 160 KiB left: the backup fits, the line not
        state = fs / "state"
        res = vpatch(
            "apply", spec, "--python", standin_env.python, "--state-dir", state, "--level", "static"
        )
        made = sorted(p.name for p in fs.iterdir())
    finally:
        for undo in reversed(ctx.cleanups):
            undo()
    assert res.code == 1, res.out + res.err
    assert "no space left for backups" in res.err and "nothing was changed" in res.err, res.err
    assert made == ["filler"], made
