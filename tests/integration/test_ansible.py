"""The `vpatch.core` collection under real ansible-core against real sshd hosts.

The collection is built with `ansible-galaxy collection build` and installed from the tarball
(tests/scale.py), so what runs is what a user would install. ansible-playbook runs from its own
venv (ansible-core + vpatch's dependencies, `patcher` from this tree); host key checking is on,
against the lab's known_hosts. One host has a real vLLM 0.16.0 and gets the EAGLE-3 spec; the
others have the stand-in package (cheap) and its spec, picked per host by an inventory variable.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import envs, scale
from tests import sshd as harness
from tests.conftest import SPEC, fingerprint, vpatch
from tests.support.ansible_module import run_agent_module
from tests.support.handedits import record_sha
from tests.support.standin_specs import REL, SPEC_A

PY = "/root/ml-env/bin/python"
VLLM_REL = "vllm/config/speculative.py"


@pytest.fixture(scope="module")
def collections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built and installed once per module (~2 s; the venv is cached across runs)."""
    return scale.collection(tmp_path_factory.mktemp("collection"))


def mixed_env(host: harness.SshHost) -> None:
    if host.name == "h1":
        envs.clone("0.16.0", host.home / "ml-env")
    else:
        harness.standin_env_factory(host)


def site(host: harness.SshHost) -> Path:
    return envs.site_packages(host.home / "ml-env")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def task(**args: Any) -> dict[str, Any]:
    return {"name": "vpatch", "vpatch.core.patch": {"spec": "{{ spec }}", "python": PY, **args}}


@pytest.mark.vllm
def test_playbook_apply_idempotent_check_diff_absent(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, collections: Path
) -> None:
    lab = ssh_lab_factory(3, mixed_env)
    standin_spec = tmp_path / "servekit-kimi.toml"
    standin_spec.write_text(SPEC_A)
    rel = {"h1": VLLM_REL, "h2": REL, "h3": REL}
    spec_of = {"h1": str(SPEC), "h2": str(standin_spec), "h3": str(standin_spec)}
    play = scale.AnsibleLab(
        tmp_path / "ansible", lab, collections, {h: {"spec": s} for h, s in spec_of.items()}
    )
    files = {h.name: site(h) / rel[h.name] for h in lab.hosts}
    pristine = {name: sha(f) for name, f in files.items()}

    # --check --diff: the unified diff is shown, "changed" is predicted, nothing is written.
    snaps = {h.name: fingerprint(h.home / "ml-env") for h in lab.hosts}
    check = play.play([task()], "--check", "--diff", callback="default", name="check")
    assert check.code == 0, check.out + check.err
    assert '+            "kimi_k2",' in check.out  # vLLM 0.16's multi-line list and the stand-in
    assert '+            "deepseek_v3",' in check.out
    assert f"--- a/{VLLM_REL}" in check.out and f"--- a/{REL}" in check.out
    for h in lab.hosts:
        assert f"{h.name}" in check.out
    assert check.out.count("changed=1") == 3, check.out
    assert {h.name: fingerprint(h.home / "ml-env") for h in lab.hosts} == snaps

    # Apply: changed, the same result document as `vpatch apply --json`, probes run (full).
    first = play.play([task()], name="apply")
    assert first.code == 0, first.out + first.err
    for name, res in first.results().items():
        assert res["changed"] is True
        doc = res["vpatch"]
        assert doc["command"] == "apply" and doc["ok"] is True
        [host] = doc["hosts"]
        assert host["target"] == name and host["error"] is None
        [patch] = host["patches"]
        assert patch["outcome"] == "applied" and res["outcomes"] == {patch["id"]: "applied"}
        [change] = patch["files"]
        assert change["before_sha256"] == pristine[name]
        assert change["after_sha256"] == sha(files[name]) != pristine[name]
        assert patch["probes"] and all(p["ok"] for p in patch["probes"])
    assert first.results()["h1"]["vpatch"]["hosts"][0]["patches"][0]["version"] == "0.16.0"
    assert "deepseek_v3" in files["h1"].read_text()

    # The SSH path sees what the collection did (same journal, same hashes).
    hosts = [a for h in lab.hosts for a in ("--host", h.name)]
    st = vpatch("status", *hosts, "--ssh-config", lab.ssh_config, "--python", PY, "--json")
    assert st.code == 0, st.out + st.err
    assert {h["target"]: h["patches"][0]["outcome"] for h in st.doc["hosts"]} == {
        h.name: "applied" for h in lab.hosts
    }

    # Idempotent: the second run changes nothing (changed=0 in the recap); a static verify too.
    again = play.play([task(), task(state="verified", level="static")], name="again")
    assert again.code == 0, again.out + again.err
    assert {h: s["changed"] for h, s in again.stats.items()} == {h.name: 0 for h in lab.hosts}
    for h in lab.hosts:
        assert set(again.results(0)[h.name]["outcomes"].values()) == {"already_applied"}
        assert set(again.results(1)[h.name]["outcomes"].values()) == {"applied"}

    # state: absent rolls back to pip's RECORD hash; verified then fails (not applied).
    back = play.play([task(state="absent"), task(state="verified", level="static")], name="absent")
    assert back.code == 2, back.out + back.err  # ansible-playbook: 2 = a task failed on a host
    for h in lab.hosts:
        res, gone = back.results(0)[h.name], back.results(1)[h.name]
        assert res["changed"] is True and set(res["outcomes"].values()) == {"rolled_back"}
        assert sha(files[h.name]) == record_sha(site(h), rel[h.name]) == pristine[h.name]
        assert gone["failed"] is True and set(gone["outcomes"].values()) == {"not_applied"}


def test_failures_are_per_host_and_check_mode_never_commits(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, collections: Path
) -> None:
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    # h2's interpreter does not exist: vpatch's own message and hint, h1 unaffected.
    play = scale.AnsibleLab(
        tmp_path / "ansible",
        lab,
        collections,
        {"h1": {"py": PY}, "h2": {"py": "/root/missing/bin/python"}},
    )
    snaps = {h.name: fingerprint(h.home / "ml-env") for h in lab.hosts}
    t = {"vpatch.core.patch": {"spec": str(spec), "python": "{{ py }}", "level": "static"}}
    res = play.play([t], "--check", name="check-missing")
    assert res.code == 2, res.out + res.err
    ok, bad = res.results()["h1"], res.results()["h2"]
    assert ok["changed"] is True and ok["outcomes"] == {"servekit-kimi": "would_apply"}
    assert bad["failed"] is True and "not found" in bad["msg"], bad["msg"]
    assert {h.name: fingerprint(h.home / "ml-env") for h in lab.hosts} == snaps

    # h2's module interpreter starts and dies before any JSON: the message is the module's
    # stderr, not Ansible's bare "MODULE FAILURE" / "deserialization failed".
    broken_py = lab.hosts[1].home / "broken-python"
    broken_py.write_text(
        "#!/bin/sh\necho 'broken-python: libpython3.so: cannot open' >&2\nexit 1\n"
    )
    broken_py.chmod(0o755)
    play2 = scale.AnsibleLab(
        tmp_path / "ansible2",
        lab,
        collections,
        {"h1": {"py": PY}, "h2": {"py": PY, "ansible_python_interpreter": str(broken_py)}},
    )
    res = play2.play([t], "--check", name="module-broken")
    bad = res.results()["h2"]
    assert bad["failed"] is True and "libpython3.so: cannot open" in bad["msg"], bad
    assert res.results()["h1"]["changed"] is True

    # A spec that does not validate fails the task on the controller: nothing is contacted.
    broken = tmp_path / "broken.toml"
    broken.write_text('id = "x"\n')
    res = play.play([{"vpatch.core.patch": {"spec": str(broken)}}], name="broken")
    assert res.code == 2
    assert all("broken.toml" in r["msg"] for r in res.results().values())
    assert {h.name: fingerprint(h.home / "ml-env") for h in lab.hosts} == snaps

    # The agent module refuses a write in check mode even if asked directly.
    direct = {
        "vpatch.core.patch_agent": {
            "request": '{"op": "commit", "writes": []}',
            "agent": "{}",
            "boot": "pass",
            "python": PY,
        }
    }
    res = play.play([direct], "--check", name="direct-commit")
    assert res.code == 2
    assert all("check mode" in r["msg"] for r in res.results().values())


def test_collection_layout(collections: Path) -> None:
    """What `ansible-galaxy collection build` shipped: the plugin pair and the agent module,
    and no copy of the agent (the controller sends its own on every call)."""
    root = collections / "ansible_collections" / "vpatch" / "core"
    shipped = sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))
    assert shipped == [
        "plugins/action/patch.py",
        "plugins/module_utils/patch_args.py",
        "plugins/modules/patch.py",
        "plugins/modules/patch_agent.py",
    ]
    assert "def op_commit" not in (root / "plugins/modules/patch_agent.py").read_text()
    # The documentation parses (ansible-doc) and Ansible pairs the module with the action.
    env = scale.child_env(
        {
            "ANSIBLE_COLLECTIONS_PATH": str(collections),
            "ANSIBLE_LOCAL_TEMP": str(collections.parent / "local-tmp"),
        }
    )
    doc = scale.run([str(scale.ansible_bin() / "ansible-doc"), "vpatch.core.patch"], env)
    assert doc.code == 0, doc.err
    assert "corresponding action plugin" in doc.out and "check_mode" in doc.out


def test_agent_module_logs_no_request_text(tmp_path: Path) -> None:
    """Ansible logs a module's arguments on the target (syslog/journal, and `invocation` in
    the result): a request holds whole file texts and probe code, so it is no_log."""
    from patcher.transports.bundle import BOOT, BOOT0, agent_bundle

    secret = "TEXT-OF-A-PATCHED-FILE"
    request = {"op": "inspect", "packages": {}, "note": secret}
    res = run_agent_module(
        {
            "request": json.dumps(request),
            "agent": agent_bundle().decode(),
            "boot": BOOT,
            "boot0": BOOT0,
            "python": sys.executable,
        },
        tmp_path,
    )
    assert json.loads(res["answer"])["ok"], res
    assert secret not in json.dumps(res["invocation"]), res["invocation"]
