"""Running containers as targets, on real engines (tests/support/containerlab.py): podman, and
docker where its daemon starts here.

Each container runs a Python server (PID 1) from the stand-in image: user `app` owns the venv
/srv/venv holding the stand-in package, as a serving image's user owns its environment. vpatch
reaches it with `ENGINE exec -i` (patcher.transports.container), as the container's root by
default, so the trust rules are the privsep ones: stage 0 under the image's /usr/bin/python3,
the work done as `app`.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Run, vpatch
from tests.sshd import LabFactory, SshHost
from tests.support import containerlab
from tests.support.containerlab import APP_UID, Lab
from tests.support.standin_specs import REL, SPEC_A, SPEC_B

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the engines run rootful here")

SITE = f"{containerlab.VENV}/lib/python3.11/site-packages"
TARGET = f"{SITE}/{REL}"


def _docker_usable() -> bool:
    return shutil.which("dockerd") is not None and shutil.which("docker") is not None


@pytest.fixture(scope="module", params=["podman", "docker"])
def lab(request: pytest.FixtureRequest) -> Iterator[Lab]:
    gone = containerlab.missing()
    assert not gone, f"the container lab needs {gone} (make test-deps installs them)"
    if request.param == "docker":
        if not _docker_usable():
            pytest.skip("no dockerd here (Debian: docker.io; make test-deps installs it)")
        with containerlab.docker_lab() as engine:
            yield engine
        return
    with containerlab.podman_lab() as engine:
        yield engine


def ok(res: Run) -> Run:
    assert res.code == 0, res.out + res.err
    return res


def _run(lab: Lab, *args: str | Path) -> Run:
    return vpatch(*args, env=lab.env)


def _spec(tmp_path: Path) -> Path:
    p = tmp_path / "a.toml"
    p.write_text(SPEC_A)
    return p


def test_apply_verify_restart_verify_rollback_to_exact_bytes(lab: Lab, tmp_path: Path) -> None:
    """The patch lives in the container's writable layer: it survives a restart (a new PID
    1, which imports the patched module), and rollback brings back the exact bytes."""
    c = lab.run(f"vp-round-{lab.engine}")
    inv = lab.inventory(tmp_path / "hosts.toml", [c])
    before = lab.read(c, TARGET)
    applied = ok(_run(lab, "apply", _spec(tmp_path), "--inventory", inv, "--json"))
    assert applied.patch()["outcome"] == "applied", applied.out
    assert b"kimi_k2" in lab.read(c, TARGET)
    ok(_run(lab, "verify", _spec(tmp_path), "--inventory", inv))
    started = lab.started_at(c)
    lab.restart(c)
    assert lab.started_at(c) != started
    ok(_run(lab, "verify", _spec(tmp_path), "--inventory", inv))
    ok(_run(lab, "rollback", "--inventory", inv))
    after = lab.read(c, TARGET)
    assert hashlib.sha256(after).hexdigest() == hashlib.sha256(before).hexdigest()
    # the agent worked as the venv's owner, not as the container's root
    owners = lab.sh(c, f"stat -c %u {TARGET} {containerlab.VENV}/.vpatch 2>/dev/null || true")
    assert set(owners.split()) <= {str(APP_UID)}, owners


def test_status_after_a_recreate_says_the_patch_is_gone(lab: Lab, tmp_path: Path) -> None:
    """`rm` + `run` of the same image: a new writable layer, so the patch and its journal
    are gone, and status says so (the image's own bytes)."""
    c = lab.run(f"vp-recreate-{lab.engine}")
    inv = lab.inventory(tmp_path / "hosts.toml", [c])
    ok(_run(lab, "apply", _spec(tmp_path), "--inventory", inv))
    st = ok(_run(lab, "status", "--inventory", inv, "--json"))
    assert [p["id"] for p in st.doc["hosts"][0]["patches"]] == ["servekit-kimi"], st.out
    assert (st.doc["hosts"][0]["ephemeral"], st.doc["hosts"][0]["env_mounted"]) == (True, False)
    human = ok(_run(lab, "status", "--inventory", inv)).out
    assert "servekit-kimi" in human and "ephemeral" in human, human
    lab.rm(c)
    lab.run(c)
    st = ok(_run(lab, "status", "--inventory", inv, "--json"))
    assert st.doc["hosts"][0]["patches"] == [], st.out
    assert b"kimi_k2" not in lab.read(c, TARGET)


def test_a_venv_on_a_volume_outlives_a_recreate(lab: Lab, tmp_path: Path) -> None:
    """The venv on a named volume (filled from the image's /srv/venv when first mounted): the
    patch is on the volume, not in the writable layer, so status does not call it ephemeral,
    and a container re-created on the same volume still has it."""
    vol = f"vp-venv-{lab.engine}"
    mount = ("-v", f"{vol}:{containerlab.VENV}")
    c = lab.run(f"vp-volume-{lab.engine}", opts=mount)
    inv = lab.inventory(tmp_path / "hosts.toml", [c])
    try:
        ok(_run(lab, "apply", _spec(tmp_path), "--inventory", inv))
        lab.rm(c)
        lab.run(c, opts=mount)
        st = ok(_run(lab, "status", "--inventory", inv, "--json"))
        [host] = st.doc["hosts"]
        assert [p["id"] for p in host["patches"]] == ["servekit-kimi"], st.out
        assert (host["ephemeral"], host["env_mounted"]) == (False, True)
    finally:
        lab.rm(c)
        lab.cli("volume", "rm", "-f", vol, check=False)


def test_a_missing_container_is_one_error_with_a_hint(lab: Lab, tmp_path: Path) -> None:
    inv = lab.inventory(tmp_path / "hosts.toml", [f"vp-none-{lab.engine}"])
    res = _run(lab, "status", "--inventory", inv)
    assert res.code != 0 and "Traceback" not in res.err, res.err
    assert f"no container 'vp-none-{lab.engine}'" in res.err, res.err
    assert "hint:" in res.err


def test_code_the_containers_user_plants_never_runs_as_root(lab: Lab, tmp_path: Path) -> None:
    """`app` owns the venv and plants a .pth in its site-packages (which any interpreter of
    the venv runs at start); vpatch execs in as the container's root. The .pth runs (it is
    the env's own code, run as its owner by the worker and the probes), never as root."""
    c = lab.run(f"vp-plant-{lab.engine}")
    lab.sh(
        c,
        f"mkdir -p /tmp/ran && chmod 1777 /tmp/ran && printf '%s\\n' "
        f'\'import os; open("/tmp/ran/%d" % os.getuid(), "a").close()\' '
        f"> {SITE}/zz_plant.pth",
        user="app",
    )
    inv = lab.inventory(tmp_path / "hosts.toml", [c])
    ok(_run(lab, "status", "--inventory", inv))
    applied = ok(_run(lab, "apply", _spec(tmp_path), "--inventory", inv, "--json"))
    assert applied.patch()["outcome"] == "applied", applied.out
    ok(_run(lab, "rollback", "--inventory", inv))
    assert lab.sh(c, "ls /tmp/ran").split() == [str(APP_UID)]


def test_through_ssh_on_the_containers_host(
    lab: Lab, tmp_path: Path, ssh_lab_factory: LabFactory
) -> None:
    """`ssh HOST -- ENGINE exec -i C ...`: the container on a real sshd host (its root's
    login reaches this lab's engine through the store's variables in its .bashrc, which
    Debian's bash reads for a command over ssh)."""
    env = {k: v for k, v in lab.env.items() if k.startswith(("CONTAINERS_", "DOCKER_HOST"))}

    def engine_env(host: SshHost) -> None:
        lines = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        (host.home / ".bashrc").write_text(lines)

    ssh = ssh_lab_factory(1, env_factory=engine_env)
    c = lab.run(f"vp-ssh-{lab.engine}")
    before = lab.read(c, TARGET)
    inv = tmp_path / "hosts.toml"
    inv.write_text(
        f'[[host]]\nname = "h1-{c}"\naddress = "h1"\ntransport = "{lab.engine}"\n'
        f'container = "{c}"\npython = "{containerlab.PYTHON}"\n'
    )
    where = ["--inventory", inv, "--ssh-config", ssh.ssh_config]
    applied = ok(vpatch("apply", _spec(tmp_path), *where, "--json"))
    assert applied.patch()["outcome"] == "applied", applied.out
    assert b"kimi_k2" in lab.read(c, TARGET)
    ok(vpatch("verify", _spec(tmp_path), *where))
    ok(vpatch("rollback", *where))
    assert lab.read(c, TARGET) == before


def test_a_rollout_whose_restart_recreates_is_refused_before_anything_is_written(
    lab: Lab, tmp_path: Path
) -> None:
    c = lab.run(f"vp-refuse-{lab.engine}")
    inv = lab.inventory(tmp_path / "hosts.toml", [c])
    before = lab.read(c, TARGET)
    report = tmp_path / "report.json"
    recreate = f"{lab.engine} rm -f {c} && {lab.engine} run -d --name {c} {containerlab.STANDIN}"
    res = _run(lab, "rollout", _spec(tmp_path), "--inventory", inv, "--restart", recreate,
               "--report", report)  # fmt: skip
    assert res.code == 2, res.out + res.err
    assert f"re-creates container '{c}'" in res.err and "vpatch wheel" in res.err, res.err
    assert "Traceback" not in res.err
    assert lab.read(c, TARGET) == before
    assert not report.exists()
    assert lab.sh(c, f"ls -a {containerlab.VENV}").split().count(".vpatch") == 0


ROLL = ["--canary", "1", "--control", "1", "--level", "static", "--json", "--window", "2",
        "--scrape-every", "0.4", "--min-drafts", "0", "--max-window", "20",
        "--min-throughput-ratio", "0.9"]  # fmt: skip


def test_a_rollout_over_containers_keeps_the_good_patch_and_rolls_back_the_bad(
    lab: Lab, tmp_path: Path
) -> None:
    """Three containers serving (no port published: health and metrics are fetched by the
    agent inside each), the last one the control; each restarted by its engine on this
    machine (`ENGINE restart C`). SPEC_B halves the tokens/s: rolled back on the canary, the
    rest never touched. SPEC_A leaves them: kept, on every host but the control."""
    names = [
        lab.run(f"vp-roll{i}-{lab.engine}", containerlab.PYTHON, "-c", containerlab.LAB_SERVER)
        for i in (1, 2, 3)
    ]
    inv, url = tmp_path / "hosts.toml", containerlab.LAB_URL
    inv.write_text(
        "\n".join(
            f'[[host]]\nname = "{n}"\naddress = "local"\ntransport = "{lab.engine}"\n'
            f'container = "{n}"\npython = "{containerlab.PYTHON}"\n'
            f'restart = "{lab.engine} restart -t 5 {n}"\n'
            f'health = "{url}/health"\nmetrics = "{url}/metrics"\n'
            for n in names
        )
    )
    pristine = {n: lab.read(n, TARGET) for n in names}
    bad = tmp_path / "b.toml"
    bad.write_text(SPEC_B)
    res = _run(lab, "rollout", bad, "--inventory", inv, *ROLL)
    assert res.code == 1, res.out + res.err
    hosts = {h["target"]: h for h in res.doc["hosts"]}
    assert hosts[names[0]]["rollout"]["verdict"] == "rolled_back", hosts[names[0]]["rollout"]
    assert {n: lab.read(n, TARGET) for n in names} == pristine
    started = lab.started_at(names[0])
    res = _run(lab, "rollout", _spec(tmp_path), "--inventory", inv, *ROLL)
    assert res.code == 0, res.out + res.err
    hosts = {h["target"]: h for h in res.doc["hosts"]}
    rollout = hosts[names[0]]["rollout"]
    assert rollout["verdict"] == "kept", rollout
    [restart] = [p for p in rollout["phases"] if p["step"] == "restart"]
    assert f"`{lab.engine} restart -t 5 {names[0]}` exited 0" in restart["detail"], restart
    assert lab.started_at(names[0]) != started  # the container itself was restarted
    assert [b"kimi_k2" in lab.read(n, TARGET) for n in names] == [True, True, False]
