"""The recipes of docs/monitoring.md, read from the page itself, checked by the tools that will
read them and run against real sshd hosts.

The systemd units pass `systemd-analyze verify`; the service's `ExecStart=` and the cron
line's command run with only the paths swapped (vpatch, the inventory, the textfile; the
lab's hosts are reached through its own ssh_config, one `--ssh-config` added), and the
textfile they write parses and passes `promtool check metrics`. The alerting rules pass
`promtool check rules`, name exactly the states monitor.NAGIOS ranks CRITICAL, WARNING and
UNKNOWN, and under `promtool test rules` fire on that real textfile for the hosts and states
it holds. The Nagios definitions pass Nagios Core's `nagios4 -v`, and the command's
`command_line` runs with its macros filled in as Nagios fills them; the Icinga 2 object's
command line (no Icinga 2 here to validate the object) runs too.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from patcher.plan import monitor
from tests import sshd as harness
from tests.conftest import REPO, VPATCH, vpatch
from tests.envs import site_packages
from tests.support import debtools
from tests.support.hooklab import recipe
from tests.support.standin_specs import REL, SPEC_A, write

DOC = REPO / "docs" / "monitoring.md"
DOC_VPATCH = "/opt/vpatch/bin/vpatch"
DOC_INVENTORY = "/etc/vpatch/hosts.toml"
DOC_TEXTFILE = "/var/lib/prometheus/node-exporter/vpatch.prom"
PY = "/root/ml-env/bin/python"


def _exec_start(name: str) -> list[str]:
    """The `ExecStart=` of a unit recipe, split as systemd splits it (no quotes here)."""
    [line] = [ln for ln in recipe(name, DOC).splitlines() if ln.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


Done = subprocess.CompletedProcess[str]


def _run(argv: list[str], paths: dict[str, str], ssh_config: Path) -> Done:
    """The doc's command line here: vpatch as the tests run it, the paths mapped, the lab's
    ssh_config added."""
    assert argv[0] == DOC_VPATCH, argv
    here = [*VPATCH, *(paths.get(a, a) for a in argv[1:]), "--ssh-config", str(ssh_config)]
    return subprocess.run(here, capture_output=True, text=True, cwd=REPO, timeout=600)


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """systemd's own reading of the units: nothing to say (its exit status stays 0 for a value
    it ignores, so its words are checked too; the control shows it has some)."""
    vpatch_exe = REPO / ".venv" / "bin" / "vpatch"  # an executable for ExecStart=
    for name in ("textfile-service", "textfile-timer"):
        text = recipe(name, DOC).replace(DOC_VPATCH, str(vpatch_exe))
        first = text.splitlines()[0]
        assert first.startswith("# /etc/systemd/system/vpatch-textfile.")
        (tmp_path / first.rpartition("/")[2]).write_text(text + "\n")
    units = [str(tmp_path / "vpatch-textfile.service"), str(tmp_path / "vpatch-textfile.timer")]
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    broken = Path(units[0])
    broken.write_text(broken.read_text().replace("Type=oneshot", "Type=oneshoot"))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True
    )
    assert "oneshoot" in done.stderr, done.stderr
    svc = recipe("textfile-service", DOC)
    assert "SuccessExitStatus=1" in svc and "-o " + DOC_TEXTFILE in svc


def _rules() -> dict[str, Any]:
    rules: dict[str, Any] = yaml.safe_load(recipe("alert-rules", DOC))
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"]}


def test_alert_rules_pass_promtool_and_name_the_nagios_ranks(tmp_path: Path) -> None:
    path = tmp_path / "vpatch.yml"
    path.write_text(recipe("alert-rules", DOC) + "\n")
    code, said = debtools.promtool("check", "rules", path)
    assert code == 0 and "SUCCESS: 4 rules found" in said, said
    broken = tmp_path / "broken.yml"
    broken.write_text(path.read_text().replace("== 1", "== = 1", 1))
    assert debtools.promtool("check", "rules", broken)[0] != 0  # the control
    states = {
        name: set(re.search(r'state=~"([^"]+)"', rule["expr"])[1].split("|"))  # type: ignore[index]
        for name, rule in _rules().items()
        if "vpatch_host_state" in rule["expr"]
    }
    ranked = {
        code: {s for s in monitor.HOST_STATES if monitor.NAGIOS[s] == code} for code in (1, 2, 3)
    }
    assert states == {
        "VpatchPatchBroken": ranked[2],
        "VpatchPatchNeedsAttention": ranked[1],
        "VpatchStateUnknown": ranked[3],
    }


def _fill(template: str, labels: dict[str, str]) -> str:
    """`{{ $labels.X }}` filled in, as Prometheus fills an annotation."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], template)


def _expected_alerts(series: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """What each rule must fire at 40 minutes on these vpatch_host_state series (labels by
    series text; value 1 only) and a textfile last written at time 0: the rule's labels and
    annotations with `{{ $labels.X }}` filled in, as Prometheus fills them."""
    tests = []
    for name, rule in _rules().items():
        pattern = re.search(r'state=~"([^"]+)"', rule["expr"])
        if pattern:
            hits = [s for s in series.values() if re.fullmatch(pattern[1], s["state"])]
        else:  # the staleness rule
            hits = [{"file": DOC_TEXTFILE, "instance": "monitoring:9100"}]
        alerts = []
        for labels in hits:
            notes = {k: _fill(v, labels) for k, v in rule["annotations"].items()}
            alerts.append({"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": notes})
        tests.append({"eval_time": "40m", "alertname": name, "exp_alerts": alerts})
    return tests


def _inventory(tmp_path: Path, lab: harness.SshLab) -> Path:
    lines = [f"[defaults]\npython = '{PY}'\n"]
    lines += [f"[[host]]\nname = '{h.name}'\naddress = '{h.name}'\n" for h in lab.hosts]
    path = tmp_path / "hosts.toml"
    path.write_text("\n".join(lines))
    return path


def test_recipes_run_on_a_fleet(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    """Three real hosts: applied, drifted (a hand edit), unreachable (sshd stopped)."""
    lab = ssh_lab_factory(3, harness.standin_env_factory)
    h1, h2, h3 = lab.hosts
    spec = write(tmp_path, "a.toml", SPEC_A)
    for h in (h1, h2):
        done = vpatch("apply", spec, "--host", h.name, "--ssh-config", lab.ssh_config,
                      "--python", PY, "--level", "static")  # fmt: skip
        assert done.code == 0, done.err
    edited = site_packages(h2.home / "ml-env") / REL
    edited.write_text(edited.read_text() + "# a hand edit\n")
    h3.stop()
    inventory = _inventory(tmp_path, lab)
    textfile = tmp_path / "vpatch.prom"
    paths = {DOC_INVENTORY: str(inventory), DOC_TEXTFILE: str(textfile)}

    # the timer's service, then the cron line: the same textfile
    service = _run(_exec_start("textfile-service"), paths, lab.ssh_config)
    assert service.returncode == 1 and service.stdout == "", service.stderr  # SuccessExitStatus
    text = textfile.read_text()
    textfile.unlink()
    cron = recipe("cron", DOC).split()
    assert cron[:6] == ["*/5", "*", "*", "*", "*", "root"]
    assert _run(cron[6:], paths, lab.ssh_config).returncode == 1
    assert textfile.read_text() == text
    assert debtools.promtool("check", "metrics", text=text) == (0, "")
    series: dict[str, dict[str, str]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vpatch_host_state" and s.value == 1:
                series[f"{s.name}{{host={s.labels['host']!r}}}"] = dict(s.labels)
    assert sorted((v["host"], v["state"]) for v in series.values()) == [
        (h1.name, "ok"), (h2.name, "drifted"), (h3.name, "unreachable")
    ]  # fmt: skip

    # the rules on that textfile: every series it holds, constant for an hour
    rules = tmp_path / "vpatch.yml"
    rules.write_text(recipe("alert-rules", DOC) + "\n")
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    inputs = [
        {"series": ln.rpartition(" ")[0], "values": f"{ln.rpartition(' ')[2]}x60"} for ln in lines
    ]
    mtime = f'node_textfile_mtime_seconds{{file="{DOC_TEXTFILE}",instance="monitoring:9100"}}'
    inputs.append({"series": mtime, "values": "0x60"})
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs,
                   "alert_rule_test": _expected_alerts(series)}],
    }  # fmt: skip
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    code, said = debtools.promtool("test", "rules", tmp_path / "test.yml")
    assert code == 0 and "SUCCESS" in said, said

    # Nagios: the definitions pass its pre-flight check; the command line as it fills it
    objects = recipe("nagios", DOC)
    code, said = debtools.nagios_verify(objects, tmp_path / "nagios")
    assert code == 0 and "Error" not in said, said
    code, _ = debtools.nagios_verify(objects.replace("check_vpatch!", "check_vpatc!"),
                                     tmp_path / "broken")  # fmt: skip
    assert code != 0  # the control
    [line] = re.findall(r"command_line\s+(.+)", objects)
    [arg1] = re.findall(r"check_command\s+check_vpatch!(.+)", objects)
    check = _run(shlex.split(line.replace("$ARG1$", arg1)), paths, lab.ssh_config)
    assert check.returncode == 2 and check.stderr == "", check.stderr
    assert check.stdout.startswith("VPATCH CRITICAL - 3 hosts: 1 drifted (h2), 1 unreachable")

    # Icinga 2: its command array, the inventory argument after it
    icinga = recipe("icinga", DOC)
    command = re.search(r"command = \[(.*)\]", icinga)[1]  # type: ignore[index]
    argv = [w.strip().strip('"') for w in command.split(",")]
    [inv] = re.findall(r'vars\.vpatch_inventory = "(.+)"', icinga)
    again = _run([*argv, "--inventory", inv], paths, lab.ssh_config)
    assert (again.returncode, again.stdout) == (2, check.stdout)
