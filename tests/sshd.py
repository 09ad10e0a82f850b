"""Real SSH test hosts: one private `/usr/sbin/sshd` per host on a 127.0.0.1 port.

vpatch's remote path (connect, known_hosts, agent upload, sudo, timeouts, cut connections) is
only worth testing against a real sshd, so each "host" here is one:

- its own host key (made at test time), config, port, pid file and log, all in the lab dir;
- its own mount + UTS namespace (`unshare`), in which a host-private dir is bind-mounted over
  /root and the hostname is `hN`. The machine's real /root has a pyenv `.bashrc`; without the
  mask every remote command pays ~0.5 s for it and remote `python3` becomes the machine's own
  interpreter, so a test could patch real site-packages. With the mask, /root is whatever
  `env_factory` put there, and `SetEnv PATH=...` makes remote `python3` /usr/bin/python3.
- a non-root lab logs in as `vpatch-test`, whose home and /etc/sudoers.d are also per-host
  bind mounts: whether sudo works is a property of the lab, never of the machine or of another
  lab running at the same time, and nothing is left in /etc when a lab dies uncleanly.

Teardown signals only processes this module started: the listener is our own child, and its
descendants are found by parent PID under /proc, frozen (SIGSTOP) so they cannot fork or be
reaped while we look, and signalled through pidfds, so a recycled PID is never hit. Nothing is
ever looked up or killed by name.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import fcntl
import hashlib
import os
import pwd
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tests import standin

SSHD = "/usr/sbin/sshd"  # absolute: sshd re-execs itself per connection and refuses a relative path
ADDRESS = "127.0.0.1"  # the only address the harness ever uses
NONROOT_USER = "vpatch-test"
# Fixed, machine-wide mount point for the non-root user's home (it is in /etc/passwd, so it must
# not depend on any one lab). Each host bind-mounts its own private dir over it.
NONROOT_BASE = Path("/var/lib/vpatch-test")
NONROOT_HOME = NONROOT_BASE / "home"
SUDOERS_D = Path("/etc/sudoers.d")
HOST_PATH = "/usr/local/bin:/usr/bin:/bin"
READY_TIMEOUT = 10.0
KILL_TIMEOUT = 5.0

EnvFactory = Callable[["SshHost"], None]


class SshdError(RuntimeError):
    """A host did not come up (the message carries the tail of its log)."""


# --------------------------------------------------------------------------------------------
# Processes: find descendants by parent PID, signal them through pidfds.


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of `pid`, or None if it is gone. comm may hold spaces or ')': split after
    the last ')'."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def _children_map() -> dict[int, list[int]]:
    """ppid -> child pids, from a scan of /proc (this kernel has no /proc/PID/task/*/children)."""
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st is not None:
            out.setdefault(st[1], []).append(int(entry.name))
    return out


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


@dataclass
class _Proc:
    """A process we hold a pidfd for: signals go to that very process, never to a reused PID."""

    pid: int
    fd: int

    def signal(self, sig: int) -> None:
        try:
            signal.pidfd_send_signal(self.fd, sig)
        except ProcessLookupError:
            pass

    def exited(self) -> bool:
        return bool(select.select([self.fd], [], [], 0)[0])

    def close(self) -> None:
        os.close(self.fd)


def _freeze_tree(root: _Proc) -> list[_Proc]:
    """SIGSTOP `root` and every descendant, returning the descendants (root excluded).

    A stopped parent can neither fork nor reap, so a child PID seen under it cannot be recycled
    before we open its pidfd; the ppid re-check after opening catches a child that exited and
    whose PID was reused elsewhere in the meantime."""
    root.signal(signal.SIGSTOP)
    frozen: dict[int, _Proc] = {root.pid: root}
    while True:
        found = False
        for parent, kids in _children_map().items():
            if parent not in frozen:
                continue
            for pid in kids:
                if pid in frozen:
                    continue
                try:
                    fd = os.pidfd_open(pid)
                except ProcessLookupError:
                    continue
                proc = _Proc(pid, fd)
                st = _stat(pid)
                if st is None or st[1] != parent:
                    proc.close()
                    continue
                proc.signal(signal.SIGSTOP)
                frozen[pid] = proc
                found = True
        if not found:
            break
    del frozen[root.pid]
    return list(frozen.values())


def _kill_and_wait(procs: list[_Proc], timeout: float = KILL_TIMEOUT) -> None:
    for p in procs:
        p.signal(signal.SIGKILL)
    deadline = time.monotonic() + timeout
    for p in procs:
        while not p.exited() and time.monotonic() < deadline:
            time.sleep(0.01)
        p.close()


# --------------------------------------------------------------------------------------------
# Hosts.


def _free_ports(n: int) -> list[int]:
    """n distinct free ports: all sockets stay bound until all are picked."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((ADDRESS, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _listening_inode(port: int) -> str | None:
    """Inode of the LISTEN socket on ADDRESS:port, from /proc/net/tcp."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if parts[1] == want and parts[3] == "0A":
                return parts[9]
    return None


def _owns_socket(pid: int, inode: str) -> bool:
    target = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


@dataclass(eq=False)  # a host is itself, not its field values
class SshHost:
    """One sshd. `home` is the dir every session sees as /root."""

    name: str
    address: str
    port: int
    user: str
    home: Path
    known_hosts_line: str
    host_key_pub: Path
    pid: int = 0
    # The non-root user's home (its own dir, mounted at NONROOT_HOME); equals `home` for root.
    user_home: Path = field(default=Path())
    dir: Path = field(default=Path(), repr=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # Commands left running by kill_sessions(keep_commands=True); stop() kills them.
    _kept: list[_Proc] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _command(self) -> list[str]:
        q = shlex.quote
        mounts = [
            f"mount --bind {q(str(self.home))} /root",
            # sudo warns "unable to resolve host hN" on stderr without this.
            f"mount --bind {q(str(self.dir / 'hosts'))} /etc/hosts",
        ]
        if self.user != "root":
            mounts.append(f"mount --bind {q(str(self.user_home))} {q(str(NONROOT_HOME))}")
            if SUDOERS_D.is_dir():
                mounts.append(f"mount --bind {q(str(self.dir / 'sudoers.d'))} {SUDOERS_D}")
        script = " && ".join(
            [
                *mounts,
                f"hostname {q(self.name)}",
                f"exec {SSHD} -D -e -f {q(str(self.config))} -E {q(str(self.log))}",
            ]
        )
        # No --fork: unshare execs sh, which execs sshd, so the PID we spawn IS the listener.
        return ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script]

    def _spawn(self) -> None:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation dir
        with open(self.log, "ab") as log:  # mount/hostname errors land next to sshd's own
            self._proc = subprocess.Popen(
                self._command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        self.pid = self._proc.pid

    def _wait_ready(self, deadline: float) -> None:
        """Ready = our PID owns the LISTEN socket on our port and it answers with a banner.

        The ownership check matters: if someone else grabbed the port between our probe and
        sshd's bind, sshd dies and the banner we would read is not ours."""
        assert self._proc is not None
        while True:
            if self._proc.poll() is not None:
                raise SshdError(
                    f"{self.name}: sshd exited with {self._proc.returncode}:\n{_tail(self.log)}"
                )
            inode = _listening_inode(self.port)
            if inode is not None and _owns_socket(self.pid, inode):
                try:
                    with socket.create_connection((self.address, self.port), timeout=2) as s:
                        s.settimeout(2)
                        if s.recv(64).startswith(b"SSH-2.0"):
                            # Answer in kind, or sshd logs every probe as an error.
                            s.sendall(b"SSH-2.0-vpatch-readiness-probe\r\n")
                            return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise SshdError(
                    f"{self.name}: sshd not ready on port {self.port}:\n{_tail(self.log)}"
                )
            time.sleep(0.01)

    def start(self) -> None:
        """(Re)start with the same config, keys and port, and wait until it serves."""
        with self._lock:
            if self.running:
                return
            self._spawn()
            try:
                self._wait_ready(time.monotonic() + READY_TIMEOUT)
            except SshdError:
                self._stop_locked()
                raise

    def stop(self) -> None:
        """Kill our sshd, every session under it and any commands kept by kill_sessions()."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                listener = _Proc(proc.pid, os.pidfd_open(proc.pid))
                sessions = _freeze_tree(listener)
                listener.signal(signal.SIGKILL)
                _kill_and_wait(sessions)
                listener.close()
            proc.wait(timeout=KILL_TIMEOUT)
            self._proc = None
        _kill_and_wait(self._kept)
        self._kept = []

    def session_pids(self) -> list[int]:
        """PIDs under the listener (per-connection sshds and the commands they run)."""
        if not self.running:
            return []
        cmap = _children_map()
        out: list[int] = []
        todo = list(cmap.get(self.pid, []))
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(cmap.get(pid, []))
        return out

    def kill_sessions(self, keep_commands: bool = False) -> None:
        """Cut every open connection mid-command; the listener keeps accepting new ones.

        keep_commands=True kills only the per-connection sshds and leaves the commands they ran
        to finish on their own, like a network cut, where the client cannot know the outcome.
        Those commands are still ours: stop()/close() kill them."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return
            listener = _Proc(proc.pid, os.pidfd_open(proc.pid))
            try:
                sessions = _freeze_tree(listener)
                if keep_commands:
                    doomed = [p for p in sessions if _exe(p.pid) == SSHD]
                    kept = [p for p in sessions if p not in doomed]
                    _kill_and_wait(doomed)
                    for p in kept:
                        p.signal(signal.SIGCONT)
                    self._kept.extend(kept)
                else:
                    _kill_and_wait(sessions)
            finally:
                listener.signal(signal.SIGCONT)
                listener.close()
            # A killed session is a zombie until the listener, running again, reaps it: return
            # only when no killed PID is left under it, so callers see the sessions gone.
            gone = {p.pid for p in sessions if not keep_commands or p not in self._kept}
            deadline = time.monotonic() + KILL_TIMEOUT
            while gone & set(self.session_pids()) and time.monotonic() < deadline:
                time.sleep(0.01)


# --------------------------------------------------------------------------------------------
# Labs.


class LabFactory(Protocol):
    """The `ssh_lab_factory` fixture's type."""

    def __call__(
        self,
        n: int,
        env_factory: EnvFactory | None = None,
        user: str = "root",
        sudoers: bool = False,
    ) -> SshLab: ...


@dataclass(eq=False)  # identity semantics: labs live in a set
class SshLab:
    """n hosts sharing one client key, one known_hosts and one ssh_config."""

    root: Path
    client_key: Path
    known_hosts: Path
    ssh_config: Path
    hosts: list[SshHost]

    def host(self, which: SshHost | str | int) -> SshHost:
        if isinstance(which, SshHost):
            return which
        if isinstance(which, int):
            return self.hosts[which]
        for h in self.hosts:
            if h.name == which:
                return h
        raise KeyError(which)

    def ssh_argv(self, host: SshHost | str | int, *cmd: str) -> list[str]:
        """The system ssh command line for `cmd` on `host` (for Popen, e.g. a long command).

        One argument is a remote shell command line, as ssh itself takes it; several are an
        argv, quoted so the remote shell sees exactly those words (ssh would join them with
        spaces, so `sh -c "echo $HOME"` would otherwise lose its quoting)."""
        remote = cmd[0] if len(cmd) == 1 else shlex.join(cmd)
        return ["ssh", "-F", str(self.ssh_config), "-T", self.host(host).name, "--", remote]

    def ssh(
        self,
        host: SshHost | str | int,
        *cmd: str,
        input: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run `cmd` with the system ssh client (BatchMode, our key, our known_hosts only)."""
        return subprocess.run(
            self.ssh_argv(host, *cmd),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    def close(self, remove: bool = True) -> None:
        """Stop every host; remove the lab dir unless the caller keeps it (e.g. for logs)."""
        errors: list[BaseException] = []
        for h in self.hosts:
            try:
                h.stop()
            except Exception as e:  # stop the others regardless
                errors.append(e)
        _LIVE.discard(self)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)
        if errors:
            raise errors[0]


# Strong refs: a lab the caller dropped without close() still has sshds to stop at exit.
_LIVE: set[SshLab] = set()


@atexit.register
def _close_all() -> None:
    """Last resort if a caller forgot close(): never leave our sshds behind the interpreter."""
    for lab in list(_LIVE):
        lab.close(remove=False)


def _keygen(path: Path, comment: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_ok(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SshdError(f"{p.args!r} failed: {err.decode(errors='replace')}")


def _sshd_config(host: SshHost, authorized_keys: str) -> str:
    d = host.dir
    return "\n".join(
        [
            f"Port {host.port}",
            f"ListenAddress {ADDRESS}",
            f"HostKey {d / 'host_key'}",
            f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized_keys}",
            f"AllowUsers {host.user}",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "StrictModes no",  # lab dirs live under /tmp, which is world-writable
            "MaxStartups 200",
            "MaxSessions 64",
            "UseDNS no",
            "PrintMotd no",
            "X11Forwarding no",
            "Subsystem sftp internal-sftp",
            f"SetEnv PATH={HOST_PATH}",
            "LogLevel ERROR",
            "",
        ]
    )


def _client_config(lab_root: Path, hosts: list[SshHost]) -> str:
    lines: list[str] = []
    for h in hosts:
        lines += [
            f"Host {h.name}",
            f"  HostName {h.address}",
            f"  Port {h.port}",
            f"  User {h.user}",
            "",
        ]
    lines += [
        "Host *",
        f"  IdentityFile {lab_root / 'client_key'}",
        "  IdentitiesOnly yes",
        "  IdentityAgent none",
        f"  UserKnownHostsFile {lab_root / 'known_hosts'}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  UpdateHostKeys no",
        "  CheckHostIP no",
        # The default post-quantum kex costs ~0.2 s per connection on both ends; the server
        # keeps its defaults, so clients under test (paramiko) negotiate as they would anyway.
        "  KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org",
        "  BatchMode yes",
        "  ConnectTimeout 5",
        "  ControlMaster no",
        "  ControlPath none",
        "  LogLevel ERROR",
        "",
    ]
    return "\n".join(lines)


def _ensure_nonroot_user() -> pwd.struct_passwd:
    """Create `vpatch-test` once per machine (under a lock: labs may start concurrently).

    Its password field is '*' rather than useradd's '!': with UsePAM no, sshd treats a '!'
    password as a locked account and refuses even key logins."""
    NONROOT_HOME.mkdir(parents=True, exist_ok=True)
    os.chmod(NONROOT_BASE, 0o755)
    with open(NONROOT_BASE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return pwd.getpwnam(NONROOT_USER)
        except KeyError:
            pass
        subprocess.run(
            [
                "useradd",
                "--system",
                "-M",
                "-d",
                str(NONROOT_HOME),
                "-s",
                "/bin/sh",
                "-p",
                "*",
                NONROOT_USER,
            ],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(NONROOT_USER)


def ensure_sudo() -> None:
    """Install sudo if missing (the sudo tests need the real setuid binary and its policy)."""
    if shutil.which("sudo") and SUDOERS_D.is_dir():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "sudo"]
    if subprocess.run(install, capture_output=True, env=env).returncode != 0:
        # A fresh machine may have no package lists yet.
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, env=env)
        subprocess.run(install, check=True, capture_output=True, env=env)


def _lock_down(home: Path) -> None:
    """What a non-root user sees in /root: root-owned, dirs 755, files 644 (755 if executable).

    The user must be able to read and run the env but never write it, or sudo tests prove
    nothing."""
    for dirpath, dirs, files in os.walk(home):
        os.chown(dirpath, 0, 0)
        os.chmod(dirpath, 0o755)
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            os.chown(p, 0, 0, follow_symlinks=False)
            if name in files and not os.path.islink(p):
                os.chmod(p, 0o755 if os.stat(p).st_mode & 0o111 else 0o644)


def start_lab(
    n: int,
    root: Path,
    env_factory: EnvFactory | None = None,
    user: str = "root",
    sudoers: bool = False,
) -> SshLab:
    """Start n hosts h1..hn, all ready to serve, under `root` (created; must be empty).

    `env_factory(host)` runs after the host's dirs exist and before its sshd starts, so it can
    populate `host.home` (seen as /root on the host). It is called concurrently for different
    hosts (a stand-in env costs ~0.7 s of pip), so it must only touch its own host's dirs.
    `user` is "root" or NONROOT_USER; `sudoers=True` lets NONROOT_USER run `sudo -n` as root.
    """
    if user not in ("root", NONROOT_USER):
        raise ValueError(f"user must be 'root' or {NONROOT_USER!r}, not {user!r}")
    if sudoers and user == "root":
        raise ValueError("sudoers=True only makes sense for a non-root lab")
    if not os.access(SSHD, os.X_OK):
        raise SshdError(f"{SSHD} is missing: apt-get install openssh-server")
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise ValueError(f"lab root {root} is not empty")
    uid = gid = 0
    if user != "root":
        pw = _ensure_nonroot_user()
        uid, gid = pw.pw_uid, pw.pw_gid
        if sudoers:
            ensure_sudo()

    client_key = root / "client_key"
    keygens = [_keygen(client_key, "vpatch-test-client")]
    hosts: list[SshHost] = []
    for i, port in enumerate(_free_ports(n), 1):
        d = root / f"h{i}"
        home = d / "home"
        home.mkdir(parents=True)
        h = SshHost(
            f"h{i}", ADDRESS, port, user, home, "", d / "host_key.pub", dir=d, user_home=home
        )
        if user != "root":
            h.user_home = d / "userhome"
            (h.user_home / ".ssh").mkdir(parents=True)
            (d / "sudoers.d").mkdir(mode=0o755)
        keygens.append(_keygen(d / "host_key", f"{h.name}-host-key"))
        hosts.append(h)
    _wait_ok(keygens)
    pub = (root / "client_key.pub").read_text()

    if user == "root":
        authorized = root / "authorized_keys"
        authorized.write_text(pub)
        authorized_path = str(authorized)
    else:
        # sshd reads authorized keys as the user, and the lab dir sits under pytest's 0700 tmp
        # dirs; read through the per-host bind mount, only the mount itself must be traversable.
        authorized_path = str(NONROOT_HOME / ".ssh" / "authorized_keys")
    for h in hosts:
        key = h.host_key_pub.read_text().split()
        h.known_hosts_line = f"[{h.address}]:{h.port} {key[0]} {key[1]}"
        h.config.write_text(_sshd_config(h, authorized_path))
        etc_hosts = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
        (h.dir / "hosts").write_text(f"{etc_hosts.rstrip()}\n127.0.1.1\t{h.name}\n".lstrip())
        if user != "root":
            (h.user_home / ".ssh" / "authorized_keys").write_text(pub)
            for p in (h.user_home, h.user_home / ".ssh", h.user_home / ".ssh" / "authorized_keys"):
                os.chown(p, uid, gid)
            if sudoers:
                rule = h.dir / "sudoers.d" / NONROOT_USER
                rule.write_text(f"{NONROOT_USER} ALL=(root) NOPASSWD: ALL\n")
                os.chmod(rule, 0o440)

    known_hosts = root / "known_hosts"
    known_hosts.write_text("".join(h.known_hosts_line + "\n" for h in hosts))
    ssh_config = root / "ssh_config"
    ssh_config.write_text(_client_config(root, hosts))
    lab = SshLab(root, client_key, known_hosts, ssh_config, hosts)
    _LIVE.add(lab)

    try:
        if env_factory is not None:
            workers = max(1, min(n, os.cpu_count() or 1))
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                for f in [pool.submit(env_factory, h) for h in hosts]:
                    f.result()
        for h in hosts:
            if user != "root":
                _lock_down(h.home)
            else:
                os.chmod(h.home, 0o700)
        _start_all(hosts)
    except BaseException:
        lab.close(remove=False)
        raise
    return lab


def _start_all(hosts: list[SshHost]) -> None:
    """Spawn every sshd first, then wait: n hosts come up in about the time of one.

    A host whose port was taken in the meantime gets a fresh port (at most 3 tries); its
    known_hosts line and the client config are rewritten to match."""
    for h in hosts:
        h._spawn()
    for attempt in range(3):
        failed: list[SshHost] = []
        deadline = time.monotonic() + READY_TIMEOUT
        for h in hosts:
            try:
                h._wait_ready(deadline)
            except SshdError:
                if attempt == 2 or "Address already in use" not in _tail(h.log):
                    raise
                failed.append(h)
        if not failed:
            return
        for h, port in zip(failed, _free_ports(len(failed)), strict=True):
            h.stop()
            h.port = port
            key = h.known_hosts_line.split(" ", 1)[1]
            h.known_hosts_line = f"[{h.address}]:{port} {key}"
            h.config.write_text(
                "\n".join(
                    f"Port {port}" if line.startswith("Port ") else line
                    for line in h.config.read_text().splitlines()
                )
                + "\n"
            )
            h._spawn()
        root = hosts[0].dir.parent
        (root / "known_hosts").write_text("".join(x.known_hosts_line + "\n" for x in hosts))
        (root / "ssh_config").write_text(_client_config(root, hosts))
        hosts = failed


_TEMPLATES: dict[tuple[str, str], Path] = {}
_TEMPLATES_LOCK = threading.Lock()


def _standin_template(version: str, config: str) -> Path:
    """One pip install per (version, config) per process; hosts get copies.

    pip costs ~0.7 s of CPU per env; a lab of 8 would spend seconds on identical installs.
    A copy keeps mtimes (so pip's .pyc stay valid) and gives each host its own inodes."""
    key = (version, hashlib.sha256(config.encode()).hexdigest())
    with _TEMPLATES_LOCK:
        if key not in _TEMPLATES:
            base = Path(tempfile.mkdtemp(prefix="vpatch-standin-"))
            atexit.register(shutil.rmtree, base, ignore_errors=True)
            whl = standin.build_wheel(base, version, config)
            venv = base / "ml-env"
            standin.install_venv(venv, whl)
            _TEMPLATES[key] = venv
        return _TEMPLATES[key]


def standin_env_factory(
    host: SshHost, version: str = "1.0.0", config: str = standin.CONFIG_PY
) -> None:
    """A venv at `home/ml-env` (the host's /root/ml-env) with the stand-in installed by pip.

    Built from /usr/bin/python3, never pyenv's. The venv is built elsewhere and copied, which
    is fine: only the `bin/python -> /usr/bin/python3` symlink and `pyvenv.cfg` next to bin/
    matter, since Python derives sys.prefix from where it finds pyvenv.cfg; the same venv works
    when seen as /root/ml-env. Use functools.partial for another version or config."""
    shutil.copytree(_standin_template(version, config), host.home / "ml-env", symlinks=True)
