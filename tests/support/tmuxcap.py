"""A real terminal for CLI tests: a private tmux server (its own socket, no user config) runs
one command in a pane; the test polls what the pane shows (`capture-pane -p`), as a person
watching it would see it, with the time each screen was seen."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

WIDTH, HEIGHT = 150, 40


@dataclass
class Pane:
    """One command in a tmux pane; `rc_file` holds its exit status once it has ended."""

    socket: Path
    rc_file: Path
    started: float  # time.monotonic() just before tmux was asked to start it
    screens: list[tuple[float, str]] = field(default_factory=list)  # (seconds since start, text)

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return done.stdout

    def ended(self) -> bool:
        return self.rc_file.exists() and self.rc_file.read_text().strip() != ""

    def capture(self) -> str:
        """What the pane shows now (recorded in `screens`)."""
        text = self._tmux("capture-pane", "-p", "-t", "run")
        self.screens.append((time.monotonic() - self.started, text))
        return text

    def history(self) -> str:
        """Everything the pane holds, the lines scrolled off its top included: a dead pane's
        "Pane is dead" line scrolls the screen by one, taking the first line off it."""
        return self._tmux("capture-pane", "-p", "-S", "-", "-t", "run")

    def watch(self, seen: Callable[[str], bool], limit: float) -> float | None:
        """Poll the pane until `seen(screen)`: seconds since start, or None if the command
        ended (or `limit` seconds passed) first without it."""
        while time.monotonic() - self.started < limit:
            ended = self.ended()  # before the capture: a screen seen while it still ran
            screen = self.capture()
            if seen(screen):
                return None if ended else self.screens[-1][0]
            if ended:
                return None
            time.sleep(0.02)
        return None

    def wait(self, limit: float = 120) -> int:
        """The command's exit status (the final screen captured)."""
        deadline = time.monotonic() + limit
        while not self.ended():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the command in tmux ran past {limit} s")
            time.sleep(0.05)
        self.capture()
        return int(self.rc_file.read_text())

    def close(self) -> None:
        """End this pane's own tmux server (only ours: its private socket)."""
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True)


def start(argv: Sequence[str], tmp: Path, cwd: Path, env: dict[str, str] | None = None) -> Pane:
    """Run `argv` in a fresh detached tmux pane of WIDTHxHEIGHT (TERM as tmux sets it)."""
    assert shutil.which("tmux"), "tmux is needed (Debian: apt-get install tmux; make test-deps)"
    socket, rc_file, conf = tmp / "tmux.sock", tmp / "rc", tmp / "tmux.conf"
    conf.write_text("set -g remain-on-exit on\nset -g history-limit 1000\n")
    script = f"cd {shlex.quote(str(cwd))} && {shlex.join(argv)}; echo $? > {rc_file}"
    env = {**os.environ, **(env or {})}
    env.pop("TMUX", None)
    started = time.monotonic()
    tmux = ["tmux", "-S", str(socket), "-f", str(conf), "new-session", "-d", "-s", "run"]
    subprocess.run(
        [*tmux, "-x", str(WIDTH), "-y", str(HEIGHT), "sh", "-c", script],
        check=True,
        env=env,
        timeout=10,
    )
    return Pane(socket, rc_file, started)
