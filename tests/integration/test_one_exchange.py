"""One exchange per host once the controller has seen the host (patcher/caches/facts.py,
patcher/agent/chain.py), on real sshd hosts through the real CLI: the counts of round trips,
the fallback when the host changed, and a cache that lies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests import envs
from tests import sshd as harness
from tests.conftest import Run, vpatch
from tests.support.standin_specs import REL, SPEC_A

PY = "/root/ml-env/bin/python"


def _site_file(h: harness.SshHost) -> Path:
    return envs.site_packages(h.home / "ml-env") / REL


def _setup(tmp_path: Path, lab: harness.SshLab) -> tuple[list[str], dict[str, str]]:
    lines = [f"[defaults]\npython = '{PY}'\n"]
    lines += [f"[[host]]\nname = '{h.name}'\naddress = '{h.name}'\n" for h in lab.hosts]
    inv = tmp_path / "hosts.toml"
    inv.write_text("\n".join(lines))
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    common = [str(spec), "--inventory", str(inv), "--ssh-config", str(lab.ssh_config)]
    env = {"VPATCH_CACHE_DIR": str(tmp_path / "cache"), "VPATCH_NO_CACHE": ""}
    return common, env


def _run(command: str, common: list[str], env: dict[str, str], *more: str) -> Run:
    res = vpatch(command, *common, "--json", *more, env=env)
    assert res.code == 0, res.out + res.err
    return res


def _counts(res: Run) -> tuple[int, int]:
    stats = res.doc["stats"]
    return stats["agent_exchanges"], stats["planned_ahead"]


def test_cached_apply_and_rollback_take_one_exchange_per_host(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    common, env = _setup(tmp_path, lab)
    pristine = [_site_file(h).read_bytes() for h in lab.hosts]

    # Never seen: inspect, then commit + check + inspect; the second host is planned ahead
    # from the first one's answer (exchange.RunContext.peers) when that answer came back
    # before it was asked.
    first = _run("apply", common, env)
    assert _counts(first) in ((4, 0), (3, 1))
    patched = [_site_file(h).read_bytes() for h in lab.hosts]
    assert all(b'"kimi_k2",' in p for p in patched)

    back = _run("rollback", common, env)  # the state the apply left: one exchange a host
    assert _counts(back) == (2, 2)
    assert [p["outcome"] for h in back.doc["hosts"] for p in h["patches"]] == ["rolled_back"] * 2
    assert [_site_file(h).read_bytes() for h in lab.hosts] == pristine

    again = _run("apply", common, env)  # the state the rollback left, with its import check
    assert _counts(again) == (2, 2)
    assert [_site_file(h).read_bytes() for h in lab.hosts] == patched
    for h in again.doc["hosts"]:
        [p] = h["patches"]
        assert p["outcome"] == "applied" and [pr["ok"] for pr in p["probes"]] == [True]

    # verify: its checks ride in the inspect's exchange too.
    checked = _run("verify", common, env)
    assert _counts(checked) == (2, 2)
    for h in checked.doc["hosts"]:
        [p] = h["patches"]
        assert p["outcome"] == "applied" and [pr["ok"] for pr in p["probes"]] == [True]

    # Already applied: the guess plans no commit, so the exchange is a plain inspect.
    noop = _run("apply", common, env)
    assert _counts(noop) == (2, 0)
    assert {p["outcome"] for h in noop.doc["hosts"] for p in h["patches"]} == {"already_applied"}

    # `rollback ID` asks for no package files (the journal has what it needs): the apply left
    # that narrower answer too, so it also takes one exchange a host.
    by_id = _run("rollback", ["servekit-kimi", *common[1:]], env)
    assert _counts(by_id) == (2, 2), by_id.doc["stats"]
    assert [_site_file(h).read_bytes() for h in lab.hosts] == pristine
    _run("apply", common, env)

    # h2 changed by hand since: its guess does not match, so it is planned from the answer
    # that came back and refused as any hand-edited file is (nothing to commit: one
    # exchange, no guess taken); h1's guess matches.
    _run("rollback", common, env)
    edited = _site_file(lab.hosts[1])
    edited.write_text(edited.read_text() + "\n# local change\n")
    mixed = vpatch("apply", *common, "--json", env=env)
    assert _counts(mixed) == (2, 1), mixed.doc["stats"]
    outcomes = [h["patches"][0]["outcome"] for h in mixed.doc["hosts"]]
    assert outcomes == ["applied", "modified"], outcomes
    assert _site_file(lab.hosts[1]).read_text().endswith("# local change\n")


def test_hosts_after_the_canary_plan_on_its_answer(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """No cache at all (the suite's default): alike hosts still take one exchange each once
    the canary has answered, and one that is not alike falls back by itself."""
    lab = ssh_lab_factory(4, harness.standin_env_factory)
    common, _cached = _setup(tmp_path, lab)
    odd = _site_file(lab.hosts[3])
    odd.write_text(odd.read_text().replace("LIMITS", "LIMITS2 = 1\nLIMITS"))
    cold = {"VPATCH_NO_CACHE": "1"}
    res = vpatch("apply", *common, "--json", "--canary", "1", "--parallel", "1", env=cold)
    # canary: inspect, commit; h2, h3: one each; h4 (hand-edited) refused from its answer
    assert _counts(res) == (2 + 1 + 1 + 1, 2), res.doc["stats"]
    outcomes = [h["patches"][0]["outcome"] for h in res.doc["hosts"]]
    assert outcomes == ["applied", "applied", "applied", "modified"], outcomes
    assert _site_file(lab.hosts[1]).read_bytes() == _site_file(lab.hosts[0]).read_bytes()
    assert not (tmp_path / "cache").exists()


def test_a_cache_that_lies_never_decides_a_write(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """The cache is the controller user's, but nothing in it is trusted: here every stored
    answer claims the file holds other code (text and sha256 both changed, so each answer is
    self-consistent). The guess made on it does not match the host's fingerprint; the host is
    planned from its real answer and gets the real edit."""
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    common, env = _setup(tmp_path, lab)
    _run("apply", common, env)
    _run("rollback", common, env)
    pristine = _site_file(lab.hosts[0]).read_text()
    hosts_dir = tmp_path / "cache" / "hosts"
    # the host's one bucket file; in it, the host's answers to the apply's own request
    [entry] = hosts_dir.glob("*.json")
    bucket = json.loads(entry.read_text())
    [(host, text)] = bucket["hosts"].items()
    doc = json.loads(text)
    [asked] = [e for e in doc["entries"] if e["answers"][0]["packages"]]
    lie = pristine.replace('"qwen",', '"qwen",\n            "attacker",')
    lie_sha = hashlib.sha256(lie.encode()).hexdigest()
    (hosts_dir / "texts" / lie_sha).write_text(lie)
    for answer in asked["answers"]:
        for pkg in answer["packages"].values():
            for info in pkg["files"].values():
                info["sha256"], info["text"] = lie_sha, "@" + lie_sha
    bucket["hosts"][host] = json.dumps(doc)
    entry.write_text(json.dumps(bucket))

    res = _run("apply", common, env)
    assert _counts(res) == (2, 0)  # planned from the host's own answer
    text = _site_file(lab.hosts[0]).read_text()
    assert '"kimi_k2",' in text and "attacker" not in text
    # A stored text that is not what its name says makes its answer no guess at all.
    for stored in (hosts_dir / "texts").iterdir():
        stored.write_text(lie)
    back = _run("rollback", common, env)
    assert _counts(back) == (2, 0)
    assert _site_file(lab.hosts[0]).read_text() == pristine
