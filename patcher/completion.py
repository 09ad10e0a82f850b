"""`vpatch completion bash|zsh|fish`: shell completion generated from the argparse parser
`vpatch` runs, so a new subcommand, option or choice completes without anyone editing a script.

Completes subcommands, options, choices (`--level`, `hook systemd`...), catalog ids where a
command takes SPEC (asked from `vpatch catalog` at completion time, so $VPATCH_CATALOG and
./patches count), host names for `--host` (the `--inventory` on the line, then ssh_config
`Host` aliases) and groups for `--group` (asked from `vpatch completion --names`), and files
everywhere else. zsh runs the bash function through bashcompinit (indexing written so that
both shells read it: `${a[@]:1:$((n))}`, not `${a[@]:1:n}`, which zsh takes for a modifier).
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
from pathlib import Path

from patcher.clidocs import COMMANDS, subcommands


def _options(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if a.option_strings]


def _positionals(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if not a.option_strings]


def _takes_spec(sub: argparse.ArgumentParser) -> bool:
    return any(a.metavar == "SPEC" for a in _positionals(sub))


def _choices(action: argparse.Action) -> list[str]:
    return [str(c) for c in action.choices or ()]


# Options whose values are names vpatch lists itself (`vpatch completion --names KIND`).
_NAMED = {"--host": "hosts", "--group": "groups"}


def _named(action: argparse.Action) -> str | None:
    return next((_NAMED[o] for o in action.option_strings if o in _NAMED), None)


def bash(parser: argparse.ArgumentParser) -> str:
    subs = subcommands(parser)
    cases = []
    for name, sub in subs.items():
        lines = [f"        {name})"]
        valued = [a for a in _options(sub) if a.nargs != 0]
        named = [a for a in valued if _named(a)]
        chosen = [a for a in valued if a.choices]
        free = [a for a in valued if not a.choices and not _named(a)]
        if valued:
            lines.append('            case "$prev" in')
            for a in named:
                lines.append(f"                {'|'.join(a.option_strings)})")
                lines.append(
                    f'                    COMPREPLY=($(compgen -W "$(_vpatch_names {_named(a)})" '
                    '-- "$cur")); return 0 ;;'
                )
            for a in chosen:
                words = shlex.quote(" ".join(_choices(a)))
                lines.append(f"                {'|'.join(a.option_strings)})")
                lines.append(
                    f'                    COMPREPLY=($(compgen -W {words} -- "$cur")); return 0 ;;'
                )
            if free:  # a value of its own: files, by `complete -o default`
                lines.append(
                    f"                {'|'.join(o for a in free for o in a.option_strings)})"
                )
                lines.append("                    return 0 ;;")
            lines.append("            esac")
        opts = " ".join(o for a in _options(sub) for o in a.option_strings)
        lines.append(f"            opts={shlex.quote(opts)}")
        positional = next((a for a in _positionals(sub) if a.choices), None)
        if positional is not None:
            lines.append(f"            cands={shlex.quote(' '.join(_choices(positional)))}")
        elif _takes_spec(sub):
            lines.append("            cands=$(_vpatch_ids); files=1")
        else:
            lines.append("            files=1")
        lines.append("            ;;")
        cases.append("\n".join(lines))
    commands = shlex.quote(" ".join([*subs, "--help", "--version"]))
    return f"""\
# vpatch completion for bash (`source <(vpatch completion bash)`), generated from vpatch's
# own argument parser.
_vpatch_ids() {{
    command vpatch catalog 2>/dev/null | while read -r id _; do printf '%s\\n' "$id"; done
}}

_vpatch_names() {{
    # hosts or groups, of the --inventory (and --ssh-config) already on the line
    command vpatch completion --names "$1" ${{_vpatch_inv:+--inventory "$_vpatch_inv"}} \\
        ${{_vpatch_cfg:+--ssh-config "$_vpatch_cfg"}} 2>/dev/null
}}

_vpatch() {{
    # $2 and $3 (the word being completed and the one before): what bash and zsh's
    # bashcompinit both pass, whatever their array indexing.
    local cur=$2 prev=$3 cmd="" w last="" opts="" cands="" files=""
    local _vpatch_inv="" _vpatch_cfg=""
    for w in "${{COMP_WORDS[@]:1:$((COMP_CWORD-1))}}"; do
        case $last in
            --inventory) _vpatch_inv=$w ;;
            --ssh-config) _vpatch_cfg=$w ;;
        esac
        case $w in
            --) return 0 ;;  # `vpatch exec SPEC -- CMD`: CMD completes as any command line
            --inventory=*) _vpatch_inv=${{w#--inventory=}} ;;
            --ssh-config=*) _vpatch_cfg=${{w#--ssh-config=}} ;;
            -*) ;;
            *) cmd=${{cmd:-$w}} ;;
        esac
        last=$w
    done
    case $cmd in
        "")
            COMPREPLY=($(compgen -W {commands} -- "$cur")); return 0 ;;
{chr(10).join(cases)}
        *) return 0 ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$cands" -- "$cur"))
        [[ -n $files ]] && COMPREPLY+=($(compgen -f -- "$cur"))
    fi
    return 0
}}

complete -o default -o filenames -F _vpatch vpatch
"""


def zsh(parser: argparse.ArgumentParser) -> str:
    return (
        "# vpatch completion for zsh (`source <(vpatch completion zsh)`): the bash completion,\n"
        "# run by zsh's bashcompinit.\n"
        "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit }\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser)
    )


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_FISH_NAMES = """\
function __vpatch_names
    # hosts or groups, of the --inventory (and --ssh-config) already on the line
    set -l words (commandline -opc)
    set -l extra
    for i in (seq (count $words))
        switch $words[$i]
            case --inventory --ssh-config
                set -q words[(math $i + 1)]; and set -a extra $words[$i] $words[(math $i + 1)]
            case '--inventory=*' '--ssh-config=*'
                set -a extra $words[$i]
        end
    end
    command vpatch completion --names $argv[1] $extra 2>/dev/null
end"""


def fish(parser: argparse.ArgumentParser) -> str:
    subs = subcommands(parser)
    out = [
        "# vpatch completion for fish (`vpatch completion fish > "
        "~/.config/fish/completions/vpatch.fish`), generated from vpatch's own argument parser.",
        _FISH_NAMES,
        "complete -c vpatch -f",
        "complete -c vpatch -n __fish_use_subcommand -l help -d 'show help'",
        "complete -c vpatch -n __fish_use_subcommand -l version -d 'show the version'",
    ]
    for name, sub in subs.items():
        summary = COMMANDS[name][0].split(":")[0].split(".")[0]
        out.append(
            f"complete -c vpatch -n __fish_use_subcommand -a {name} -d {_fish_quote(summary)}"
        )
        cond = f"'__fish_seen_subcommand_from {name}'"
        for a in _options(sub):
            longs = [o[2:] for o in a.option_strings if o.startswith("--")]
            shorts = [o[1:] for o in a.option_strings if not o.startswith("--")]
            flags = " ".join([*(f"-l {x}" for x in longs), *(f"-s {x}" for x in shorts)])
            value = ""
            if a.nargs != 0 and _named(a):
                value = f" -x -a '(__vpatch_names {_named(a)})'"
            elif a.nargs != 0:
                value = f" -x -a {_fish_quote(' '.join(_choices(a)))}" if a.choices else " -r -F"
            helptext = (a.help or "").replace("%%", "%")
            out.append(f"complete -c vpatch -n {cond} {flags}{value} -d {_fish_quote(helptext)}")
        positional = next((a for a in _positionals(sub) if a.choices), None)
        if positional is not None:
            words = _fish_quote(" ".join(_choices(positional)))
            out.append(f"complete -c vpatch -n {cond} -a {words}")
        elif _takes_spec(sub):
            ids = "'(vpatch catalog 2>/dev/null | string split -f1 \" \")'"
            out.append(f"complete -c vpatch -n {cond} -F -a {ids}")
        else:
            out.append(f"complete -c vpatch -n {cond} -F")
    return "\n".join(out) + "\n"


SHELLS = {"bash": bash, "zsh": zsh, "fish": fish}


# ---------------------------------------------------------------------------------------------
# `vpatch completion --names hosts|groups`: what the scripts offer after --host and --group


def names(kind: str, inventory: str | None, ssh_config: str | None) -> list[str]:
    """Host names (the inventory's, in its order, then ssh_config `Host` aliases without
    wildcards) or the inventory's groups. Whatever cannot be read counts as empty: a Tab
    press never prints an error."""
    from patcher.errors import VpatchError

    out: list[str] = []
    if inventory:
        from patcher.inventory import load_inventory

        try:
            inv = load_inventory(inventory, {})
        except (VpatchError, OSError, ValueError):
            inv = None
        if inv is not None and kind == "groups":
            out = sorted(set().union(*(g for _, g in inv.hosts)))
        elif inv is not None:
            out = inv.names()
    if kind == "hosts":
        out += [] if "local" in out else ["local"]  # `--host local`: this machine
        files = [ssh_config] if ssh_config else ["~/.ssh/config", "/etc/ssh/ssh_config"]
        for f in files:
            out += [h for h in ssh_hosts(Path(os.path.expanduser(f))) if h not in out]
    return out


def ssh_hosts(path: Path, depth: int = 0) -> list[str]:
    """`Host` patterns of an ssh_config that name one host (no `*`, `?` or `!`), following
    `Include` (globs; relative to ~/.ssh for a user file, /etc/ssh for the system one) as
    ssh does, at most 16 deep."""
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return []
    base = "/etc/ssh" if str(path).startswith("/etc/") else os.path.expanduser("~/.ssh")
    found: list[str] = []
    for line in text.splitlines():
        try:
            words = shlex.split(line.replace("=", " ", 1), comments=True)
        except ValueError:
            continue
        if not words:
            continue
        key = words[0].lower()
        if key == "host":
            found += [w for w in words[1:] if not set(w) & set("*?!") and w not in found]
        elif key == "include" and depth < 16:
            for pattern in words[1:]:
                full = os.path.join(base, os.path.expanduser(pattern))
                for inc in sorted(glob.glob(full)):
                    found += [h for h in ssh_hosts(Path(inc), depth + 1) if h not in found]
    return found
