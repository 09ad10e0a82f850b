"""`--inventory` given an Ansible inventory (INI or YAML) instead of a hosts.toml.

A fleet that already has an Ansible inventory should not need a second list of the same hosts.
With `ansible-inventory` on PATH vpatch asks it (`ansible-inventory -i FILE --list`: every
format and plugin Ansible knows, variables merged as Ansible merges them). Without it, INI and
YAML inventories are read as ansible-core's own plugins read them (patcher.inventory.ansiblefiles,
host ranges and `NAME:PORT` by patcher.inventory.hostrange), merged in Ansible's order
(inventory `all` vars, then each group's by depth, `ansible_group_priority` and name, then
`group_vars/all`, `group_vars/GROUP`, the host's own vars, `host_vars/HOST`), with the vars
dirs: `group_vars/` and `host_vars/` next to the inventory file: `NAME`, `NAME.yml`,
`NAME.yaml` or `NAME.json` (the first that exists), or a directory `NAME/` whose files are read
in sorted order, subdirectories included, as Ansible's host_group_vars plugin reads them.

Variables (for an alias pair, the `ansible_ssh_*` one wins, as in Ansible's ssh connection):

    ansible_host, ansible_ssh_host          address (default: the inventory name)
    ansible_port, ansible_ssh_port          port
    ansible_user, ansible_ssh_user          user
    ansible_python_interpreter              python (the environment to patch; `auto*`: unset)
    ansible_ssh_private_key_file,
      ansible_private_key_file              identity
    ansible_connection                      `local`: this machine; ssh, smart, paramiko: SSH
                                            by the run's client (--ssh-client); docker,
                                            community.docker.docker, podman,
                                            containers.podman.podman: a container of this
                                            machine's engine (transport docker/podman), named
                                            by ansible_docker_host/ansible_podman_host, else
                                            ansible_host, else the inventory name, its exec
                                            user ansible_docker_user/ansible_podman_user,
                                            else ansible_user
    ansible_connection                      kubernetes.core.kubectl, community.kubernetes.kubectl:
                                            a pod through this machine's kubectl (transport
                                            kubectl), named by ansible_kubectl_pod, else
                                            ansible_host, else the inventory name, in
                                            ansible_kubectl_namespace, its container
                                            ansible_kubectl_container, ansible_kubectl_context
                                            and ansible_kubectl_kubeconfig as kubectl's
    ansible_become                          sudo (`sudo -n`)
    ansible_become_user, ansible_sudo_user  sudo_user (`sudo -n -u USER`)
    ansible_become_method                   sudo only
    vpatch_restart                          restart (`vpatch rollout`'s restart command)
    vpatch_health_url                       health (its --health URL for this host)
    vpatch_metrics_url                      metrics (its --metrics URL for this host)
    vpatch_transport                        transport (this host's kind: openssh, paramiko...)

Whatever would make vpatch reach another host, as another user or with other rights than
Ansible would is refused (exit 2, naming the host and the variable) rather than guessed: a
template (`{{ ... }}`) in any of the variables above, another connection plugin, another become
method or become flags/exe, ssh argument variables, an engine's extra arguments or executable
(`ansible_docker_extra_args`: `-H` would reach another daemon; kubectl's server, token,
credentials and extra arguments), a vault-encrypted vars file. Only
`ansible_connection=local` makes a host this machine: a host NAMED `local` is an SSH host.

Groups are every group a host is in, directly or through `children`, except `all` and
`ungrouped`; hosts come in the order `ansible-inventory --list` gives them (`all`'s groups in
turn, a group's own hosts before its children's), with either reader.
"""

from __future__ import annotations

import decimal
import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from patcher import isolate
from patcher.errors import SpecError
from patcher.inventory.ansiblefiles import HINT, Tree, Unsafe, ini, yaml_tree

# field -> the variables that set it, the winner first (Ansible's play context takes the
# first one set: `ansible_ssh_host` over `ansible_host`, and so on).
_VARS: dict[str, tuple[str, ...]] = {
    "address": ("ansible_ssh_host", "ansible_host"),
    "port": ("ansible_ssh_port", "ansible_port"),
    "user": ("ansible_ssh_user", "ansible_user"),
    "python": ("ansible_python_interpreter",),
    "identity": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
    "sudo": ("ansible_become",),
    "restart": ("vpatch_restart",),
    "health": ("vpatch_health_url",),
    "metrics": ("vpatch_metrics_url",),
    "transport": ("vpatch_transport",),
}
# Set both to different users and Ansible's sudo plugin and play context disagree: refused.
_BECOME_USER = ("ansible_become_user", "ansible_sudo_user")
_CONNECTIONS = {
    "local": True,
    "ansible.builtin.local": True,
    "ssh": False,
    "smart": False,
    "paramiko": False,
    "paramiko_ssh": False,
    "ansible.builtin.ssh": False,
    "ansible.builtin.paramiko_ssh": False,
}
# Ansible's container connections -> the engine's kind: the container is `ansible_host` (the
# plugin's own `ansible_docker_host`/`ansible_podman_host` over it), its user `ansible_user`
# (`ansible_docker_user` over it), on this machine's engine.
_ENGINES = {
    "docker": "docker",
    "community.docker.docker": "docker",
    "community.general.docker": "docker",
    "podman": "podman",
    "containers.podman.podman": "podman",
}
_ENGINE_VARS = {"docker": "ansible_docker_", "podman": "ansible_podman_"}
_KUBECTL = {"kubernetes.core.kubectl", "community.kubernetes.kubectl", "kubectl"}
# The kubectl plugin's variables read as kubectl's (pod: over ansible_host, as the plugin does).
_KUBE_VARS = {
    "pod": "ansible_kubectl_pod",
    "container_name": "ansible_kubectl_container",
    "kube_context": "ansible_kubectl_context",
    "kubeconfig": "ansible_kubectl_kubeconfig",
}
_METHODS = {"sudo", "ansible.builtin.sudo"}
# Change how (or where) the connection or the privilege escalation is made; vpatch runs plain
# `ssh` (with ssh_config) and `sudo -n [-u USER]`, so an inventory that sets them is refused.
_UNSUPPORTED = (
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_ssh_args",
    "ansible_become_exe",
    "ansible_become_flags",
    "ansible_sudo_exe",
    "ansible_sudo_flags",
    "ansible_docker_extra_args",
    "ansible_podman_extra_args",
    "ansible_podman_executable",
    *(f"ansible_kubectl_{v}" for v in ("extra_args", "host", "server", "token", "username",
      "password", "cert_file", "key_file", "ssl_ca_cert", "verify_ssl", "validate_certs",
      "local_env_vars")),
)  # fmt: skip
_AUTO_PYTHON = {"auto", "auto_silent", "auto_legacy", "auto_legacy_silent"}
_SKIP_GROUPS = {"all", "ungrouped"}
# Every variable whose value vpatch uses or refuses (what the conformance suite compares).
READ_VARS = (
    *(v for names in _VARS.values() for v in names),
    *_BECOME_USER,
    *(f"{p}{v}" for p in _ENGINE_VARS.values() for v in ("host", "user")),
    *_KUBE_VARS.values(),
    "ansible_kubectl_namespace",
    "ansible_connection",
    "ansible_become_method",
    *_UNSUPPORTED,
)
_VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")  # Ansible's YAML_FILENAME_EXTENSIONS + bare
_YAML_SUFFIXES = ("", ".yml", ".yaml", ".json")  # the yaml inventory plugin's (and no suffix)


def _load_yaml(text: str, where: str) -> Any:
    """YAML with PyYAML's safe loader: the parser (and YAML 1.1 resolution: `yes` is true)
    Ansible itself reads inventories and vars files with."""
    try:
        import yaml
    except ImportError:
        raise SpecError(
            f"{where}: reading a YAML inventory needs PyYAML (or ansible-inventory on PATH)",
            "install vpatch with its dependencies (`pipx install vpatch`), or install ansible-core",
        ) from None
    try:
        return yaml.load(text, Loader=_loader(yaml))  # a SafeLoader (plus two tags)
    except yaml.YAMLError as exc:
        raise _YamlError(str(exc).replace("\n", " ")) from None


@functools.cache
def _loader(yaml: Any) -> Any:
    """PyYAML's SafeLoader plus Ansible's two tags: `!unsafe` (text Ansible never templates:
    Unsafe) and `!vault` (an encrypted value: {"__ansible_vault": TEXT}, as ansible-inventory
    prints it, refused where vpatch reads it)."""

    class Loader(yaml.SafeLoader):  # type: ignore[misc]
        pass

    def unsafe(loader: Any, node: Any) -> Any:
        if isinstance(node, yaml.ScalarNode):
            return Unsafe(loader.construct_scalar(node))
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_mapping(node, deep=True)

    def vault(loader: Any, node: Any) -> Any:
        return {"__ansible_vault": loader.construct_scalar(node)}

    Loader.add_constructor("!unsafe", unsafe)
    Loader.add_constructor("!vault", vault)
    return Loader


class _YamlError(Exception):
    pass


def _vars_files(base: Path, name: str) -> list[Path]:
    """The files Ansible's host_group_vars plugin reads for `name` under `base` (group_vars/
    or host_vars/), in its order: the first of NAME, NAME.yml, NAME.yaml, NAME.json that
    exists; a directory is read whole, sorted, hidden and `~` files skipped, subdirectories
    without an extension walked."""
    for ext in _VARS_EXTENSIONS:
        full = base / (name + ext)
        if full.is_dir():
            return _dir_files(full)
        if full.exists():
            return [full]
    return []


def _dir_files(path: Path) -> list[Path]:
    found: list[Path] = []
    for child in sorted(path.iterdir(), key=lambda p: p.name):
        if child.name.startswith(".") or child.name.endswith("~"):
            continue
        ext = child.suffix
        if child.is_dir() and not ext:
            found += _dir_files(child)
        elif child.is_file() and ext in _VARS_EXTENSIONS:
            found.append(child)
    return found


def _vars_of(base: Path, name: str) -> dict[str, Any]:
    """One entity's vars from its group_vars/ or host_vars/ files (later files win)."""
    out: dict[str, Any] = {}
    for file in _vars_files(base, name):
        try:
            text = file.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"{file}: cannot read vars file ({exc})", HINT) from None
        if text.lstrip().startswith("$ANSIBLE_VAULT"):
            raise SpecError(
                f"{file}: a vault-encrypted vars file needs ansible-inventory on PATH", HINT
            )
        try:
            data = _load_yaml(text, str(file))
        except _YamlError as exc:
            raise SpecError(f"{file}: invalid YAML vars file ({exc})", HINT) from None
        if data is None:
            continue
        if not isinstance(data, dict):
            raise SpecError(f"{file}: a vars file is a mapping of variables", HINT)
        out.update({str(k): v for k, v in data.items()})
    return out


def _ansible_inventory(exe: str, path: str) -> Tree:
    """What `ansible-inventory --list` resolves (variables already merged per host)."""
    # process-start: ansible-inventory, the operator's program from PATH (a Python script: its own
    # directory, not the cwd, is its sys.path[0]), without PYTHON* variables; it keeps the cwd,
    # where Ansible reads ./ansible.cfg by design (Ansible itself refuses a world-writable one).
    done = subprocess.run(
        [exe, "-i", path, "--list"],
        env=isolate.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]
        raise SpecError(f"{path}: ansible-inventory cannot read it: {why}", HINT)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        raise SpecError(f"{path}: ansible-inventory printed no JSON", HINT) from None
    return from_list(doc)


def from_list(doc: dict[str, Any]) -> Tree:
    """The groups and merged host vars of an `ansible-inventory --list` document; hosts in
    its order (`all`'s children in turn, a group's own hosts before its children's)."""
    tree = Tree()
    hostvars = doc.get("_meta", {}).get("hostvars", {})
    for name, body in doc.items():
        if name == "_meta" or not isinstance(body, dict):
            continue
        tree.group(name)
        for child in body.get("children", []):
            tree.add_child(name, child)
        for host in body.get("hosts", []):
            tree.add_host(name, host, {})
    order = tree.members("all") + [h for h in tree.hosts if h not in tree.members("all")]
    tree.hosts = {h: {k: _trusted(v) for k, v in hostvars.get(h, {}).items()} for h in order}
    return tree


def _trusted(value: Any) -> Any:
    """A value as the inventory wrote it: ansible-inventory prints a string Ansible will never
    template (`!unsafe`, an INI bytes literal) as {"__ansible_unsafe": TEXT}; vpatch templates
    nothing, so it is that TEXT (a vaulted value stays a mapping, refused where it is read)."""
    if isinstance(value, dict) and list(value) == ["__ansible_unsafe"]:
        text = value["__ansible_unsafe"]
        return Unsafe(text) if isinstance(text, str) else text
    return value


def _merged(tree: Tree, base: Path) -> dict[str, dict[str, Any]]:
    """Each host's variables, merged in Ansible's default order (VARIABLE_PRECEDENCE)."""
    group_vars = {g: _vars_of(base / "group_vars", g) for g in tree.groups if g != "all"}
    all_files = _vars_of(base / "group_vars", "all")
    out = {}
    for host in tree.order():
        own = tree.hosts[host]
        mine = [g for g in tree.groups if g != "all" and host in tree.members(g)]
        mine.sort(key=lambda g: (tree.depth(g), tree.priority(g), g))
        values: dict[str, Any] = dict(tree.group("all")[2])
        for g in mine:
            values.update(tree.groups[g][2])
        values.update(all_files)
        for g in mine:
            values.update(group_vars[g])
        values.update(own)
        values.update(_vars_of(base / "host_vars", host))
        out[host] = values
    return out


def _refuse(path: str, host: str, what: str, hint: str = HINT) -> SpecError:
    return SpecError(f"{path}: host {host!r}: {what}", hint)


def _scalar(path: str, host: str, var: str, value: Any) -> Any:
    """A value vpatch can use as Ansible would: no template (an Unsafe text is none: Ansible
    never renders it), no vault blob, no structure."""
    template = isinstance(value, str) and ("{{" in value or "{%" in value)
    if template and not isinstance(value, Unsafe):
        raise _refuse(
            path,
            host,
            f"{var} is a template ({value[:80]!r}): vpatch renders no Jinja",
            "set a literal value in the inventory, or run the vpatch.core Ansible collection, "
            "which Ansible templates for",
        )
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise _refuse(path, host, f"{var} is not a plain value (vaulted or structured)")
    return value


def _port(value: Any) -> Any:
    """A port as Ansible's `integer` option type takes it: 22, 22.0 and "22.0" are 22 (a value
    of no fraction, read through Decimal); anything else is left for the inventory check to
    refuse. A boolean too: Ansible would connect to port 1 for `True`."""
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, (float, str)):
        try:
            number = decimal.Decimal(value)
            if number == int(number):
                return int(number)
        except (decimal.DecimalException, ValueError, OverflowError):
            pass
    return value


def _entry(path: str, name: str, values: dict[str, Any]) -> dict[str, Any]:
    """One host's `[[host]]` table (plus `local`: only from ansible_connection=local)."""
    entry: dict[str, Any] = {"name": name, "address": name}
    for field, names in _VARS.items():
        for var in names:
            value = _scalar(path, name, var, values.get(var))
            if value is not None:
                if field == "port":
                    value = _port(value)
                elif field == "python" and str(value) in _AUTO_PYTHON:
                    break  # interpreter discovery: what vpatch's default python3 is
                entry[field] = str(value) if field in ("address", "user") else value
                break
    connection = _scalar(path, name, "ansible_connection", values.get("ansible_connection"))
    if connection is not None and str(connection) in _ENGINES:
        _container(path, name, values, entry, _ENGINES[str(connection)])
        connection = "local"
    elif connection is not None and str(connection) in _KUBECTL:
        _pod(path, name, values, entry)
        connection = "local"
    if connection is not None and str(connection) not in _CONNECTIONS:
        raise _refuse(
            path,
            host=name,
            what=f"ansible_connection={connection}: vpatch connects by ssh or locally only",
            hint="run the vpatch.core Ansible collection for other connection plugins",
        )
    entry["local"] = bool(connection is not None and _CONNECTIONS[str(connection)])
    _refuse_unsupported(path, name, values)
    users = {_scalar(path, name, v, values.get(v)) for v in _BECOME_USER} - {None}
    method = _scalar(path, name, "ansible_become_method", values.get("ansible_become_method"))
    if len(users) > 1:
        raise _refuse(path, name, f"ansible_become_user and ansible_sudo_user differ: {users}")
    if method is not None and str(method) not in _METHODS:
        raise _refuse(
            path,
            name,
            f"ansible_become_method={method}: vpatch becomes another user with sudo only",
            "set ansible_become_method=sudo, or run the vpatch.core Ansible collection",
        )
    if users:
        entry["sudo_user"] = str(users.pop())
    return entry


def _refuse_unsupported(path: str, name: str, values: dict[str, Any]) -> None:
    """Refuse the variables that change how (or where) the connection is made."""
    for var in _UNSUPPORTED:
        if values.get(var) is not None and var.startswith(("ansible_docker", "ansible_podman")):
            raise _refuse(
                path,
                name,
                f"{var} is set: vpatch runs plain `{var.split('_')[1]} exec`",
                "point the engine's CLI at its daemon in vpatch's environment (DOCKER_HOST, "
                "CONTAINER_HOST), or run the vpatch.core Ansible collection",
            )
        if values.get(var) is not None and var.startswith("ansible_kubectl"):
            raise _refuse(
                path,
                name,
                f"{var} is set: vpatch runs plain `kubectl exec` with a kubeconfig and context",
                "put the cluster's server and credentials in a kubeconfig "
                "(ansible_kubectl_kubeconfig, ansible_kubectl_context)",
            )
        if values.get(var) is not None:
            raise _refuse(
                path,
                name,
                f"{var} is set: vpatch runs plain `ssh` and `sudo -n`",
                "put ssh options in ~/.ssh/config (vpatch reads it through `ssh -G`), or run "
                "the vpatch.core Ansible collection",
            )


def _container(
    path: str, name: str, values: dict[str, Any], entry: dict[str, Any], engine: str
) -> None:
    """A host Ansible reaches with a container connection: the container named as that
    plugin reads it, on this machine's engine (its address and user are the container's)."""
    own = _ENGINE_VARS[engine]
    box = _scalar(path, name, f"{own}host", values.get(f"{own}host"))
    box = box or _scalar(path, name, "ansible_host", values.get("ansible_host")) or name
    user = _scalar(path, name, f"{own}user", values.get(f"{own}user"))
    user = user or _scalar(path, name, "ansible_user", values.get("ansible_user"))
    entry.pop("user", None)
    entry.pop("port", None)  # a container has no port to reach; the ssh plugin's alone
    entry.update(address="local", transport=engine, container=str(box))
    if user is not None:
        entry["container_user"] = str(user)


def _pod(path: str, name: str, values: dict[str, Any], entry: dict[str, Any]) -> None:
    """A host Ansible reaches with the kubectl connection: the pod named as that plugin reads
    it (ansible_kubectl_pod, else ansible_host, else the inventory name), in
    ansible_kubectl_namespace, through this machine's kubectl."""
    got = {f: _scalar(path, name, var, values.get(var)) for f, var in _KUBE_VARS.items()}
    pod = got.pop("pod") or _scalar(path, name, "ansible_host", values.get("ansible_host")) or name
    ns = _scalar(path, name, "ansible_kubectl_namespace", values.get("ansible_kubectl_namespace"))
    for field in ("user", "port"):  # a pod has neither: the ssh plugin's alone
        entry.pop(field, None)
    entry.update(address="local", transport="kubectl", pod=f"{ns}/{pod}" if ns else str(pod))
    entry.update({f: str(v) for f, v in got.items() if v is not None})


def read(path: str, text: str, exe: str | None) -> list[tuple[str, dict[str, Any], list[str]]]:
    """Each host of the inventory, in order, with its merged variables and its groups (not
    `all`, `ungrouped`): asked of `ansible-inventory` at `exe`, or read here when it is None."""
    if exe is not None:
        tree = _ansible_inventory(exe, path)
        merged = tree.hosts  # ansible-inventory merged group vars and vars dirs already
    else:
        tree = _parse(path, text)
        merged = _merged(tree, Path(path).parent)
    groups = sorted(g for g in tree.groups if g not in _SKIP_GROUPS)  # as ansible-inventory's
    return [
        (name, values, [g for g in groups if name in tree.members(g)])
        for name, values in merged.items()
    ]


def entries(path: str, found: list[tuple[str, dict[str, Any], list[str]]]) -> list[dict[str, Any]]:
    """What `read` found as hosts.toml `[[host]]` tables (validated by the caller), each with
    `local` (True only for ansible_connection=local)."""
    out = []
    for name, values, groups in found:
        entry = _entry(path, name, values)
        if not _truthy(entry.get("sudo", False)):
            entry.pop("sudo_user", None)  # become_user without become: Ansible ignores it
        entry["groups"] = groups
        out.append(entry)
    return out


def hosts(path: str, text: str) -> list[dict[str, Any]]:
    """The inventory's hosts as hosts.toml `[[host]]` tables: by `ansible-inventory` when it is
    on PATH, else by vpatch's own reader."""
    return entries(path, read(path, text, shutil.which("ansible-inventory")))


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def _parse(path: str, text: str) -> Tree:
    """INI or YAML, tried as Ansible tries its plugins: YAML first for a name ending in
    nothing, .yml, .yaml or .json (the yaml plugin's extensions), then INI."""
    if Path(path).suffix not in _YAML_SUFFIXES:
        return ini(text, path)
    try:
        data = _load_yaml(text, path)
    except _YamlError as exc:
        return _ini_or_raise(text, path, exc)
    if isinstance(data, dict):
        return yaml_tree(data, path)
    return ini(text, path)  # empty, or a YAML scalar or list: the yaml plugin gives up


def _ini_or_raise(text: str, path: str, exc: Exception) -> Tree:
    try:
        return ini(text, path)
    except SpecError:
        raise SpecError(f"{path}: neither an INI nor a YAML inventory ({exc})", HINT) from None
