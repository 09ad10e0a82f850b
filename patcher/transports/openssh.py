"""The agent over the OpenSSH client: `ssh ... -- HOST REMOTE_COMMAND` as a child process.

The same agent session as every other transport (patcher.transports.pipe.PipeTransport: bundle and
first request in one write, one answer line per request, a timeout kills the child and the
next call starts a fresh one); only the child differs: an `ssh` client whose stdin/stdout are
the agent's. The handshake runs in C, the user's ssh_config is read by the program that
defines it (Include, Match, ProxyJump, certificates, ControlMaster), and nothing here imports
paramiko, so a one-host run pays neither its import nor a Python handshake.

ssh says what went wrong only in its exit status (255: ssh itself failed, anything else: the
remote command's) and in stderr lines, whose wording is stable across OpenSSH releases; those
are mapped to the same host errors the paramiko client reports. The host name is an argv item
after `--`, checked by sshnames.host_problem like every other: no shell on this side ever
sees it, and ssh cannot take it for an option.
"""

from __future__ import annotations

import math
import re
import subprocess
from typing import TYPE_CHECKING, Any

from patcher.errors import HostError, Unreachable
from patcher.transports import session, sshnames
from patcher.transports.bundle import decode_answer
from patcher.transports.pipe import PipeTransport
from patcher.transports.ssh import SshOptions, exec_error, options, remote_command

if TYPE_CHECKING:
    from patcher.transports import Settings, Target

# Patterns of ssh's own words, compiled by `re` at their first use: only an error reads them.
_FINGERPRINT = r"Server host key: (\S+) (SHA256:\S+)"
_UNKNOWN = r"No (\S+) host key is known for (\S+) and you have requested strict"
_CHANGED_FP = r"key sent by the remote host is\s+(SHA256:[\w+/]+)"
_OFFENDING = r"Offending \S+ key in (.+):(\d+)"
_REVOKED = r"The (\S+) host key for (\S+) is marked as revoked"
_CONNECT = (  # ssh's own words for "never got as far as running the command"
    "ssh: ",
    "kex_exchange_identification",
    "banner exchange",
    "Connection closed by ",
    "Connection reset by ",
    "Unable to negotiate",
    "Bad owner or permissions",
    "Bad configuration option",
    "no argument after keyword",
)
# ...of those, the ones about this side's configuration or an agreement the two sides could
# not reach: the host was reached (or never tried), so it is no `Unreachable`
_SETUP = (
    "Unable to negotiate",
    "Bad owner or permissions",
    "Bad configuration option",
    "no argument after keyword",
)

# ...for the connection sharing an ssh_config asks for (ControlMaster/ControlPath), when it
# fails before any session opened (a mux client that loses its master mid-call is a lost
# connection, below, not this)
_MUX = ("ControlPath too long", "unix_listener: ")

_LOST = (  # ...and for a connection that went away under a running command
    "Connection to ",
    "client_loop",
    "Timeout, server",
    "packet_write",
    "Read from remote host",
    "Write failed",
    "ssh_dispatch_run_fatal",
)


def _path_value(path: str) -> str:
    """A path as an `-o IdentityFile=`/`UserKnownHostsFile=` value, meant literally: ssh
    expands `%` tokens there and splits the value at blanks (its own quoting, double quotes,
    keeps it one word). Not `-i`: ssh checks that file before expanding its tokens, so a `%`
    in it can be read neither literally nor escaped."""
    path = path.replace("%", "%%")
    return f'"{path}"' if any(c.isspace() for c in path) else path


class OpenSshTransport(PipeTransport):
    """Runs the agent on a remote interpreter through the OpenSSH client, one `ssh` process
    (one connection, one agent) per session; the agent's code is kept on the host between
    runs (`kept`: bundle.kept_boot)."""

    kept = True

    def __init__(
        self, target: str, host: str, user: str | None, port: int | None, opts: SshOptions
    ) -> None:
        """`target` labels the host in reports; host/user/port may be ssh_config aliases."""
        super().__init__()
        self.kept = opts.keep_agent
        ssh = sshnames.openssh()
        if ssh is None:
            raise HostError(
                f"{target}: no OpenSSH client (`ssh`) on PATH",
                "install the openssh client, or pass --ssh-client paramiko",
            )
        # parse_target and the inventory checked these already; a name ssh could take for an
        # option, or that a `Match exec` could run, must never get here from elsewhere either.
        problem = sshnames.host_problem(host)
        if problem is None and user is not None:
            problem = sshnames.user_problem(user)
        if problem is not None:
            raise HostError(f"{target}: host or user name {problem}", sshnames.HOST_HINT)
        self.target, self.host, self.user, self.port = target, host, user, port
        self.opts, self.ssh = opts, ssh
        self.call_timeout = opts.call_timeout
        self.connect_grace = opts.connect_timeout  # paramiko connects before the call's clock
        # Connection sharing (transports.share): the `-F` file that adds it after the
        # operator's config, once per command; `share_note` is what -v says of it.
        # The ControlPath's name carries a digest of what this run trusts (share.trust_facts):
        # a master another run made with other known hosts, identity or checking is not ours.
        self.share_config: str | None = None
        self.share_note = "not shared: --no-share / share = false"
        if opts.share:
            from patcher.transports import share

            trust = share.trust_digest(share.trust_facts(opts, self._strict(), user, port))
            sharing = share.prepare(opts.ssh_config, trust)
            if sharing.refused:
                raise HostError(f"{target}: {sharing.refused}", share.REFUSED_HINT)
            self.share_config, self.share_note = sharing.config, sharing.note
        self._master_said: str | None = None  # -v: whether a master was reused (_argv)

    def _strict(self) -> str:
        return "accept-new" if self.opts.accept_new_host_key else "yes"

    def _options(self, strict: str) -> list[str]:
        if self.share_config:  # ssh re-opens the -F file at every start: checked every time
            from patcher.transports import share

            why = share.check_in_use(self.share_config)
            if why:
                raise HostError(f"{self.target}: {why}; refused", share.REFUSED_HINT)
        return self._base_options(strict, self.share_config or self.opts.ssh_config)

    def master_note(self) -> str:
        """For `-v`: whether this host's session rides a master an earlier command left, or
        makes one (asked before the session started: `_argv`)."""
        return self._master_said or ""

    def _ask_master(self) -> str:
        """ssh's own answer (`-O check`, this run's options) whether a master for this host
        and trust is running; said only under -v, before the session starts."""
        argv = [self.ssh, *self._options(self._strict()), "-O", "check", "--", self.host]
        try:
            # process-start: the OpenSSH client asked about its control socket (-v only)
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        if done.returncode == 0:
            return "reusing the master an earlier command left (same host, user and trust)"
        return "no master for this host and trust yet: this connection becomes one"

    def _base_options(self, strict: str, config: str | None) -> list[str]:
        o = self.opts
        argv = [
            "-T",
            "-o", "BatchMode=yes",
            "-o", f"StrictHostKeyChecking={strict}",
            "-o", f"ConnectTimeout={max(1, math.ceil(o.connect_timeout))}",
            "-o", f"ServerAliveInterval={o.keepalive}",
        ]  # fmt: skip
        argv += ["-F", config] if config else []
        argv += ["-o", f"IdentityFile={_path_value(o.identity)}"] if o.identity else []
        if o.known_hosts:  # the one file, as with paramiko: no global ones
            argv += ["-o", f"UserKnownHostsFile={_path_value(o.known_hosts)}"]
            argv += ["-o", "GlobalKnownHostsFile=/dev/null"]
        argv += ["-p", str(self.port)] if self.port else []
        argv += ["-l", self.user] if self.user else []
        return argv

    def _argv(self) -> list[str]:
        if self.opts.say_master and self.share_config and self._master_said is None:
            self._master_said = self._ask_master()
        strict = self._strict()
        # LogLevel ERROR: ssh's failure lines (mapped below) and nothing chattier, whatever the
        # user's ssh_config says.
        return [
            self.ssh,
            *self._options(strict),
            "-o",
            "LogLevel=ERROR",
            "--",
            self.host,
            self._remote(),
        ]

    def _remote(self) -> str:
        """The command the host runs: the agent's bootstrap (transports.container runs it
        in a container there instead)."""
        o = self.opts
        return remote_command(o.python, o.sudo, o.trusted_python, o.sudo_user, o.run_as, self.kept)

    def _no_answer(self, out: bytes, err: bytes, code: int) -> dict[str, Any]:
        if out.strip():
            return decode_answer(self.target, out, err, code)
        if code == 255:  # ssh failed (or the agent died of a signal: no exit status came)
            raise self._ssh_error(err.decode("utf-8", "replace"))
        if code < 0:  # our ssh client killed (not by us: we only kill it on a timeout)
            raise session.lost(self.target, why=f"ssh killed by signal {-code}")
        if code != 0:
            raise exec_error(self.target, self.opts, err, code)
        return decode_answer(self.target, out, err, code)

    def _ssh_error(self, text: str) -> HostError:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        t, timeout = self.target, self.opts.connect_timeout
        if "Host key verification failed." in lines or re.search(_REVOKED, text):
            return self._host_key_error(text)
        for line in lines:
            if line.startswith(_MUX):
                continue  # a control socket's error: below, if nothing else failed
            if "Permission denied" in line or "Too many authentication failures" in line:
                return HostError(
                    f"{t}: authentication failed ({line})",
                    "check --identity / the user, and that the key is in authorized_keys",
                )
        for line in lines:
            if "timed out" in line:
                return Unreachable(
                    f"{t}: connection timed out after {timeout:g}s ({line})",
                    "is the host up, and is it sshd listening on that port?",
                )
        for line in lines:
            if line.startswith(_CONNECT):
                why = line.removeprefix("ssh: ")
                kind = HostError if any(w in line for w in _SETUP) else Unreachable
                return kind(
                    f"{t}: cannot connect ({why[:300]})",
                    "is sshd running there and the address right?",
                )
        for line in lines:  # only the connection sharing failed: nothing ran
            if line.startswith(_MUX):
                return HostError(
                    f"{t}: ssh's connection sharing failed ({line[:300]})",
                    "check ControlMaster/ControlPath in the ssh_config: a ControlPath must be "
                    "shorter than 108 bytes, in a directory only you can write",
                )
        # The connection was up and the command running: cut mid-call, or the agent died of a
        # signal (ssh then has no exit status to pass on, and says nothing). Only ssh's own
        # words are quoted: the other lines are the agent's or its probes' stderr.
        said = [line for line in lines if line.startswith(_LOST)]
        return session.lost(t, why=said[-1][:300] if said else "")

    def _host_key_error(self, text: str) -> HostError:
        t = self.target
        changed = re.search(_CHANGED_FP, text)
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
            got = f"got {changed[1]}, " if changed else ""
            where = re.search(_OFFENDING, text)
            old = f"{where[1]}:{where[2]}" if where else "known_hosts"
            return HostError(
                f"{t}: HOST KEY CHANGED for {self.host}: {got}{old} has another key; refused "
                "(possible man-in-the-middle, or the host was reinstalled)",
                f"if the change is expected, remove the old key from {old.rsplit(':', 1)[0]}",
            )
        key = self._server_key()
        shown = f" ({key[0]} {key[1]})" if key else ""
        revoked = re.search(_REVOKED, text)
        if revoked:
            return HostError(
                f"{t}: the host key of {revoked[2]}{shown} is marked @revoked in known_hosts; "
                "refused",
                "a revoked key is never trusted: find out why it was revoked, and give the host "
                "a new key",
            )
        unknown = re.search(_UNKNOWN, text)
        name = unknown[2] if unknown else self.host
        user_files, system_files = self._known_hosts_files()
        first = user_files[0] if user_files else "~/.ssh/known_hosts"
        hint = (
            "check the fingerprint, then rerun with --accept-new-host-key or add it with "
            f"`ssh-keyscan` to {first}"
        )
        from patcher.transports import sshconfig  # error paths only: `ssh -G`, known_hosts

        authority = sshconfig.cert_authority_for(user_files + system_files, name)
        if authority:
            hint = (
                f"{authority} trusts a @cert-authority for this host, but the host presented "
                "no certificate signed by it: " + hint
            )
        return HostError(f"{t}: unknown host key for {name}{shown}, refused", hint)

    def _server_key(self) -> tuple[str, str] | None:
        """(type, SHA256 fingerprint) of the key the host presents: ssh names it only in its
        debug output, so a refused connection is made once more, verbosely, to quote it (an
        error path: no run pays for it otherwise)."""
        argv = [  # a connection of its own, to see the key: no master used or left
            self.ssh,
            *self._base_options("yes", self.opts.ssh_config),
            "-o",
            "ControlPath=none",
            "-o",
            "LogLevel=DEBUG1",
            "--",
            self.host,
            "exit",
        ]
        try:
            # process-start: the OpenSSH client (not a Python)
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.opts.connect_timeout + 5,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = re.search(_FINGERPRINT, done.stderr)
        return (found[1], found[2]) if found else None

    def _known_hosts_files(self) -> tuple[list[str], list[str]]:
        """(user files, global files) ssh read for this host: --known-hosts alone when given,
        else what `ssh -G` says."""
        if self.opts.known_hosts:
            return [self.opts.known_hosts], []
        from patcher.transports import sshconfig

        try:
            resolved = sshconfig.resolve(
                self.target,
                self.host,
                self.user,
                self.port,
                self.opts.ssh_config,
                self.opts.connect_timeout,
            )
        except HostError:
            resolved = None
        if resolved is None:
            return [], []
        return resolved.user_known_hosts, resolved.global_known_hosts


def make(target: Target, settings: Settings) -> OpenSshTransport:
    """Kind `openssh`: the `ssh` program as the agent's child process."""
    return OpenSshTransport(
        target.name, target.address, target.user, target.port, options(target, settings)
    )
