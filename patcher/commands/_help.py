"""What `vpatch COMMAND --help` says beyond the options: a description and an example per
subcommand, and what SPEC is. Kept apart from patcher.commands (which say how arguments parse) so
the words can be read, and reviewed, in one place; `docs/reference/cli.md` is generated from the
resulting `--help` texts."""

from __future__ import annotations

import argparse
import textwrap

SPEC_HELP = (
    "a spec: a .toml path, or a catalog id looked up in $VPATCH_CATALOG, ./patches, then the "
    "catalog shipped with vpatch (`vpatch catalog` lists them)"
)

TOP_EPILOG = """\
SPEC is a spec file (.toml) or a catalog id: $VPATCH_CATALOG (when set), then ./patches, then
the catalog shipped with vpatch; the first that has ID.toml wins (`vpatch catalog`).
Targets: --python (this machine), --host [user@]host[:port] (SSH, repeatable), --inventory
hosts.toml with --group (a fleet; the format is in docs/inventory.md), or --ray ADDRESS.
Exit codes: 0 desired state everywhere; 1 a target failed; 2 bad input (nothing touched).

example:
  vpatch apply vllm-eagle3-mla-targets --python /srv/venv/bin/python --diff
  vpatch COMMAND --help"""

# command -> (description, example lines)
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "apply": (
        "Apply specs on the targets: find the file through its package's RECORD, rewrite it "
        "(libcst), back up and journal the original, write it atomically, then verify (import "
        "and probes) and put the original back if that fails.",
        [
            "vpatch apply vllm-eagle3-mla-targets --python /srv/venv/bin/python --diff",
            "vpatch apply vllm-eagle3-mla-targets --inventory hosts.toml --canary 1 --batch 25%",
        ],
    ),
    "verify": (
        "Check that specs are in effect on the targets: static (the file has the journal's hash "
        "and the edit), import (the module imports in a fresh python -I), full (the spec's "
        "probes pass; the default).",
        [
            "vpatch verify vllm-eagle3-mla-targets --python /srv/venv/bin/python",
            "vpatch verify vllm-eagle3-mla-targets --host gpu-01 --metrics "
            "http://localhost:8000/metrics",
        ],
    ),
    "rollback": (
        "Restore the exact original bytes from the target's backups, for the given specs or, "
        "without SPEC, everything vpatch applied; other specs on the same file stay applied.",
        ["vpatch rollback vllm-eagle3-mla-targets --python /srv/venv/bin/python --diff"],
    ),
    "rollout": (
        "Apply specs host by host under the fleet policy, then on each target run the restart "
        "command, wait for its health URL, measure the live serving metrics against the "
        "baseline scraped before the patch, and keep the patch only when the gates pass; "
        "otherwise roll it back, restart and wait for health again (docs/rollout.md). While it "
        "runs, its owner steers it through its report: pause (no host starts), resume, "
        "promote (the windows in flight end, the patch is kept), abort (hosts in flight go "
        "back, none starts).",
        [
            "vpatch rollout vllm-eagle3-mla-backport --inventory hosts.toml --canary 1 "
            "--batch 25% --restart 'systemctl restart vllm' --health "
            "http://localhost:8000/health --metrics http://localhost:8000/metrics",
            "vpatch rollout pause ~/.local/state/vpatch/rollouts/3f9c0a1b2c3d.json",
        ],
    ),
    "status": (
        "Show what vpatch applied on the targets (their journal) and whether each file still "
        "holds it; with SPEC, also whether those specs are in place.",
        ["vpatch status --inventory hosts.toml --group prod --json"],
    ),
    "ensure": (
        "For pre-start hooks: apply what is missing, verify, exit 0 only when every spec is in "
        "place. Fast and quiet when everything already is (journal and hashes only).",
        ["vpatch ensure vllm-eagle3-mla-targets --python /srv/venv/bin/python"],
    ),
    "exec": (
        "Ensure the specs on the interpreter CMD runs on, then exec CMD in this process (its "
        "PID, signals and exit status); CMD never starts unless every spec is in place.",
        ["vpatch exec vllm-eagle3-mla-targets -- vllm serve deepseek-ai/DeepSeek-V3"],
    ),
    "hook": (
        "Print a systemd drop-in whose ExecStartPre runs `vpatch ensure` before the service "
        "starts (install it under /etc/systemd/system/SERVICE.service.d/).",
        [
            "vpatch hook systemd --service vllm --python /srv/venv/bin/python "
            "vllm-eagle3-mla-targets > /etc/systemd/system/vllm.service.d/vpatch.conf",
        ],
    ),
    "check": (
        "Validate spec files offline (patch repos, pre-commit, CI): every problem of every file "
        "as FILE:LINE:COL: FIELD: message, then one hint; exit 2 if there is any.",
        ["vpatch check patches/", "vpatch check patches/new-fix.toml --json"],
    ),
    "catalog": (
        "List the ids SPEC can name and the file each loads: $VPATCH_CATALOG (when set), then "
        "./patches, then the catalog shipped with vpatch; the first that has an id wins.",
        ["vpatch catalog", "VPATCH_CATALOG=~/patch-repo/patches vpatch catalog --json"],
    ),
    "schema": (
        "Print the JSON Schema of the spec format (for editor completion and validation) or, "
        "with --result, of the --json document of apply, verify, rollback, status and ensure.",
        ["vpatch schema > vpatch-spec.schema.json", "vpatch schema --result"],
    ),
    "matrix": (
        "Check a spec against every release of its package from the package index, with no "
        "host: which variant each release gets and whether its edits find their anchors.",
        ["vpatch matrix vllm-eagle3-mla-targets --versions '>=0.11'"],
    ),
    "diff": (
        "Show every installed file of a package whose bytes differ from pip's RECORD (edited, "
        "missing, or added under the package's directories) as a unified diff against its "
        "pristine bytes: vpatch's own backup when vpatch wrote the change, else the file in "
        "the wheel of that exact release (fetched on this machine through pip, cached). Hosts "
        "with the same edits are shown once.",
        [
            "vpatch diff vllm --python /srv/venv/bin/python",
            "vpatch diff vllm vllm/config/speculative.py --inventory hosts.toml --json",
        ],
    ),
    "capture": (
        "Write a spec that reproduces a host's hand edits of a package structurally (finest "
        "op per change, verified by replaying it on pip's bytes), for the installed release; "
        "then check it against the neighbouring releases (the release matrix).",
        [
            "vpatch capture vllm --id vllm-eagle3-kimi --python /srv/venv/bin/python "
            "-o patches/vllm-eagle3-kimi.toml",
        ],
    ),
    "backport": (
        "Turn an upstream fix into a spec: apply the unified diff (git format) to the files of "
        "release V as its wheel ships them, capture the result structurally (as `vpatch "
        "capture` does), then check the spec against the releases around V. A hunk that "
        "cannot be placed is an error naming it.",
        [
            "git -C vllm show abc123 -- vllm/config/speculative.py > fix.diff",
            "vpatch backport fix.diff --package vllm --from-version 0.16.0 --id vllm-fix "
            "-o patches/vllm-fix.toml",
        ],
    ),
    "wheel": (
        "Build a patched wheel of a release: pip's wheel (or --from-wheel, or a --wheelhouse) "
        "with the specs' edits applied as `vpatch apply` would, a local version "
        "VER+vpatch.<digest>, RECORD regenerated and vpatch.json naming each spec. pip or uv "
        "installs it into an image; `vpatch status/verify` there report the specs applied "
        "(baked into the wheel).",
        [
            "vpatch wheel vllm-eagle3-mla-targets --package vllm==0.16.0 -o wheels/",
            "pip install wheels/vllm-0.16.0+vpatch.*.whl",
        ],
    ),
    "completion": (
        "Print a completion script for bash, zsh or fish, generated by shtab from vpatch's own "
        "parser (subcommands, options, choices, files), with vpatch's own parts: catalog ids, "
        "`--host` names from the `--inventory` on the line and ssh_config `Host` aliases, "
        "`--group` names from the inventory.",
        [
            "source <(vpatch completion bash)              # ~/.bashrc",
            "source <(vpatch completion zsh)               # ~/.zshrc",
            "vpatch completion fish > ~/.config/fish/completions/vpatch.fish",
        ],
    ),
}


def _shown(value: object) -> str:
    """A default as a person types it: 10, not 10.0."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def help_with_default(action: argparse.Action) -> str:
    """An option's help, saying its default as `(default: X)`: where the help names the value
    in parentheses already (`seconds per agent call (600)`) those words are kept, else it is
    added. Options without a value of their own (None, a flag, an empty list) have none to
    show; one whose help speaks of its default already says what it is."""
    text = action.help or ""
    value = action.default
    if (
        not action.option_strings
        or action.nargs == 0
        or value is None
        or value is argparse.SUPPRESS
        or value in ("", [], ())
        or "default" in text
    ):
        return text
    shown = _shown(value).replace("%", "%%")  # help strings are %-formatted by argparse
    for said in (f"({shown})", f"({shown};"):
        if said in text:
            return text.replace(said, f"(default: {said[1:]}", 1)
    return f"{text} (default: {shown})"


class Help(argparse.RawDescriptionHelpFormatter):
    """A subcommand's `--help`: the description and example as written, every default said."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return help_with_default(action)


class TopHelp(argparse.RawDescriptionHelpFormatter):
    """`vpatch --help`: each command once, with its line (argparse would print the
    subcommands' metavar on a line of its own above them)."""

    def _format_action(self, action: argparse.Action) -> str:
        if not isinstance(action, argparse._SubParsersAction):
            return super()._format_action(action)
        parts = []
        for sub in action._get_subactions():
            parts.append(super()._format_action(sub))
        return "".join(parts)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Name -> parser of every subcommand (in the order `vpatch --help` lists them)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def describe(
    parser: argparse.ArgumentParser, subparsers: dict[str, argparse.ArgumentParser]
) -> None:
    """Description and example on every subcommand in `subparsers` (those whose options were
    built; a missing one is a KeyError: a new subcommand must say what it does). Wrapped here,
    then printed as written (the default formatter would join the example lines)."""
    parser.epilog = TOP_EPILOG
    parser.formatter_class = TopHelp
    for name, sub in subparsers.items():
        text, examples = COMMANDS[name]
        sub.description = textwrap.fill(text, 90)
        sub.epilog = "example:\n" + "\n".join(f"  {line}" for line in examples)
        sub.formatter_class = Help
