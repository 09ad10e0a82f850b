"""`vpatch.core.patch`: vpatch's engine on the controller, its agent on the target.

Split, and why:
- The thinking runs HERE, in the action plugin on the controller: spec loading, variant choice,
  libcst rewrites (one parse per distinct file content per fork), diffs, outcomes. It is
  `patcher.run.engine` itself, unchanged, so a playbook gets exactly the outcomes, messages and JSON
  document of `vpatch apply|verify|rollback --json`. libcst and pydantic are needed only here.
- The target only runs vpatch's stdlib agent (inspect / commit / verify), reached through
  `_execute_module("vpatch.core.patch_agent")`: Ansible's normal module transfer, so every
  connection plugin (ssh, docker, kubectl, SSM, local, ...), `become`, and the inventory's
  interpreter settings work as for any module, and nothing has to be installed on the target.

That is one `Transport` (see patcher.transports.base) whose `call()` is `_execute_module`.

With `restart`, `health_url` or `metrics_url` a `state: present` task is a rollout of this one
host: `patcher.rollout.driver.one_host`, the same steps as `vpatch rollout` (baseline, apply,
restart, health, window, gates; rolled back, restarted and healthy again when a step fails),
over the same transport. The fleet policy is the play's own (`serial`, `max_fail_percentage`).
"""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.vpatch.core.plugins.module_utils.patch_args import (
    ARGUMENT_SPEC,
    ROLLOUT_TRIGGERS,
)

AGENT_MODULE = "vpatch.core.patch_agent"

COMMANDS = {"present": "apply", "absent": "rollback", "verified": "verify"}
# Outcomes whose files were (or, in check mode, would be) rewritten.
WRITING = frozenset({"applied", "rolled_back", "would_apply", "would_roll_back"})


def _import_vpatch() -> Any:
    """patcher lives on the controller, in the Python that runs ansible-playbook."""
    try:
        from patcher import errors, result
        from patcher.run import engine
        from patcher.specs import catalog
        from patcher.transports import bundle
    except ImportError as exc:
        raise AnsibleActionFail(
            f"vpatch.core.patch needs vpatch on the controller ({exc}): "
            "pip install vpatch into the Python environment that runs ansible-playbook"
        ) from None
    return catalog, engine, errors, result, bundle


class _ModuleTransport:
    """patcher.transports.Transport over Ansible: each agent call is one module execution."""

    def __init__(
        self,
        action: ActionModule,
        task_vars: dict[str, Any],
        python: str | None,
        timeout: float,
        trusted_python: str = "/usr/bin/python3",
    ) -> None:
        vp = _import_vpatch()
        errors, transport = vp[2], vp[4]
        self._decode = transport.decode_answer
        self._host_error = errors.HostError
        from patcher.transports import session

        self._session = session  # the words every transport uses for an unknown outcome
        self._action = action
        self._task_vars = task_vars
        self._python = python
        self._timeout = timeout
        self._agent = transport.agent_bundle().decode("utf-8")
        self._boot = transport.BOOT
        self._boot0 = transport.BOOT0  # as root the module starts privsep's stage 0
        self._trusted = trusted_python
        self.target = str(task_vars.get("inventory_hostname", "target"))

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        args = {
            "request": json.dumps(request),
            "agent": self._agent,
            "boot": self._boot,
            "boot0": self._boot0,
            "trusted_python": self._trusted,
            "timeout": timeout or self._timeout,
        }
        if self._python:
            args["python"] = self._python
        res = self._action._execute_module(
            module_name=AGENT_MODULE, module_args=args, task_vars=self._task_vars
        )
        if res.get("failed") or "answer" not in res:
            msg = str(res.get("msg") or "module failed without a message")
            # A module that never ran (its interpreter missing, a crash before JSON) fails as
            # "MODULE FAILURE" / "deserialization failed": the module's stderr says why.
            stderr = str(res.get("module_stderr") or "").strip().splitlines()
            if stderr:
                msg = f"{msg.splitlines()[0]}: {stderr[-1][:300]}"
            hint = (
                "set `python:` to the serving environment's interpreter"
                if res.get("kind") == "python_missing"
                else "rerun with -vvv to see the connection and module output"
            )
            if res.get("unreachable"):
                hint = "check the connection settings of this host"
            raise self._host_error(f"{self.target}: {msg}", hint)
        status = int(res.get("rc", 0))
        if status < 0 and not str(res["answer"]).strip():  # OOM killer, kill -9, a crash
            raise self._session.killed(self.target, -status, "`state: verified`")
        return dict(
            self._decode(
                self.target,
                str(res["answer"]).encode("utf-8"),
                str(res.get("stderr_tail", "")).encode("utf-8"),
                status,
            )
        )

    def close(self) -> None:
        pass


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        del tmp
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        catalog, engine, errors, results = _import_vpatch()[:4]
        check = bool(self._task.check_mode)
        command = COMMANDS[args["state"]]
        try:
            specs = catalog.load_all([self._spec_path(s, args["catalog"]) for s in args["spec"]])
        except errors.VpatchError as exc:
            raise AnsibleActionFail(_error_text(exc)) from None
        from patcher.plan.base import Options
        from patcher.run.exchange import RunContext

        opts = Options(dry_run=check, force=args["force"], level=args["level"])
        transport = _ModuleTransport(
            self, task_vars, args["python"], args["timeout"], args["trusted_python"]
        )
        # The remote tmp dir made by the first module call is reused by the next ones and
        # removed by the task executor's cleanup(), as for any action plugin.
        ctx = RunContext()  # this task on this host is one run
        if command == "apply" and not check and any(args[k] for k in ROLLOUT_TRIGGERS):
            command = "rollout"
            host = self._rollout(args, specs, opts, transport, ctx, errors)
        else:
            step = {"apply": engine.apply, "rollback": engine.rollback, "verify": engine.verify}
            host = step[command](specs, transport, opts, args["state_dir"], ctx=ctx)
        counts = ctx.stats()
        stats = {k: counts[k] for k in ("libcst_parses", "rewrite_cache_hits")}
        doc = results.RunResult(command, host.ok, [host], stats).to_json()
        result.update(self._summary(host, command, doc))
        return result

    def _rollout(
        self,
        args: dict[str, Any],
        specs: Any,
        opts: Any,
        transport: _ModuleTransport,
        ctx: Any,
        errors: Any,
    ) -> Any:
        """This host's rollout (patcher.rollout.walk): the options are checked as the CLI's."""
        from patcher.inventory.targets import Target
        from patcher.rollout.settings import make_settings

        try:
            cfg = make_settings(
                restart=args["restart"],
                restart_timeout=str(args["restart_timeout"]),
                health=args["health_url"],
                health_timeout=str(args["health_timeout"]),
                metrics=args["metrics_url"],
                window=str(args["window"]),
                min_drafts=str(args["min_drafts"]),
                min_acceptance=args["min_acceptance"],
                min_throughput_ratio=args["min_throughput_ratio"],
                allow_no_traffic=args["allow_no_traffic"],
            )
        except errors.VpatchError as exc:
            raise AnsibleActionFail(_error_text(exc)) from None
        target = Target(transport.target, transport.target)
        from patcher.rollout import driver

        return driver.one_host(target, transport, specs, opts, args["state_dir"], cfg, ctx)

    def _spec_path(self, spec: str, catalog_dir: str | None) -> str:
        """A path is looked up like `copy: src=` (role/playbook `files/`, then the playbook
        dir); an id in `catalog` (else $VPATCH_CATALOG, ./patches or the shipped catalog, as the
        CLI does)."""
        if spec.endswith(".toml") or "/" in spec:
            try:
                return str(self._find_needle("files", spec))
            except AnsibleError:
                return spec  # vpatch's own error names the missing file
        if catalog_dir:
            return f"{catalog_dir}/{spec}.toml"
        return spec

    def _summary(self, host: Any, command: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Ansible's view: changed iff bytes changed (or would, in check mode)."""
        changed = command != "verify" and any(
            p.outcome in WRITING and any(f.before_sha256 != f.after_sha256 for f in p.files)
            for p in host.patches
        )
        rollout = host.rollout if command == "rollout" else None
        if rollout is not None:  # a restart changed the host too, even when rolled back
            changed = changed or any(
                ph["step"] in ("restart", "rollback_restart") for ph in rollout["phases"]
            )
        out: dict[str, Any] = {
            "changed": changed,
            "vpatch": doc,
            "outcomes": {p.id: p.outcome for p in host.patches},
            "restart_required": host.restart_required,
            "msg": _message(host),
        }
        if rollout is not None:
            out["rollout"] = rollout
        if not host.ok:
            out["failed"] = True
        if self._task.diff:
            diffs = [
                {"prepared": f.diff}
                for p in host.patches
                if p.outcome in WRITING
                for f in p.files
                if f.diff
            ]
            if diffs:
                out["diff"] = diffs
        return out


def _message(host: Any) -> str:
    if host.error:
        hint = getattr(host, "hint", None)
        return f"{host.error} (hint: {hint})" if hint else str(host.error)
    parts = [f"{p.id}: {p.outcome}" + (f" ({p.message})" * bool(p.message)) for p in host.patches]
    for p in host.patches:
        for probe in p.probes:
            if not probe.ok:
                parts.append(f"{p.id}: probe {probe.name!r} failed: {probe.detail}")
    return "; ".join(parts) or "nothing to do"


def _error_text(exc: Any) -> str:
    return exc.message if not exc.hint else f"{exc.message} (hint: {exc.hint})"
