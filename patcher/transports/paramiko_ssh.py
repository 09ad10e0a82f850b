"""The agent over paramiko (through fabric), in-process: `--ssh-client paramiko`, or `auto`
where no OpenSSH client is on PATH. Only this module knows fabric and paramiko, and imports
them when the first such transport is made (a local run never pays their import).

One SSH connection per host, one session channel on it, hence one agent process for every
call (reopened only after a timeout or a lost agent); the channel's bytes move through the one
read loop of patcher.transports.base, with this channel's primitives.
"""

from __future__ import annotations

import os
import time
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patcher.errors import AgentError, HostError, Unreachable
from patcher.transports import session
from patcher.transports.base import ERR_KEEP, SessionTransport, read_answer, wait
from patcher.transports.bundle import (
    MISS,
    agent_bundle,
    decode_answer,
    miss_reason,
    request_line,
)
from patcher.transports.ssh import SshOptions, exec_error, options, remote_command

if TYPE_CHECKING:
    import paramiko

    from patcher.transports import Settings, Target, sshconfig


@cache
def _quiet_paramiko() -> None:
    """paramiko's transport thread logs connection failures with tracebacks to stderr through
    logging's last-resort handler; vpatch reports them itself, once, as per-host errors. (Set
    when the first paramiko transport is made: logging is not imported otherwise.)"""
    import logging

    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    logging.getLogger("paramiko").propagate = False


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's `SHA256:...` form, as `ssh-keygen -lf` prints it."""
    import base64
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey, authority: str | None) -> None:
        super().__init__(hostname)
        self.hostname, self.key, self.authority = hostname, key, authority


class _RevokedHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


class _HostKeyPolicy:
    """Refuse unknown keys (fabric would auto-add them), or record them when the user said so;
    a revoked key is refused either way (transports.sshconfig drops it from the known keys, so
    paramiko asks here about it).

    paramiko only calls `missing_host_key`, so no base class is needed (and importing paramiko
    stays deferred until an SSH target is actually used: local runs start ~0.2 s faster)."""

    def __init__(self, accept_new: bool, known_hosts: Path, known: sshconfig.KnownHosts) -> None:
        self.accept_new = accept_new
        self.known_hosts = known_hosts
        self.known = known

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if self.known.is_revoked(key):
            raise _RevokedHostKey(hostname, key)
        if not self.accept_new:
            raise _UnknownHostKey(hostname, key, self.known.authority_for(hostname))
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.known_hosts, "a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class SshTransport(SessionTransport):
    """Runs the agent on a remote interpreter over ONE SSH connection: one session channel,
    hence one agent process, for every call (reopened only after a timeout or a lost agent)."""

    def __init__(
        self, target: str, host: str, user: str | None, port: int | None, opts: SshOptions
    ) -> None:
        """`target` labels the host in reports; host/user/port may be ssh_config aliases."""
        _quiet_paramiko()
        from fabric import Config, Connection

        from patcher.transports import sshconfig

        super().__init__()
        self.target = target
        self.opts = opts
        self.call_timeout = opts.call_timeout
        connect_kwargs: dict[str, Any] = {
            "banner_timeout": opts.connect_timeout,
            "auth_timeout": opts.connect_timeout,
            "channel_timeout": opts.connect_timeout,
        }
        resolved = sshconfig.resolve(
            target, host, user, port, opts.ssh_config, opts.connect_timeout
        )
        if resolved is not None and not resolved.proxied:
            # OpenSSH resolved it (Include, Match...): connect to exactly that, with no second
            # opinion from paramiko's parser (an empty SSHConfig loads no file).
            import paramiko

            config = Config(ssh_config=paramiko.SSHConfig())
            host, user, port = resolved.hostname, resolved.user, resolved.port
            keys = [opts.identity] if opts.identity else resolved.identity_files
            if resolved.identities_only:
                connect_kwargs["look_for_keys"] = False
            if not resolved.agent:
                connect_kwargs["allow_agent"] = False
        else:
            # No OpenSSH client, or a ProxyJump/ProxyCommand host: fabric's own ssh_config
            # handling (paramiko's parser) connects, through the proxy when there is one.
            config = Config(runtime_ssh_path=opts.ssh_config) if opts.ssh_config else Config()
            keys = [opts.identity] if opts.identity else []
        if keys:
            connect_kwargs["key_filename"] = keys
        self.conn = Connection(
            host,
            user=user,
            port=port,
            config=config,
            connect_timeout=opts.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        user_files, system_files = self._known_hosts_files(resolved)
        self.known_hosts = Path(user_files[0])  # where --accept-new-host-key records keys
        self.known = sshconfig.load_known_hosts(user_files, system_files)
        client = self.conn.client
        # fabric AUTO-ADDS unknown keys: our policy instead, and the keys of every known_hosts
        # file OpenSSH would read (@revoked and @cert-authority understood).
        client._system_host_keys = self.known.system
        client._host_keys = self.known.user
        client.set_missing_host_key_policy(
            _HostKeyPolicy(opts.accept_new_host_key, self.known_hosts, self.known)
        )
        self._chan: paramiko.Channel | None = None  # the agent session, opened by the 1st call
        self._out, self._err = bytearray(), bytearray()
        self._open()

    def _known_hosts_files(
        self, resolved: sshconfig.Resolved | None
    ) -> tuple[list[str], list[str]]:
        """(user files, global files): --known-hosts alone when given; else what `ssh -G`
        lists; else paramiko's reading of the ssh_config, with OpenSSH's defaults."""
        if self.opts.known_hosts:
            return [self.opts.known_hosts], []
        if resolved is not None and resolved.user_known_hosts:
            return resolved.user_known_hosts, resolved.global_known_hosts
        cfg = self.conn.ssh_config

        def listed(key: str, default: str) -> list[str]:
            value = str(cfg.get(key) or default)
            return [os.path.expanduser(p) for p in value.split()]

        return (
            listed("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2"),
            listed("globalknownhostsfile", "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"),
        )

    def _open(self) -> None:
        import paramiko

        t = self.target
        started = time.monotonic()
        try:
            self.conn.open()
        except _UnknownHostKey as exc:
            hint = (
                f"check the fingerprint, then rerun with --accept-new-host-key or add it with "
                f"`ssh-keyscan` to {self.known_hosts}"
            )
            if exc.authority:
                hint = (
                    f"{exc.authority} trusts a @cert-authority for this host, but vpatch's SSH "
                    "client (paramiko) cannot check host certificates: " + hint
                )
            raise HostError(
                f"{t}: unknown host key for {exc.hostname} ({exc.key.get_name()} "
                f"{fingerprint(exc.key)}), refused",
                hint,
            ) from None
        except _RevokedHostKey as exc:
            raise HostError(
                f"{t}: the host key of {exc.hostname} ({exc.key.get_name()} "
                f"{fingerprint(exc.key)}) is marked @revoked in known_hosts; refused",
                "a revoked key is never trusted: find out why it was revoked, and give the host "
                "a new key",
            ) from None
        except paramiko.BadHostKeyException as exc:
            if self.known.is_revoked(exc.key):
                raise HostError(
                    f"{t}: the host key of {exc.hostname} ({fingerprint(exc.key)}) is marked "
                    "@revoked in known_hosts; refused",
                    "a revoked key is never trusted: find out why, give the host a new key",
                ) from None
            raise HostError(
                f"{t}: HOST KEY CHANGED for {exc.hostname}: got {fingerprint(exc.key)}, "
                f"known_hosts has {fingerprint(exc.expected_key)}; refused (possible "
                "man-in-the-middle, or the host was reinstalled)",
                f"if the change is expected, remove the old key from {self.known_hosts}",
            ) from None
        except paramiko.AuthenticationException as exc:
            raise HostError(
                f"{t}: authentication failed ({exc})",
                "check --identity / the user, and that the key is in authorized_keys",
            ) from None
        except TimeoutError:
            raise Unreachable(
                f"{t}: connection timed out after {self.opts.connect_timeout:g}s",
                "is the host up and the port reachable?",
            ) from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            if time.monotonic() - started >= self.opts.connect_timeout * 0.9:
                raise Unreachable(
                    f"{t}: connection timed out after {self.opts.connect_timeout:g}s "
                    f"(no SSH banner/answer: {exc or type(exc).__name__})",
                    "is the host up, and is it sshd listening on that port?",
                ) from None
            raise Unreachable(
                f"{t}: cannot connect ({exc or type(exc).__name__})",
                "is sshd running there and the address right?",
            ) from None
        transport = self.conn.client.get_transport()
        if transport is not None:
            transport.set_keepalive(self.opts.keepalive)

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request on the session channel (opened on first use): send a line, read until
        an answer line arrives, the agent ends, or the deadline passes."""
        import paramiko

        transport = self.conn.client.get_transport()
        if transport is None or not transport.is_active():
            self._drop()
            raise HostError(f"{self.target}: connection lost", "run `vpatch status` on this host")
        deadline = time.monotonic() + timeout
        payload = request_line(request)
        self._err = bytearray()
        try:
            chan = self._chan
            if chan is not None and (chan.closed or chan.eof_received or chan.exit_status_ready()):
                self._drop()  # the agent ended between calls: nothing was asked of it
                chan = None
            if chan is None:
                chan = transport.open_session(timeout=self.opts.connect_timeout)
                chan.exec_command(
                    remote_command(
                        self.opts.python,
                        self.opts.sudo,
                        self.opts.trusted_python,
                        self.opts.sudo_user,
                        self.opts.run_as,
                        kept=self.opts.keep_agent,
                    )
                )
                self._chan, self._out, fresh = chan, bytearray(), True
                if not self.opts.keep_agent:  # the loader reads the bundle first (BOOT)
                    payload = agent_bundle() + payload
                    self.bundles_sent += 1
            else:
                fresh = False
            # Our own send loop, not invoke's stdin pump (it reads 1 byte per 10 ms), and not a
            # blocking sendall: output is drained while the payload goes out.
            link = _Channel(self, chan, transport)
            line = read_answer(link, self.target, self._out, payload, deadline, self.budget)
            if fresh:
                self.kept_miss = ""
            if fresh and self.opts.keep_agent and line is not None and line.startswith(MISS):
                # The host keeps no usable copy of the agent (bundle.kept_boot): the bundle,
                # then this request again, as the pipe sessions do (pipe.PipeTransport._call).
                self.kept_miss = miss_reason(line)
                self.bundles_sent += 1
                again = b"\n" + agent_bundle() + payload
                line = read_answer(link, self.target, self._out, again, deadline, self.budget)
        except TimeoutError:
            self._drop()
            raise session.timed_out(self.target, timeout) from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            self._drop()
            raise session.lost(self.target, why=str(exc or type(exc).__name__)) from None
        if line is None:  # the agent (or the connection) ended without an answer line
            return self._ended(chan)
        try:
            answer = decode_answer(self.target, line, bytes(self._err), 0)
        except AgentError:
            self._drop()  # it printed something that is not an answer: out of step
            raise
        from patcher.agent import protocol  # loaded by the engine already: a lookup

        if answer.get(protocol.ENDED) is True:
            self._drop()  # its agent ended the session (protocol.LAST): the next call opens one
        return answer

    def _drain_err(self, chan: paramiko.Channel) -> None:
        """Move whatever stderr has arrived into our buffer, keeping its tail: a chatty agent
        never stalls on a full stderr window."""
        while chan.recv_stderr_ready():
            self._err += chan.recv_stderr(1 << 20)
        if len(self._err) > ERR_KEEP:
            del self._err[:-ERR_KEEP]

    def _ended(self, chan: paramiko.Channel) -> dict[str, Any]:
        """The agent (or the connection) ended without an answer line: why, from its exit
        status and stderr, worded as when every call was its own process."""
        status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        while chan.recv_ready():
            self._out += chan.recv(1 << 20)
        self._drain_err(chan)
        out, err = bytes(self._out), bytes(self._err)
        self._drop()
        if status != 0 and not out.strip():
            raise self._exec_error(err, status)
        return decode_answer(self.target, out, err, status)

    def _end(self, kill: bool) -> int:
        self._drop()
        return 0

    def _drop(self) -> None:
        """Forget the session (closing its channel); the next call starts a fresh agent."""
        chan, self._chan = self._chan, None
        self._out = bytearray()
        if chan is not None:
            try:
                chan.close()
            except Exception:  # a dead transport may raise anything here
                pass

    def _exec_error(self, err: bytes, status: int) -> HostError:
        return exec_error(self.target, self.opts, err, status)

    def close(self) -> None:
        """EOF on the session's stdin so the agent exits (waited for briefly), then disconnect."""
        import paramiko

        got = self._lock.acquire(timeout=5)
        try:
            chan, self._chan = self._chan, None
            if chan is not None and not chan.closed:
                try:
                    chan.shutdown_write()
                    chan.status_event.wait(2.0)  # set by the exit status, or when it closes
                    chan.close()
                except (OSError, paramiko.SSHException, EOFError):
                    pass  # the connection is gone already: so is the agent's stdin
        finally:
            if got:
                self._lock.release()
        self.conn.close()


class _Channel:
    """The base.Link primitives on one paramiko session channel (all non-blocking: paramiko
    buffers what arrives; its channel's fileno() wakes a wait when stdout has data)."""

    def __init__(self, owner: SshTransport, chan: paramiko.Channel, transport: Any) -> None:
        self.owner, self.chan, self.transport = owner, chan, transport

    def _over(self) -> bool:
        c = self.chan
        return (
            c.closed or (c.eof_received and c.exit_status_ready()) or not self.transport.is_active()
        )

    def wait(self, sending: bool, timeout: float) -> tuple[bool, bool]:
        c = self.chan
        if not (c.recv_ready() or c.recv_stderr_ready() or (sending and c.send_ready())):
            if not self._over():
                wait([c], [], min(timeout, 0.05))
        return True, sending and c.send_ready()

    def send(self, data: memoryview) -> int | None:
        import paramiko

        try:
            return int(self.chan.send(bytes(data[: 1 << 16])))  # one packet, never blocks
        except (OSError, paramiko.SSHException):
            # The remote command ended before reading its input (e.g. the interpreter is
            # missing): its exit status and stderr say why.
            return None

    def recv(self) -> bytes | None:
        self.owner._drain_err(self.chan)
        if self.chan.recv_ready():
            return bytes(self.chan.recv(1 << 20))
        return None if self._over() else b""


def make(target: Target, settings: Settings) -> SshTransport:
    """Kind `paramiko`: an SSH connection made in this process."""
    return SshTransport(
        target.name, target.address, target.user, target.port, options(target, settings)
    )
