"""`vpatch completion bash|zsh|fish`: shell completion generated from the argparse parser
`vpatch` runs, so a new subcommand, option or choice completes without anyone editing a script.

Completes subcommands, options, choices (`--level`, `hook systemd`...), catalog ids where a
command takes SPEC (asked from `vpatch catalog` at completion time, so $VPATCH_CATALOG and
./patches count), and files everywhere else. zsh runs the bash function through bashcompinit.
"""

from __future__ import annotations

import argparse
import shlex

from patcher.clidocs import COMMANDS, subcommands


def _options(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if a.option_strings]


def _positionals(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if not a.option_strings]


def _takes_spec(sub: argparse.ArgumentParser) -> bool:
    return any(a.metavar == "SPEC" for a in _positionals(sub))


def _choices(action: argparse.Action) -> list[str]:
    return [str(c) for c in action.choices or ()]


def bash(parser: argparse.ArgumentParser) -> str:
    subs = subcommands(parser)
    cases = []
    for name, sub in subs.items():
        lines = [f"        {name})"]
        valued = [a for a in _options(sub) if a.nargs != 0]
        chosen = [a for a in valued if a.choices]
        free = [a for a in valued if not a.choices]
        if valued:
            lines.append('            case "$prev" in')
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
            lines.append(f"            words={shlex.quote(' '.join(_choices(positional)))}")
        elif _takes_spec(sub):
            lines.append("            words=$(_vpatch_ids); files=1")
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

_vpatch() {{
    # $2 and $3 (the word being completed and the one before): what bash and zsh's
    # bashcompinit both pass, whatever their array indexing.
    local cur=$2 prev=$3 cmd="" w opts="" words="" files=""
    for w in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case $w in
            --) return 0 ;;  # `vpatch exec SPEC -- CMD`: CMD completes as any command line
            -*) ;;
            *) cmd=${{cmd:-$w}} ;;
        esac
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
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
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


def fish(parser: argparse.ArgumentParser) -> str:
    subs = subcommands(parser)
    out = [
        "# vpatch completion for fish (`vpatch completion fish > "
        "~/.config/fish/completions/vpatch.fish`), generated from vpatch's own argument parser.",
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
            if a.nargs != 0:
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
