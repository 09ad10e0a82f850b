"""`--host` against real sshd test hosts: the same agent, over one SSH connection per host.

Each host sees its own /root (with the serving env at /root/ml-env, as on a GPU box), so one
`--python /root/ml-env/bin/python` serves every host, and nothing on the machine itself is hit.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from tests import envs, standin
from tests import sshd as harness
from tests.conftest import SPEC, fingerprint, vpatch
from tests.support.handedits import record_sha
from tests.support.specs import probe
from tests.support.sshargs import CLIENTS, PY, host_file, ssh_args
from tests.support.standin_specs import KIMI, REL, SPEC_A, spec_a


def write_spec(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def vllm_factory(versions: dict[str, str], host: harness.SshHost) -> None:
    envs.clone(versions[host.name], host.home / "ml-env")


@pytest.mark.vllm
def test_three_real_vllm_hosts(ssh_lab_factory: harness.LabFactory) -> None:
    versions = {"h1": "0.11.0", "h2": "0.16.0", "h3": "0.17.0"}
    lab = ssh_lab_factory(3, partial(vllm_factory, versions))
    hosts = [a for h in lab.hosts for a in ("--host", h.name)]
    rel = "vllm/config/speculative.py"

    res = vpatch("apply", SPEC, *hosts, *ssh_args(lab, "--json", "--level", "static"))
    assert res.code == 0, res.out + res.err
    got = {
        h["target"]: (h["patches"][0]["version"], h["patches"][0]["variant"])
        for h in res.doc["hosts"]
    }
    assert got == {"h1": ("0.11.0", 0), "h2": ("0.16.0", 0), "h3": ("0.17.0", 1)}
    assert all(h["patches"][0]["outcome"] == "applied" for h in res.doc["hosts"])

    ver = vpatch("verify", SPEC, *hosts, *ssh_args(lab, "--json", "--level", "full"))
    assert ver.code == 0, ver.out + ver.err
    for h in ver.doc["hosts"]:
        [p] = h["patches"]
        assert p["outcome"] == "applied" and [pr["ok"] for pr in p["probes"]] == [True]

    back = vpatch("rollback", *hosts, *ssh_args(lab, "--json"))
    assert back.code == 0, back.out + back.err
    for h in lab.hosts:
        site = envs.site_packages(h.home / "ml-env")
        assert hashlib.sha256((site / rel).read_bytes()).hexdigest() == record_sha(site, rel)


@pytest.mark.parametrize("client", CLIENTS)
def test_host_keys_unknown_refused_accept_new_changed_refused(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, client: str
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    via = ("--ssh-client", client)
    h = lab.hosts[0]
    spec = write_spec(tmp_path, "a.toml", SPEC_A)
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    snap = fingerprint(h.home)
    fp = subprocess.run(
        ["ssh-keygen", "-lf", str(h.host_key_pub)], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert fp.startswith("SHA256:")

    refused = vpatch(
        "apply", spec, "--host", h.name, *ssh_args(lab, "--known-hosts", str(kh), "--json", *via)
    )
    assert refused.code == 1
    err, hint = refused.doc["hosts"][0]["error"], refused.doc["hosts"][0]["hint"]
    assert "unknown host key" in err and fp in err and "--accept-new-host-key" in hint
    assert fingerprint(h.home) == snap

    accepted = vpatch(
        "apply",
        spec,
        "--host",
        h.name,
        *ssh_args(lab, "--known-hosts", str(kh), "--accept-new-host-key", "--json", *via),
    )
    assert accepted.code == 0, accepted.out + accepted.err
    assert f"[127.0.0.1]:{h.port}" in kh.read_text()
    assert h.known_hosts_line.split()[2] in kh.read_text()

    # A different key for the same host: always refused, even with --accept-new-host-key.
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kh.write_text(
        f"[127.0.0.1]:{h.port} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n"
    )
    snap = fingerprint(h.home)
    changed = vpatch(
        "rollback",
        "--host",
        h.name,
        *ssh_args(lab, "--known-hosts", str(kh), "--accept-new-host-key", "--json", *via),
    )
    assert changed.code == 1
    assert "HOST KEY CHANGED" in changed.doc["hosts"][0]["error"]
    assert fingerprint(h.home) == snap


def test_per_host_failures_do_not_stop_healthy_hosts(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(4, harness.standin_env_factory)
    h1, h2, _h3, h4 = lab.hosts
    h2.stop()
    # h4's probe hangs; its connection is cut while the probe runs.
    on_h4 = "import socket, time\nif socket.gethostname() == 'h4': time.sleep(60)"
    slow = spec_a(probes=[KIMI, probe("slow on h4", "servekit.config", on_h4)])
    spec = write_spec(tmp_path, "slow.toml", slow)
    inv = write_spec(
        tmp_path,
        "hosts.toml",
        "[defaults]\npython = '/root/ml-env/bin/python'\n"
        + "".join(f"[[host]]\nname = '{h.name}'\naddress = '{h.name}'\n" for h in (h1, h2, h4))
        + "[[host]]\nname = 'h3'\naddress = 'h3'\npython = '/root/nope/bin/python'\n",
    )

    finished = threading.Event()

    def cut_h4() -> None:
        while not finished.wait(0.1):
            if any(_is_probe(p) for p in h4.session_pids()):
                time.sleep(0.3)
                h4.kill_sessions()
                return

    cutter = threading.Thread(target=cut_h4)
    cutter.start()
    res = vpatch(
        "apply",
        spec,
        "--inventory",
        inv,
        "--ssh-config",
        str(lab.ssh_config),
        "--json",
        "--timeout",
        "120",
    )
    finished.set()
    cutter.join()
    assert res.code == 1, res.out + res.err
    by = {h["target"]: h for h in res.doc["hosts"]}
    assert [h["target"] for h in res.doc["hosts"]] == ["h1", "h2", "h4", "h3"]
    assert by["h1"]["ok"] and by["h1"]["patches"][0]["outcome"] == "applied"
    assert "cannot connect" in by["h2"]["error"] or "refused" in by["h2"]["error"]
    assert "/root/nope/bin/python" in by["h3"]["error"] and "not found" in by["h3"]["error"]
    assert "connection lost" in by["h4"]["error"] and "outcome unknown" in by["h4"]["error"]
    # The cut host is pristine or fully patched, and status says which.
    text = host_file(h4, REL).read_text()
    st = vpatch("status", "--host", "h4", *ssh_args(lab, "--json"))
    patched = '"kimi_k2",' in text
    assert [p["outcome"] for p in st.doc["hosts"][0]["patches"]] == (["applied"] if patched else [])
    # written, its checks cut with the connection: journaled unverified, a state for a person
    assert st.code == (1 if patched else 0), st.out + st.err
    attention = [a["state"] for a in st.doc["hosts"][0].get("attention") or []]
    assert attention == (["unverified"] if patched else []), st.out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _is_probe(pid: int) -> bool:
    return "import importlib,sys" in _cmdline(pid)


def test_sudo_for_root_owned_env(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    spec = write_spec(tmp_path, "a.toml", SPEC_A)
    lab = ssh_lab_factory(1, harness.standin_env_factory, user=harness.NONROOT_USER, sudoers=True)
    h = lab.hosts[0]
    plain = vpatch("apply", spec, "--host", h.name, *ssh_args(lab, "--json"))
    assert plain.code == 1 and "Permission denied" in (plain.doc["hosts"][0]["error"] or "")
    ok = vpatch("apply", spec, "--host", h.name, *ssh_args(lab, "--sudo", "--json"))
    assert ok.code == 0, ok.out + ok.err
    assert '"kimi_k2",' in host_file(h, REL).read_text()

    nolab = ssh_lab_factory(1, harness.standin_env_factory, user=harness.NONROOT_USER)
    n = nolab.hosts[0]
    snap = fingerprint(n.home)
    denied = vpatch("apply", spec, "--host", n.name, *ssh_args(nolab, "--sudo", "--json"))
    assert denied.code == 1
    assert "sudo refused" in denied.doc["hosts"][0]["error"]
    assert fingerprint(n.home) == snap


HOSTILE = ["'; touch {m}/q #", "$(touch {m}/d)", "`touch {m}/b`", "a\nb; touch {m}/n"]


def test_hostile_values_never_reach_a_shell(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    marker = tmp_path / "markers"
    marker.mkdir()
    values = [v.format(m=marker) for v in HOSTILE]
    spec = write_spec(tmp_path, "h.toml", spec_a(values=values, probes=()))
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    h = lab.hosts[0]
    res = vpatch("apply", spec, "--host", h.name, *ssh_args(lab, "--json"))
    assert res.code == 0, res.out + res.err
    text = host_file(h, REL).read_text()
    for v in values:
        assert repr(v)[1:-1].replace("'", "\\'") in text or v in text or repr(v) in text
    bad_python = vpatch(
        "status",
        "--host",
        h.name,
        "--ssh-config",
        str(lab.ssh_config),
        "--python",
        f"/root/ml-env/bin/python; touch {marker}/py",
        "--json",
    )
    assert bad_python.code == 1
    assert list(marker.iterdir()) == []


def test_big_request_fast_and_timeouts(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    from patcher.transports.paramiko_ssh import SshTransport
    from patcher.transports.ssh import SshOptions

    lab = ssh_lab_factory(1, harness.standin_env_factory)
    h = lab.hosts[0]
    opts = SshOptions(python=PY, ssh_config=str(lab.ssh_config), connect_timeout=3)
    t = SshTransport(h.name, h.name, None, None, opts)
    try:
        # A request larger than any pipe or channel window crosses whole (a stall here would
        # end in the call's timeout, not an answer).
        res = t.call({"op": "inspect", "packages": {}, "pad": "x" * 200_000}, timeout=60)
        assert res["ok"], res
    finally:
        t.close()

    # A host that accepts TCP but never speaks (sshd frozen): connect times out, not hangs.
    import os
    import signal

    os.kill(h.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        res2 = vpatch(
            "status", "--host", h.name, *ssh_args(lab, "--connect-timeout", "2", "--json")
        )
        assert res2.code == 1 and "timed out" in res2.doc["hosts"][0]["error"]
        assert time.monotonic() - started < 15
    finally:
        os.kill(h.pid, signal.SIGCONT)

    hang = SPEC_A.replace("assert module", "import time; time.sleep(30); assert module")
    spec = write_spec(tmp_path, "hang.toml", hang)
    res3 = vpatch("verify", spec, "--host", h.name, *ssh_args(lab, "--timeout", "3", "--json"))
    assert res3.code == 1 and "timed out after 3s" in res3.doc["hosts"][0]["error"]
    assert standin.PACKAGE in SPEC_A
