"""The agent exchanges of a command run: `look()` (inspect, repair, plan-ahead) and `write()`
(the commit chain), with what the run learns and counts on the way in a `RunContext`.

engine.py says what a command does per host; this module says how its requests travel. A
`RunContext` is made once per command run (the CLI's, the Ansible task's, a rollout's) and
passed down to every host of it: the file texts the hosts sent (inspect then sends only their
hashes), the libcst rewrites (32 hosts with the same file cost one parse), the answers earlier
hosts gave (plans made ahead for the hosts after them), the counts `--json` reports, and the
targets refused as unpatchable. Nothing here is a module global: two runs in one process (the
tests, an Ansible worker) share nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from patcher.agent import protocol
from patcher.caches import rewrites
from patcher.caches.facts import Memo, flush, key, load, store, usable
from patcher.errors import AgentError
from patcher.output import progress
from patcher.plan.base import Level, Plan, wanted_files
from patcher.plan.hostfacts import HostFacts
from patcher.plan.preflight import preflight, read_only_hint
from patcher.result import HostResult, ProbeResult
from patcher.specs.model import PatchSpec
from patcher.transports import Transport

# TEST-ONLY: a fault point spec (patcher/agent/faults.py) sent with every commit request, so the
# crash tests reach agents over SSH too. Deliberately not a CLI flag; unset, nothing changes.
TEST_FAULT_ENV = "VPATCH_TEST_FAULT"
# A commit in a chain asks for the environment's lock for this long; engine.py waits and asks
# again while another vpatch holds it.
LOCK_POLL_S = 1.0
_MAX_GUESSES = 3  # answers planned on ahead per host
_PEERS_KEPT = 2  # answers per request a run offers the hosts after the one that gave them

Answer = dict[str, Any]


@dataclass
class RunContext:
    """What one command run learns and counts across its hosts; made once per run and passed
    to every host's command. Thread-safe: a fleet's hosts run in parallel."""

    caches: rewrites.Caches = field(default_factory=rewrites.Caches)
    # caches.facts.key("", request) -> (fingerprint, answer, its facts), newest first: what the
    # hosts before this one answered to the same request (a fleet's hosts tend to be alike)
    peers: dict[str, list[tuple[str, Answer, HostFacts]]] = field(default_factory=dict)
    agent_exchanges: int = 0  # round trips
    planned_ahead: int = 0  # hosts whose commit rode in their inspect's exchange
    unsupported: set[str] = field(default_factory=set)  # errors.Unsupported: the CLI exits 2
    hosts: Memo = field(default_factory=Memo)
    # (recipe, id of a peer's facts) -> (those facts, the plan made ahead on them or None, the
    # rewrites making it asked for): a fleet's hosts guess on the same few peer answers, each
    # planned on once (planned())
    ahead_plans: dict[tuple[Hashable, int], tuple[HostFacts, Plan | None, int]] = field(
        default_factory=dict
    )
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # the rollout run whose lease this run's commits are made under (agent/lease.py: a live
    # lease refuses other runs' commits of its specs); None: not a rollout
    lease: str | None = None
    # Each host's session serves one engine command and is closed after it (the host commands
    # but ensure): the request that finishes the command carries protocol.LAST, so the agent
    # ends the session with its answer and the channel closes without a round trip more.
    # False (a rollout, ensure, a library caller): the session stays for the next request.
    ends_sessions: bool = False

    def flush(self) -> None:
        """Write the hosts' answers the run kept for its end (caches.facts.Memo.defer): a fleet
        command calls it once its hosts are done, whatever ended them."""
        flush(self.hosts)

    @property
    def content(self) -> rewrites.Texts:
        """File texts by sha256, every one checked against its hash on arrival."""
        return self.caches.content

    def stats(self) -> dict[str, int]:
        """The counts `--json` reports under `stats`."""
        with self.lock:
            return {
                "libcst_parses": self.caches.stats["parses"],
                "rewrite_cache_hits": self.caches.stats["hits"],
                "agent_exchanges": self.agent_exchanges,
                "planned_ahead": self.planned_ahead,
            }

    def refused(self, target: str) -> None:
        """Mark `target` unpatchable as it is (errors.Unsupported)."""
        with self.lock:
            self.unsupported.add(target)

    def count(self, name: str) -> None:
        """One more of `name` (agent_exchanges, planned_ahead)."""
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)

    def peers_for(self, request: Answer) -> list[tuple[str, Answer, HostFacts]]:
        """(fingerprint, answer, its facts) the hosts before this one gave to `request`,
        newest first."""
        with self.lock:
            return list(self.peers.get(key("", request), []))

    def offer(self, request: Answer, answer: Answer) -> str | None:
        """Offer a host's answer to the hosts after it in this run (the newest per request);
        its fingerprint (caches.facts.usable), None when it is no use as a guess."""
        fp = usable(answer)
        if fp is None:
            return None
        peers = key("", request)
        with self.lock:
            if any(f == fp for f, _, _ in self.peers.get(peers, [])):
                return fp
        got = {k: v for k, v in answer.items() if k != "then"}
        facts = HostFacts.from_answer(got)  # once per answer offered, not once per guess
        with self.lock:
            have = self.peers.setdefault(peers, [])
            if all(f != fp for f, _, _ in have):
                have.insert(0, (fp, got, facts))
                for _, _, gone in have[_PEERS_KEPT:]:  # its plans go with it
                    for k in [k for k, (f, _, _) in self.ahead_plans.items() if f is gone]:
                        del self.ahead_plans[k]
                del have[_PEERS_KEPT:]
        return fp

    def planned(
        self, recipe: Hashable, facts: HostFacts, make: Callable[[HostFacts], Plan | None]
    ) -> Plan | None:
        """`make(facts)`: on a peer's facts (what a host before this one answered) made once per
        run and `recipe` (what else the plan is made of: the command, its specs, options), and
        each caller given a copy of its own (Plan.copy); on any other facts (a host's own
        stored answer) made per call."""
        made_for = (recipe, id(facts))  # the entry holds the facts: their id stays theirs
        with self.lock:
            peer = any(f is facts for have in self.peers.values() for _, _, f in have)
            hit = self.ahead_plans.get(made_for) if peer else None
        if hit is not None:
            # A copy's rewrites are the cache's answers, counted as if it were planned again.
            self.caches.hit(hit[2])
            return hit[1].copy() if hit[1] is not None else None
        if not peer:
            return make(facts)
        before = self.caches.asked()
        made = make(facts)
        asked = self.caches.asked() - before
        with self.lock:
            if any(f is facts for have in self.peers.values() for _, _, f in have):
                self.ahead_plans.setdefault(made_for, (facts, made, asked))
        return made.copy() if made is not None else None  # the entry's stays untouched


def call(
    transport: Transport,
    request: Answer,
    ctx: RunContext | None = None,
    *,
    timeout: float | None = None,
    refused: str | None = None,
    hint: str = "",
) -> Answer:
    """The agent's answer to one request: the one way every agent request of a run travels,
    the engine's and a rollout's steps' (restart, health, scrapes, journal steps, the lease)
    alike. Counted in `ctx` (`stats.agent_exchanges`), shown as it ends under -v
    (progress.exchange); an error answer raises an AgentError with its kind and hint, the one
    error shape of every agent call (`checked`). `timeout`: the call's own, for a request
    that waits on the host (a restart command, a health wait); None: the transport's."""
    if ctx is not None:
        ctx.count("agent_exchanges")
    with progress.exchange(transport, request):
        res = transport.call(request) if timeout is None else transport.call(request, timeout)
    return checked(transport.target, res, refused=refused, hint=hint)


def checked(target: str, res: Answer, *, refused: str | None = None, hint: str = "") -> Answer:
    """`res` when the agent says ok; else the AgentError it stands for, raised. Its hint is
    the kind's (protocol.HINTS: the agent never words hints), else `hint`: the caller's words
    for what to check (a rollout step's option). `refused`: the words before the agent's
    error, for a caller whose report names the host already (a rollout phase: "agent refused
    the restart"; "": the error alone); None: the host's name, as the engine's errors say."""
    if not res.get("ok"):
        kind = str(res.get("kind", ""))
        error = str(res.get("error"))
        hint = read_only_hint(error) or protocol.HINTS.get(kind, "") or hint
        if refused is None:
            said = f"{target}: {error}"
        else:
            said = f"{refused}: {error}" if refused else error
        raise AgentError(said, hint, kind)
    return res


@dataclass
class Counted:
    """`transport` for code of another room that asks the agent itself (serving.metrics'
    scrape): each of its calls is one `call` of the run, counted, shown and checked as
    the run's own requests are (`refused`, `hint`: as `call` takes them)."""

    transport: Transport
    ctx: RunContext | None
    refused: str | None = None
    hint: str = ""
    target: str = field(init=False)

    def __post_init__(self) -> None:
        self.target = self.transport.target

    def call(self, request: Answer, timeout: float | None = None) -> Answer:
        return call(
            self.transport,
            request,
            self.ctx,
            timeout=timeout,
            refused=self.refused,
            hint=self.hint,
        )

    def close(self) -> None:
        self.transport.close()


def forged(target: str, where: str) -> AgentError:
    """The error of a host that sent a text under a sha256 that is not its bytes'."""
    return AgentError(
        f"{target}: the host sent a text for {where} that is not the bytes of the sha256 it"
        " claims; nothing was changed on this host",
        "something on the host rewrites the agent's answers (a wrapper interpreter, a .pth"
        " file, the transport): check the host; the other hosts are not affected",
        "protocol",
    )


# ---------------------------------------------------------------------------------------------
# look(): inspect, repair, plan-ahead


def inspect_request(
    ctx: RunContext, specs: Sequence[PatchSpec], state_dir: str | None, procs: bool = False
) -> Answer:
    """The inspect of `specs`' files; with `procs`, the restart-required scan for them rides."""
    request: Answer = {
        "op": "inspect",
        "packages": wanted_files(specs),
        "state_dir": state_dir,
        "known": sorted(ctx.content),
    }
    if procs:
        request["procs_for"] = [s.id for s in specs]
    return request


@dataclass
class Guess:
    """A plan made ahead on an answer the host gave before, and the requests that carry it
    out, sent with the inspect: they run in the same exchange when the host's answer has the
    same fingerprint (patcher/agent/chain.py)."""

    fingerprint: str  # of the answer it was made on (agent/protocol.py)
    facts: HostFacts
    plan: Plan  # a verify's guess writes nothing: an empty plan, its chain the checks
    chain: list[Answer]


# (fingerprint, facts of a guessed answer) -> the guess to send, or None
Ahead = Callable[[str, HostFacts], Guess | None]


@dataclass
class Exchange:
    """What an inspect brought back: the facts, and the guess the agent carried out, if any,
    with the answers of its chain."""

    facts: HostFacts
    answer: Answer
    guess: Guess | None = None
    answers: list[Answer] | None = None
    fingerprint: str | None = None  # the answer's, as a guess (caches.facts.usable)


def look(
    ctx: RunContext,
    transport: Transport,
    request: Answer,
    host: HostResult,
    ahead: Ahead | None = None,
) -> Exchange:
    """ONE agent call for every fact about the host (with `procs_for`, the restart-required
    scan rides along; with `ahead`, a guess per answer seen before rides too: a commit chain
    or checks). A transaction a crash left half-written is repaired first, then looked at
    again: no decision is ever made on a half-patched host. The answer is offered to the
    hosts after this one as a guess."""
    guesses: list[Guess] = []
    if ahead is not None:
        for fp, facts in _guessed_answers(ctx, transport, request):
            guess = ahead(fp, facts)
            if guess is not None:
                guesses.append(guess)
    request = dict(request, known=sorted(ctx.content))
    table = {g.fingerprint: g for g in guesses}
    for _ in range(2):
        sent = dict(request, then_if={fp: g.chain for fp, g in table.items()}) if table else request
        res = call(transport, sent, ctx)
        _fill_texts(ctx, transport.target, res)
        if not res.get("incomplete"):
            break
        table = {}
        done = call(transport, {"op": "repair", "state_dir": request.get("state_dir")}, ctx)
        host.notes.extend(done.get("notes", []))
    facts = HostFacts.from_answer(res)
    host.python, host.warnings = facts.python, facts.warnings
    host.python_path, host.python_version = facts.python_path, facts.python_version
    host.uid, host.dropped_from = res.get("uid"), res.get("dropped_from")
    mounted = (res.get("python") or {}).get("own_mount")
    host.env_mounted = mounted if isinstance(mounted, bool) else None
    guess = table.get(str(res.get("fingerprint"))) if "then" in res else None
    if guess is not None:
        ctx.count("planned_ahead")
    mine = ctx.offer(request, res)  # computed here, never the fingerprint the host claims
    return Exchange(facts, res, guess, res.get("then") if guess else None, mine)


def commit_ahead(
    ctx: RunContext,
    request: Answer,
    make: Callable[[HostFacts], Plan],
    level: Level,
    recipe: Hashable | None = None,
) -> Ahead:
    """look()'s `ahead` for apply and rollback: `make`'s plan on a guessed answer, as a commit
    chain, when it would commit and nothing stops it there. `recipe`: what `make` makes its
    plans of besides the facts (equal recipes, equal plans on the same facts): a peer's answer
    is then planned on once per run (RunContext.planned); None: per host."""

    def worth(facts: HostFacts) -> Plan | None:
        plan = make(facts)
        if not plan.needs_commit() or preflight(facts, plan):
            return None
        return plan

    def ahead(fp: str, facts: HostFacts) -> Guess | None:
        plan = worth(facts) if recipe is None else ctx.planned(recipe, facts, worth)
        if plan is None:
            return None
        return Guess(fp, facts, plan, _chain(ctx, plan, level, request))

    return ahead


def remember(
    ctx: RunContext,
    transport: Transport,
    request: Answer,
    answers: Sequence[Answer | Exchange | None],
) -> None:
    """Keep a host's answers, newest first, for the next run's guesses (patcher.caches.facts):
    the inspect's (its Exchange: its fingerprint is known) and, after a commit, its chain's
    closing inspect (the state the next command will meet). Once per host and command, into
    its bucket: written at once, or with the run's other hosts at its end (RunContext.flush)."""
    got: list[tuple[str, Answer]] = []
    for a in answers:
        if isinstance(a, Exchange):
            fp, answer = a.fingerprint, a.answer
        elif a is not None:
            fp, answer = usable(a), a
        else:
            continue
        if fp is not None:
            got.append((fp, answer))
    store(transport.target, request, got, ctx.hosts, ctx.content)


def _guessed_answers(
    ctx: RunContext, transport: Transport, request: Answer
) -> list[tuple[str, HostFacts]]:
    """(fingerprint, facts): what this host answered before (patcher.caches.facts), then what
    the hosts before it answered in this run; distinct, at most _MAX_GUESSES. Their texts
    (each checked against its sha256) join the run's content cache."""
    out: list[tuple[str, HostFacts]] = []
    stored = load(transport.target, request, ctx.hosts, ctx.content)
    mine = [(fp, answer, None) for fp, answer in stored]
    for fp, answer, facts in [*mine, *ctx.peers_for(request)]:
        if len(out) == _MAX_GUESSES or any(fp == f for f, _ in out):
            continue
        try:
            for text_sha, text in _texts_of(answer):
                ctx.content.setdefault(text_sha, text)
        except ValueError:
            continue  # a text that is not its hash's bytes: no guess (rewrite_cache.Texts)
        out.append((fp, facts if facts is not None else HostFacts.from_answer(answer)))
    return out


def _fill_texts(ctx: RunContext, target: str, res: Answer) -> None:
    """Every text the host sent is hashed here, on arrival, before anything caches, compares
    or rewrites it: one that is not the bytes of the sha256 it comes with fails this host
    (a host cannot put its text under another file's hash, so no later host is given it);
    texts the host left out because the controller has them are put back."""
    content = ctx.content
    for name, pkg in res.get("packages", {}).items():
        for rel, info in pkg.get("files", {}).items():
            sha = info.get("sha256")
            if info.get("text") is not None and sha:
                _keep(content, target, f"{name}/{rel}", sha, info["text"])
            elif info.pop("cached", False) and sha in content:
                info["text"] = content[sha]
            elif info.get("text") is not None:
                raise forged(target, f"{name}/{rel}")
    for path, st in res.get("journal", {}).items():
        text = st.get("current_text")
        if text is not None and st.get("current"):
            _keep(content, target, str(path), st["current"], text)
        elif text is not None:
            raise forged(target, str(path))
        elif st.get("current") in content:
            st["current_text"] = content[st["current"]]
        if st.get("base_text") is not None:
            _keep(content, target, f"{path} (its backup)", st.get("base"), st["base_text"])


def _keep(content: rewrites.Texts, target: str, where: str, sha: Any, text: Any) -> None:
    try:
        content[sha] = text
    except (TypeError, ValueError):
        raise forged(target, where) from None


def _texts_of(answer: Answer) -> list[tuple[str, str]]:
    """(sha256, text) of every file text in an answer factcache checked."""
    return [
        (info["sha256"], info["text"])
        for pkg in answer["packages"].values()
        for info in pkg["files"].values()
        if isinstance(info.get("text"), str) and info.get("sha256")
    ]


# ---------------------------------------------------------------------------------------------
# write(): the commit chain


def commit_request(
    plan: Plan, state_dir: str | None, lock_timeout: float | None = None, lease: str | None = None
) -> Answer:
    """The commit of `plan`'s writes and journal entries (`lease`: RunContext.lease)."""
    request: Answer = {
        "op": "commit",
        "writes": [w.request() for w in plan.writes],
        "journal": plan.entries,
        "state_dir": state_dir,
        "gc": plan.gc,
    }
    if lock_timeout is not None:
        request["lock_timeout"] = lock_timeout
    if lease is not None:
        request["lease"] = lease
    if plan.backups:  # apply --adopt: pip's bytes become the backup the journal's base names
        request["backups"] = plan.backups
    if plan.checks and any(e.get("action") == "rollback" for e in plan.entries):
        # A partial rollback whose remaining specs' checks run next may put these bytes back:
        # the backups this commit's entries name stay until a later commit retires them.
        request["keep_backups"] = True
    fault = os.environ.get(TEST_FAULT_ENV)
    if fault:  # TEST-ONLY (patcher/agent/faults.py): crash the agent at a named commit step
        request["fault"] = fault
    return request


def commit(ctx: RunContext, transport: Transport, plan: Plan, state_dir: str | None) -> Answer:
    """`plan` committed on its own (an undo, a redo): its answer."""
    return call(transport, commit_request(plan, state_dir, lease=ctx.lease), ctx)


def chained_checks(plan: Plan, level: Level) -> dict[str, list[Answer]]:
    """spec id -> the checks that ride in a commit's chain (none at --level static)."""
    if level == "static":
        return {}
    return {sid: checks for sid, checks in plan.checks.items() if checks}


def _closing_inspect(ctx: RunContext, request: Answer, plan: Plan) -> Answer:
    """The inspect that ends a commit's chain: what the host looks like once `plan` is
    written, for the next command's guess. Texts the controller holds stay at home. The last
    request of the command where the session ends with it (RunContext.ends_sessions): a
    chain that went well leaves nothing to ask; one that did not keeps the session open."""
    for w in plan.writes:
        if w.text is not None and w.after:
            ctx.content[w.after] = w.text
    return last_if_ending(ctx, dict(request, known=sorted(ctx.content)))


def last_if_ending(ctx: RunContext, request: Answer) -> Answer:
    """`request` marked as the session's last (protocol.LAST) where the run's sessions end
    with their command (RunContext.ends_sessions); else as it is."""
    return dict(request, **{protocol.LAST: True}) if ctx.ends_sessions else request


def _chain(ctx: RunContext, plan: Plan, level: Level, request: Answer) -> list[Answer]:
    """A commit, the checks of what it wrote, and the closing inspect: one exchange.

    The commit's apply entries of a spec whose checks follow are journaled `pending` under
    a txn named here, and each spec's verify records that it passed (protocol.VERIFIED): a
    run stopped while the checks ran leaves them pending, which bare `status` reports."""
    state_dir = request.get("state_dir")
    checks = chained_checks(plan, level)
    commit = commit_request(plan, state_dir, LOCK_POLL_S, ctx.lease)
    if checks:
        commit["txn"] = txn = new_txn()
        commit["journal"] = [pending(e, checks) for e in commit["journal"]]
    chain = [commit]
    chain += [
        {"op": "verify", "checks": c, "record": {"txn": txn, "spec": sid, "state_dir": state_dir}}
        for sid, c in checks.items()
    ]
    chain.append(_closing_inspect(ctx, request, plan))
    return chain


def pending(entry: Answer, checks: dict[str, list[Answer]]) -> Answer:
    """An apply entry whose spec's checks follow the commit, marked so (protocol.PENDING)."""
    if entry.get("action") == protocol.APPLY and entry.get("spec") in checks:
        return dict(entry, verify=protocol.PENDING)
    return entry


def new_txn() -> str:
    """A transaction id no other commit on a host has (the agent's own form, plus random
    bits: a run may commit on one host more than once within a microsecond's clock)."""
    return f"{time.time_ns() // 1000:x}-{os.getpid()}-{os.urandom(4).hex()}"


def write(
    ctx: RunContext, transport: Transport, plan: Plan, level: Level, request: Answer
) -> list[Answer]:
    """The two-step path's second exchange, the chain as `then` of its commit: its answers."""
    first, *rest = _chain(ctx, plan, level, request)
    res = call(transport, dict(first, then=rest), ctx)
    return [res, *res.pop("then", [])]


def carry_out(
    ctx: RunContext, transport: Transport, plan: Plan, level: Level, answers: Any
) -> tuple[list[Answer], dict[str, list[ProbeResult]], Answer | None]:
    """What a chain's answers say: the commit's restart list, per spec its checks, and the
    closing inspect's answer when every check passed (else the host will not stay so). An
    error answer raises as a call would."""
    if not isinstance(answers, list) or not answers:
        raise AgentError(f"{transport.target}: the agent's chain came back empty", "", "protocol")
    done = checked(transport.target, answers[0])
    ran: dict[str, list[ProbeResult]] = {}
    for sid, got in zip(chained_checks(plan, level), answers[1:], strict=False):
        ran[sid] = probes(checked(transport.target, got))
    last: Answer | None = answers[-1]
    passed = all(p.ok for got in ran.values() for p in got)
    if passed and len(ran) == len(chained_checks(plan, level)) and last and last.get("ok"):
        _fill_texts(ctx, transport.target, last)
    else:
        last = None
    return list(done.get("restart_required", [])), ran, last


def run_checks(ctx: RunContext, transport: Transport, checks: list[Answer]) -> list[ProbeResult]:
    """The checks' results, run now in one exchange (none for no checks)."""
    if not checks:
        return []
    return probes(call(transport, {"op": "verify", "checks": checks}, ctx))


def probes(res: Answer) -> list[ProbeResult]:
    """The probe results of a verify answer."""
    return [
        ProbeResult(c["name"], bool(c["ok"]), str(c["detail"]), float(c.get("seconds", 0)))
        for c in res["checks"]
    ]
