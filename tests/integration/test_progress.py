"""What a person sees while vpatch works (patcher/output/progress.py), in a real terminal and piped:
a one-host apply whose probe takes seconds shows a live line within 1 s in tmux and erases it
before the result; piped, no live line and no escape codes; -q and -v change what stderr says
and nothing else (errors still print under -q; --json is the same document)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.conftest import REPO, Env, vpatch
from tests.support import tmuxcap
from tests.support.specs import probe
from tests.support.standin_specs import KIMI, SPEC_A, spec_a

# A probe that takes a while, as vLLM's import does: the live line has time to be seen.
SLOW = spec_a(
    probes=[
        KIMI,
        probe(
            "takes two seconds",
            "servekit.config",
            "import time\n"
            "from types import SimpleNamespace as NS\n"
            "time.sleep(2)\n"
            'assert module.SpecConfig.verify(NS(model_type="kimi_k2")) is True\n',
        ),
    ]
)
# The live line: words, then rich's elapsed time (0:00:01).
LIVE = re.compile(r"(apply: starting|local: [a-z].*) +\d:\d\d:\d\d\s*$", re.M)
CHECKING = re.compile(r"local: .*checking \(imports, probes\).* +\d:\d\d:\d\d\s*$", re.M)


def untimed(text: str) -> str:
    """A human rendering without its timings (a host's seconds)."""
    return re.sub(r"\d+\.\d+s\b", "<t>", text)


def test_one_host_apply_shows_progress_within_a_second(tmp_path: Path, standin_env: Env) -> None:
    spec = tmp_path / "slow.toml"
    spec.write_text(SLOW)
    argv = [sys.executable, "-m", "patcher.cli", "apply", str(spec)]
    pane = tmuxcap.start([*argv, "--python", str(standin_env.python)], tmp_path, REPO)
    try:
        first = pane.watch(lambda s: LIVE.search(s) is not None, limit=30)
        probes = pane.watch(lambda s: bool(CHECKING.search(s)), limit=30)
        code = pane.wait()
    finally:
        pane.close()
    screens = "\n----\n".join(f"{t:.2f}s\n{s.strip()}" for t, s in pane.screens[-5:])
    print(f"first live line at {first} s, probes line at {probes} s")
    assert code == 0, screens
    assert first is not None and first <= 1.0, f"first live line at {first} s\n{screens}"
    assert probes is not None, f"no line while the probes ran\n{screens}"
    final = pane.screens[-1][1]
    assert "apply: ok (1 host(s)) [1 applied]" in final, screens
    assert "ok   takes two seconds" in final, screens
    assert LIVE.search(final) is None, f"the live line was left on screen\n{final}"


def test_quiet_verbose_and_piped_output(tmp_path: Path, standin_env: Env) -> None:
    spec = tmp_path / "slow.toml"
    spec.write_text(SPEC_A)
    py = ["--python", str(standin_env.python)]
    applied = vpatch("apply", spec, *py)  # piped: no live line, no escape codes
    assert applied.code == 0, applied.out + applied.err
    assert "\x1b" not in applied.out + applied.err
    assert applied.err == "", applied.err
    # A journal line that is not JSON: status says so in a warning line (not an error).
    journal = standin_env.journal
    journal.write_text("garbage\n" + journal.read_text())
    normal = vpatch("status", *py)
    quiet = vpatch("status", *py, "-q")  # global options after the subcommand, or before
    verbose = vpatch("-v", "status", *py)
    for run in (normal, quiet, verbose):
        assert run.code == 0, run.out + run.err
        assert "status: ok (1 host(s)) [1 applied]" in run.out, run.out
        assert "\x1b" not in run.out + run.err
    assert "warning: journal line 1 is not JSON; ignored" in normal.out
    assert "warning:" not in quiet.out + quiet.err
    assert untimed(quiet.out) == untimed(normal.out).replace(
        "  warning: journal line 1 is not JSON; ignored\n", ""
    )
    assert quiet.err == "" and normal.err == ""
    # -v: the agent's command line (its boot code by size) and each exchange with its time
    assert re.search(r"^local: agent: \S*python\S* -I .*<\d+ bytes>", verbose.err, re.M)
    assert re.search(r"^local: inspecting: \d+\.\d\ds$", verbose.err, re.M), verbose.err
    assert untimed(verbose.out) == untimed(normal.out)
    # --json: one document whatever -q/-v say; -v's lines stay on stderr
    docs = [vpatch(*flags, "status", *py, "--json") for flags in (["-q"], ["-v"])]
    bodies = [json.loads(d.out) for d in docs]
    for body in bodies:
        for host in body["hosts"]:
            host.pop("seconds")
    assert bodies[0] == bodies[1] and bodies[0]["hosts"][0]["warnings"]
    assert docs[0].err == "" and "local: inspecting" in docs[1].err
    # errors still print under -q; -q with -v is a usage error
    missing = vpatch("-q", "apply", tmp_path / "nope.toml", *py)
    assert missing.code == 2 and missing.err.startswith("error: "), missing.err
    assert "\nhint: " in missing.err
    both = vpatch("-q", "status", *py, "-v")
    assert both.code == 2 and "contradict" in both.err
