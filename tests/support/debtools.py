"""The monitoring systems' own checkers, to judge what docs/monitoring.md and `vpatch status
--format prometheus|nagios` hand them: Prometheus' `promtool` (`check rules`, `test rules`,
`check metrics`: the exposition format's linter) and Nagios Core's `nagios4 -v` (the
pre-flight check of an object configuration).

Installing Debian's `prometheus` or `nagios4` would pull a web UI's worth of dependencies and
start services; each tool is one binary inside a package (promtool is static, nagios4 needs
only libc). So the package is fetched with apt's own client (`apt-get download`, its archive
checked against the signed index apt already has) into the test cache and only that binary
is unpacked from it, once; nothing is installed and nothing of it is committed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.envs import CACHE

HOME = CACHE / "debtools"


def unpacked(package: str, member: str) -> Path:
    """The path of `member` (e.g. usr/bin/promtool) of Debian's `package`, fetched and
    unpacked on first use."""
    path = HOME / package / Path(member).name
    if path.is_file():
        return path
    assert shutil.which("apt-get") and shutil.which("dpkg-deb"), (
        f"{member} comes from Debian's {package} package: apt-get and dpkg-deb are needed"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        os.chmod(tmp, 0o755)  # apt's download user (_apt) writes here when it can
        got = subprocess.run(
            ["apt-get", "download", "-q", package],
            cwd=tmp, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        debs = sorted(Path(tmp).glob(f"{package}_*.deb"))
        assert got.returncode == 0 and debs, f"apt-get download {package}: {got.stderr[-800:]}"
        tree = Path(tmp) / "x"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tree)], check=True, timeout=300)
        os.replace(tree / member, path)  # whole or absent
    return path


def promtool(*args: str | Path, text: str | None = None) -> tuple[int, str]:
    """`promtool ARGS` (`text` on stdin): (exit status, what it printed)."""
    argv = [str(unpacked("prometheus", "usr/bin/promtool")), *map(str, args)]
    done = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


# What `nagios4 -v` needs around a check's definitions: a time period, a contact, the
# `generic-host`/`generic-service` templates a stock configuration has, and the host
# `monitoring` the recipe's service runs on.
NAGIOS_BASE = """
define timeperiod {
    timeperiod_name 24x7
    alias           always
    sunday 00:00-24:00
    monday 00:00-24:00
    tuesday 00:00-24:00
    wednesday 00:00-24:00
    thursday 00:00-24:00
    friday 00:00-24:00
    saturday 00:00-24:00
}
define command {
    command_name    notify-none
    command_line    /bin/true
}
define command {
    command_name    check-host-alive
    command_line    /bin/true
}
define contact {
    contact_name                    admin
    host_notifications_enabled      0
    service_notifications_enabled   0
    host_notification_period        24x7
    service_notification_period     24x7
    host_notification_options       n
    service_notification_options    n
    host_notification_commands      notify-none
    service_notification_commands   notify-none
}
define host {
    name                    generic-host
    check_command           check-host-alive
    max_check_attempts      1
    check_period            24x7
    contacts                admin
    notification_period     24x7
    notification_interval   0
    register                0
}
define service {
    name                    generic-service
    max_check_attempts      1
    check_interval          5
    retry_interval          1
    check_period            24x7
    notification_period     24x7
    notification_interval   0
    contacts                admin
    register                0
}
define host {
    use         generic-host
    host_name   monitoring
    address     127.0.0.1
}
"""


def nagios_verify(objects: str, where: Path) -> tuple[int, str]:
    """`nagios4 -v` of NAGIOS_BASE plus `objects`, its files under `where`: (exit status,
    its errors and warnings)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "objects.cfg").write_text(NAGIOS_BASE + objects + "\n")
    main = where / "nagios.cfg"
    main.write_text(
        f"cfg_file={where / 'objects.cfg'}\ncheck_result_path={where}\n"
        f"lock_file={where / 'nagios.lock'}\ntemp_file={where / 'nagios.tmp'}\n"
        f"status_file={where / 'status.dat'}\nlog_file={where / 'nagios.log'}\n"
        "nagios_user=root\nnagios_group=root\nillegal_macro_output_chars=`~$&|'\"<>\n"
    )
    nagios = unpacked("nagios4-core", "usr/sbin/nagios4")
    done = subprocess.run([str(nagios), "-v", str(main)], capture_output=True, text=True)
    said = [ln for ln in done.stdout.splitlines() if ln.startswith(("Error", "Warning"))]
    return done.returncode, "\n".join(said)
