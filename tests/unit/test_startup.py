"""What `vpatch apply` imports (issues 18, 41): a run whose spec and rewrites are cached, on a
local target, with --json, needs neither pydantic, libcst, rich, fabric/paramiko nor
prometheus_client, and the number of modules it loads stays under a bound. Every module is
start-up time paid before the first byte reaches a host (bench/firstbyte.py measures that
time); a heavy import moved back to the top of a module on this path fails here, not in a
benchmark nobody runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, Env, vpatch
from tests.support.standin_specs import SPEC_A

# Top-level packages an apply on a local target must not load (they are loaded, lazily, by
# the paths that need them: a spec-cache miss, a rewrite-cache miss, a person reading the
# output, an SSH target, `verify --metrics`, `vpatch check`).
NEVER = (
    "pydantic",
    "pydantic_core",
    "libcst",
    "rich",
    "fabric",
    "paramiko",
    "invoke",
    "prometheus_client",
    "jsonschema",
)
# ...and modules of the standard library only a cache miss needs (the rewrite cache's atomic
# write: tempfile), imported where they are used.
NEVER_STDLIB = ("tempfile",)
# Measured: 194 modules (Python 3.11; 276 when pydantic came with every spec, even a cached
# one). The headroom is for other Python and library versions, not for new imports.
MAX_MODULES = 240

DUMP = """\
import json, sys
sys.argv = ["vpatch", *sys.argv[2:]]
from patcher.cli import main  # what patcher.entry runs, without its os._exit
rc = main()
with open({path!r}, "w") as fh:
    json.dump(sorted(sys.modules), fh)
raise SystemExit(rc)
"""


def modules_of(args: list[str], env: dict[str, str], out: Path) -> list[str]:
    """The modules loaded by the end of a real `vpatch ARGS --json` run (a fresh interpreter)
    that applied one spec from the rewrite cache."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", DUMP.format(path=str(out)), "vpatch", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    # from the rewrite cache, and planned ahead: the commit rode in the inspect's exchange
    stats = doc["stats"]
    assert doc["ok"] and (stats["libcst_parses"], stats["planned_ahead"]) == (0, 1), doc
    found: list[str] = json.loads(out.read_text())
    return found


def test_warm_apply_imports_no_heavy_package(tmp_path: Path, standin_env: Env) -> None:
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    env = {"VPATCH_CACHE_DIR": str(tmp_path / "cache"), "VPATCH_NO_CACHE": ""}
    py = ["--python", str(standin_env.python)]
    warm = vpatch("apply", spec, *py, "--level", "static", env=env)  # fills the rewrite cache
    assert warm.code == 0, warm.out + warm.err
    assert vpatch("rollback", spec, *py, env=env).code == 0

    args = ["apply", str(spec), *py, "--level", "static", "--json"]
    found = modules_of(args, env, tmp_path / "modules.json")
    heavy = sorted({m.split(".")[0] for m in found} & set(NEVER))
    assert heavy == [], f"an apply on a local target imported {heavy}"
    assert sorted(set(found) & set(NEVER_STDLIB)) == []
    assert "patcher.run.engine" in found and "patcher.transports.pipe" in found  # it did the work
    assert len(found) <= MAX_MODULES, f"{len(found)} modules (bound {MAX_MODULES})"


def test_catalog_needs_no_spec_models(tmp_path: Path) -> None:
    """Listing ids reads file names: no pydantic, no spec models, no planner."""
    proc = subprocess.run(
        [sys.executable, "-c", DUMP.format(path=str(tmp_path / "m.json")), "vpatch", "catalog"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads((tmp_path / "m.json").read_text())
    loaded = [
        m for m in found if m.startswith(("pydantic", "patcher.specs.model", "patcher.run.engine"))
    ]
    assert loaded == [] and len(found) <= 150, (loaded, len(found))


SSH_START = """\
import sys
from patcher.transports.openssh import OpenSshTransport
from patcher.transports.ssh import SshOptions
t = OpenSshTransport("h", "h", None, None, SshOptions(ssh_config=sys.argv[1]))
assert "ControlMaster auto" in open(t.share_config).read() and t._argv()[0].endswith("ssh")
print(" ".join(sorted(sys.modules)))
"""


def test_first_ssh_starts_before_hashlib_and_the_agent_package(tmp_path: Path) -> None:
    """What a command does before its first `ssh` starts is on the path of every command at
    every RTT: the agent bundle's key, the shared connection's config, the remote command line
    come without hashlib (OpenSSL's load) and without the agent package (fasthash, lazy
    imports); both load later, while the handshake runs."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text("")
    cfg.chmod(0o600)
    proc = subprocess.run(
        [sys.executable, "-I", "-c", SSH_START, str(cfg)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "VPATCH_CACHE_DIR": str(tmp_path / "cache")},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert "patcher.transports.bundle" in loaded  # the remote command line was made
    assert sorted(loaded & {"hashlib", "_hashlib", "patcher.agent", "tempfile"}) == []
