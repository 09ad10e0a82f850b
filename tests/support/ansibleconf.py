"""ansible-core's own inventories, read by vpatch's built-in reader and by `ansible-inventory`.

The corpus is ansible-core's sdist, fetched at test time with pip (the user's pip configuration)
and cached under envs.CACHE/sdists, never committed: every file of its
`test/integration/targets/inventory*` targets that is not a script, a plugin or a TOML file, plus
the `ini` and `yaml` inventory plugins' EXAMPLES (the INI one split at its `# Example N` lines,
as a reader would copy one). Each is read by

- `ansible-inventory -i FILE --list` from the cached ansible-core venv (tests/scale.py), with
  only the `yaml` and `ini` plugins enabled (the formats vpatch reads itself) and an unparsed
  source an error, so "Ansible reads it" means those plugins read it; and
- vpatch's reader without ansible-inventory (patcher.inventory.ansible.read with no exe).

`compare` says, per file: hosts (order), groups, the variables vpatch reads, and the targets
vpatch makes of them (address, port, user...) or the refusal, for both readers.
"""

from __future__ import annotations

import ast
import fcntl
import json
import os
import re
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patcher.errors import SpecError
from patcher.inventory import ansible
from tests import envs, scale

VERSION = scale.ANSIBLE_CORE.split("==")[1]  # one ansible-core in play: the bench's pin
_SKIP_NAMES = {"aliases", "runme.sh", ".keep"}
_SKIP_SUFFIXES = {".py", ".sh", ".toml"}  # scripts, plugins; TOML is vpatch's own hosts.toml
_SKIP_DIRS = {"tasks", "plugins", "inventory_plugins", "doc_fragments", "cache"}
_EXAMPLE = re.compile(r"^# Example \d+", re.MULTILINE)


def sdist() -> Path:
    """ansible-core's sdist (`pip download --no-binary :all:`), downloaded once."""
    dest = envs.CACHE / "sdists"
    dest.mkdir(parents=True, exist_ok=True)
    pattern = f"ansible_core-{VERSION}.tar.gz"
    with open(envs.CACHE / ".lock-sdists", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / pattern).exists():
            subprocess.run(
                [
                    *(sys.executable, "-m", "pip", "download", "-q", "--no-deps"),
                    *("--no-binary", ":all:", "-d", str(dest), f"ansible-core=={VERSION}"),
                ],
                check=True,
                capture_output=True,
            )
    found = dest / pattern
    if not found.exists():
        raise FileNotFoundError(f"pip downloaded no {pattern}")
    return found


def corpus(dest: Path) -> list[Path]:
    """The inventories of the sdist, extracted under dest (vars dirs kept beside them)."""
    prefix = f"ansible_core-{VERSION}/"
    targets = prefix + "test/integration/targets/"
    plugins = {prefix + f"lib/ansible/plugins/inventory/{p}.py": p for p in ("ini", "yaml")}
    out: list[Path] = []
    with tarfile.open(sdist()) as tar:
        for member in tar.getmembers():
            name = member.name
            if name in plugins:
                out += _examples(tar, member, plugins[name], dest / "examples")
            if not name.startswith(targets + "inventory") or not member.isfile():
                continue
            rel = Path(name[len(targets) :])
            if (
                rel.name in _SKIP_NAMES
                or rel.suffix in _SKIP_SUFFIXES
                or set(rel.parts[1:-1]) & _SKIP_DIRS
            ):
                continue
            path = dest / "targets" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member)
            assert data is not None
            path.write_bytes(data.read())
            if not set(rel.parts) & {"group_vars", "host_vars"}:
                out.append(path)
    return sorted(out)


def _examples(tar: tarfile.TarFile, member: tarfile.TarInfo, plugin: str, dest: Path) -> list[Path]:
    """The plugin's EXAMPLES string (read from its source, not imported)."""
    data = tar.extractfile(member)
    assert data is not None
    tree = ast.parse(data.read())
    [text] = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "EXAMPLES" for t in node.targets)
        and isinstance(node.value, ast.Constant)
    ]
    # The INI examples as one file too (Ansible refuses it: Example 2's hosts land in a :vars
    # section), and each `# Example N` alone, as a reader would copy one.
    parts = [text] if plugin == "yaml" else [text, *_EXAMPLE.split(text)[1:]]
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for i, part in enumerate(parts, 1):
        name = (
            f"{plugin}-example-{i - (plugin == 'ini')}" if i > 1 or plugin == "yaml" else "ini-all"
        )
        path = dest / (name + (".yml" if plugin == "yaml" else ".ini"))
        path.write_text(part)
        out.append(path)
    return out


@dataclass
class Read:
    """One reader's outcome: hosts (name, groups sorted, the vars vpatch reads) and targets,
    or the error."""

    hosts: list[tuple[str, list[str], dict[str, Any]]] | None
    targets: list[dict[str, Any]] | str | None
    error: str | None = None
    warnings: str = ""


def _outcome(path: Path, found: list[tuple[str, dict[str, Any], list[str]]]) -> Read:
    hosts = [
        (name, sorted(groups), {k: values[k] for k in ansible.READ_VARS if k in values})
        for name, values, groups in found
    ]
    try:
        targets: list[dict[str, Any]] | str = ansible.entries(str(path), found)
    except SpecError as exc:
        targets = exc.message.replace(str(path), "FILE")
    return Read(hosts, targets)


def by_vpatch(path: Path) -> Read:
    try:
        found = ansible.read(str(path), path.read_text(), None)
    except SpecError as exc:
        return Read(None, None, f"{exc.message} / hint: {exc.hint}")
    return _outcome(path, found)


def by_ansible(path: Path, work: Path) -> Read:
    """`ansible-inventory --list` with only the yaml and ini plugins, from an empty cwd."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "ansible.cfg").write_text("")
    env = scale.child_env(
        {
            "ANSIBLE_CONFIG": str(work / "ansible.cfg"),
            "ANSIBLE_HOME": str(work / "home"),
            "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
            "ANSIBLE_INVENTORY_ENABLED": "yaml,ini",
            "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
            "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true",
            "PYTHONWARNINGS": "ignore",
        }
    )
    exe = str(scale.ansible_core_bin() / "ansible-inventory")
    ran = scale.run([exe, "-i", str(path), "--list"], env, cwd=work, timeout=300)
    if ran.code != 0:
        # Ansible's own refusal of the file, not a failure to run it: the test must not pass
        # on an ansible-inventory that does not start.
        assert "failed to parse inventory source" in ran.err, ran.err[-2000:]
        return Read(None, None, ran.err.strip()[-300:])
    tree = ansible.from_list(json.loads(ran.out))
    groups = sorted(g for g in tree.groups if g not in ("all", "ungrouped"))
    found = [
        (name, values, [g for g in groups if name in tree.members(g)])
        for name, values in tree.hosts.items()
    ]
    read = _outcome(path, found)
    read.warnings = ran.err
    return read


@dataclass
class Case:
    rel: str
    ansible: Read
    vpatch: Read

    @property
    def readable(self) -> bool:
        return self.ansible.hosts is not None

    @property
    def same(self) -> bool:
        """Both read it alike (hosts in order, groups, vars, targets), or both refuse it."""
        if not self.readable:
            return self.vpatch.hosts is None
        return (self.ansible.hosts, self.ansible.targets) == (
            self.vpatch.hosts,
            self.vpatch.targets,
        )


def compare(dest: Path, files: list[Path] | None = None) -> list[Case]:
    """Each file (default: the sdist's corpus, extracted under dest) read by both readers."""
    files = corpus(dest) if files is None else files
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        theirs = list(
            pool.map(lambda p: by_ansible(p[1], dest / "work" / str(p[0])), enumerate(files))
        )
    return [
        Case(str(path.relative_to(dest)), read, by_vpatch(path))
        for path, read in zip(files, theirs, strict=True)
    ]


# ----------------------------------------------------------------------------------------------
# Golden cases: tests/cases/ansible_inventory/NAME.{ini,yml} with NAME.json beside each,
#   {"vpatch": {"hosts": [[name, groups, {var: value}]], "targets": [...]} or {"error": TEXT},
#    "ansible": "same" | "refuses" | "deliberate: WHY"}
# "same": ansible-inventory reads what vpatch reads; "refuses": both refuse the file; a
# deliberate divergence names why vpatch refuses what Ansible reads (docs/inventory.md says it too).

CASES = Path(__file__).resolve().parent.parent / "cases" / "ansible_inventory"
_SKIPPED_GROUP = (
    "Ansible skips a top-level YAML group that is not a mapping, with a warning; vpatch refuses "
    "the file rather than run on fewer hosts than it names"
)
_SKIPPED_KEY = (
    "Ansible skips a YAML group's key other than hosts, vars and children, with a warning; "
    "vpatch refuses the file rather than drop the hosts under a mistyped key"
)
# Where vpatch refuses what ansible-inventory reads, on purpose: file -> why (docs/inventory.md).
DELIBERATE = {
    "yaml_group_list.yml": _SKIPPED_GROUP,
    "yaml_unknown_key.yml": _SKIPPED_KEY,
    "targets/inventory/1/vars.yml": _SKIPPED_GROUP,  # `my: var`: a vars file, read as groups
}


def cases() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.suffix != ".json")


def golden(case: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(case.with_suffix(".json").read_text())
    return data


def as_doc(read: Read, path: Path) -> dict[str, Any]:
    """A reading as the golden file writes it (JSON's lists for tuples, FILE for the path)."""
    if read.hosts is None:
        return {"error": (read.error or "").replace(str(path), "FILE")}
    doc: dict[str, Any] = json.loads(json.dumps({"hosts": read.hosts, "targets": read.targets}))
    return doc


def write_golden(work: Path) -> None:
    """(Re)write every case's NAME.json from today's readings: review the diff before
    committing it."""
    for case in cases():
        theirs, ours = by_ansible(case, work / case.name), by_vpatch(case)
        if theirs.hosts is None:
            verdict = "refuses"
        elif as_doc(theirs, case) == as_doc(ours, case):
            verdict = "same"
        else:
            verdict = "deliberate: " + DELIBERATE.get(case.name, "UNEXPLAINED")
        case.with_suffix(".json").write_text(_dump({"ansible": verdict, **as_doc(ours, case)}))


def _dump(doc: dict[str, Any]) -> str:
    """One key a line, one host or target a line: reviewable diffs."""
    lines = []
    for key, value in doc.items():
        if isinstance(value, list):
            items = ",\n".join("  " + json.dumps(v) for v in value)
            lines.append(f"{json.dumps(key)}: [\n{items}\n]" if value else f'"{key}": []')
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


if __name__ == "__main__":
    import tempfile

    write_golden(Path(tempfile.mkdtemp(prefix="vpatch-golden-")))
