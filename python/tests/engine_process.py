"""Real reference-engine processes for the tests (``python -m laminar.testing.engine``), on a port
the engine picks itself (``--port 0``, read back from its ``engine ready port=N`` line, so two
tests never race for a port), stopped with SIGTERM (or killed) afterwards.

    engine = EngineProcess(["--model-path", str(model_dir)]).start()
    engine.url                   # http://127.0.0.1:<port>
    assert engine.stop() == 0    # SIGTERM; the exit status
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections import deque
from typing import Optional, Sequence
from child_process import ending_with_parent

#: How long an engine may take to print its ready line (importing torch on two loaded cores).
START_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 30.0
_READY = re.compile(r"engine ready port=(\d+)")


class EngineProcess:
    """One engine process and its last stderr lines."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.process: Optional[subprocess.Popen] = None
        self.port: Optional[int] = None
        self.logs: deque[str] = deque(maxlen=300)
        self._ready = threading.Event()

    def start(self) -> "EngineProcess":
        argv = [sys.executable, "-m", "laminar.testing.engine", "--host", "127.0.0.1", "--port", "0", "--threads", "1", *self.args]
        self.process = subprocess.Popen(ending_with_parent(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._drain, args=(self.process,), daemon=True, name="engine-log").start()
        if not self._ready.wait(START_TIMEOUT_SECONDS) or self.port is None:
            self.kill()
            raise RuntimeError("the engine did not start:\n" + "\n".join(self.logs))
        return self

    def _drain(self, process: subprocess.Popen) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.logs.append(line.rstrip())
            match = _READY.search(line)
            if match and not self._ready.is_set():
                self.port = int(match.group(1))
                self._ready.set()
        self._ready.set()  # exited: start() sees port None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> Optional[int]:
        """SIGTERM and wait; the exit status (killed, and None, if it does not exit in time)."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
