"""Real relay processes for the Python tests: ``laminar relay`` from dist/ (run
``npx tsc -p tsconfig.json`` or the bootstrap first), on a fresh directory under /dev/shm, killed
and removed afterwards. conftest.py makes ``relay`` and ``relay_factory`` fixtures of it.

    def test_x(relay_factory):
        relay = relay_factory(["--chunk-size", "64KiB"])
        client = RelayClient(relay.socket_path)
        relay.kill()          # SIGKILL
        relay.start()         # the same socket and shm directory again
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Mapping, Optional, Sequence
from child_process import ending_with_parent

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / "dist" / "src" / "cli" / "laminar.js"
NODE = shutil.which("node") or "node"
#: How long a relay may take to log "relay ready" (a restart verifies the versions it finds).
START_TIMEOUT_SECONDS = 60.0
DEFAULT_ARGS = ("--no-pin", "--log-level", "info")


def _mount_points_under(root: str) -> list[str]:
    """Mount points at or under ``root``, deepest first (/proc/self/mountinfo, octal escapes decoded)."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        for line in table:
            point = line.split(" ")[4].encode().decode("unicode_escape")
            if point == root or point.startswith(root + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def remove_shm_dir(root: str) -> None:
    """Removes a directory relays used: the huge-page tmpfs a relay mounts at <shm-dir>/huge
    outlives the relay (for its next start) and is unmounted first, as rmtree stops at a mount."""
    real = os.path.realpath(root)
    for point in _mount_points_under(real):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


class RelayProcess:
    """One relay: its socket, its shm directory, and the process (started again by ``start``)."""

    def __init__(self, root: str, args: Sequence[str], env: Optional[Mapping[str, str]] = None) -> None:
        #: The temporary directory under /dev/shm holding everything of this relay.
        self.root = root
        #: The relay's --shm-dir.
        self.shm_arg = os.path.join(root, "segments")
        #: Where its segments are: the shm dir, or the huge-page tmpfs the relay mounted in it
        #: (from the relay's ready line; the shm dir until it started).
        self.shm_dir = self.shm_arg
        self.socket_path = os.path.join(root, "relay.sock")
        self.args = list(args)
        #: Variables added to the environment the relay starts with (LAMINAR_SECRET, say).
        self.env = dict(env or {})
        self.process: Optional[subprocess.Popen] = None
        #: The last log lines (pino JSON on stderr), for failure messages.
        self.logs: deque[str] = deque(maxlen=200)

    def start(self) -> "RelayProcess":
        """Starts the relay and returns once it logs ``relay ready``."""
        if not CLI.exists():
            raise RuntimeError(f"{CLI} is missing: build with `npx tsc -p tsconfig.json` (or `bash scripts/bootstrap.sh`)")
        # An event of this start's own: the log thread of a process killed just before may reach
        # its end only now, and the "exited" it signals must not pass for this one's readiness.
        ready = threading.Event()
        argv = ending_with_parent([NODE, str(CLI), "relay", "--shm-dir", self.shm_arg, "--socket", self.socket_path, "--metrics-port", "0", *self.args])
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **self.env})
        self.process = process
        threading.Thread(target=self._drain, args=(process, ready), daemon=True, name="relay-log").start()
        if not ready.wait(START_TIMEOUT_SECONDS) or process.poll() is not None:
            self.kill()
            raise RuntimeError("the relay did not start:\n" + "\n".join(self.logs))
        return self

    def _drain(self, process: subprocess.Popen, ready: threading.Event) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.logs.append(line.rstrip())
            if not ready.is_set():
                try:
                    record = json.loads(line)
                    if record.get("msg") == "relay ready":
                        self.shm_dir = record.get("segmentDir", self.shm_arg)
                        ready.set()
                except ValueError:
                    pass
        ready.set()  # exited: start() sees it through poll()

    def logged(self, text: str) -> bool:
        """Whether one of the last log lines holds ``text``."""
        return any(text in line for line in list(self.logs))

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Sends ``sig`` (default SIGKILL) and waits for the process to end."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        process.wait(30)

    def stop(self) -> None:
        """A clean stop (SIGTERM)."""
        self.kill(signal.SIGTERM)


class RelayFactory:
    """Makes relays for one test and removes them (processes and /dev/shm files) after it."""

    def __init__(self) -> None:
        self._relays: list[RelayProcess] = []

    def __call__(self, args: Sequence[str] = DEFAULT_ARGS, start: bool = True, env: Optional[Mapping[str, str]] = None) -> RelayProcess:
        root = tempfile.mkdtemp(prefix="laminar-py-", dir="/dev/shm")
        relay = RelayProcess(root, args, env)
        self._relays.append(relay)
        return relay.start() if start else relay

    def cleanup(self) -> None:
        for relay in self._relays:
            relay.kill()
            remove_shm_dir(relay.root)
        self._relays.clear()
