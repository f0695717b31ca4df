"""The sampler service (``laminar sampler``) as a real child process for the Python tests and the
benchmark, and trajectories written into its buffer by the TypeScript writer (sampler_writer.mjs,
whose formulas ``expected_tokens`` and ``expected_logprobs`` repeat).

    service = SamplerService(nats.url, shm_dir, ["--buffer", "b", "--batch-size", "8"]).start()
    write_trajectories(nats.url, "b", count=64, tokens=40)
    service.kill(); service.start()          # a restart on the same socket
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections import deque
from typing import Any, List, Optional, Sequence, Union

import numpy as np
from child_process import ending_with_parent

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLI = os.path.join(REPO, "dist", "src", "cli", "laminar.js")
WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sampler_writer.mjs")
#: How long the service may take to log that it started (node start, NATS, index rebuild).
START_TIMEOUT_SECONDS = 60.0


def node_binary() -> str:
    found = shutil.which("node")
    if found is None:
        raise RuntimeError("node not found on PATH")
    return found


def write_trajectories(
    nats_url: str,
    buffer: str,
    *,
    count: int,
    tokens: Union[int, Sequence[int]],
    start: int = 0,
    group_size: int = 1,
    weight_version: int = 0,
    concurrency: int = 16,
) -> List[str]:
    """Writes trajectories ``start .. start+count-1`` with the TypeScript ExperienceWriter;
    returns their ids (``t<seed>``). ``tokens``: a length, or lengths taken in turn."""
    spec = {
        "nats": nats_url,
        "buffer": buffer,
        "from": start,
        "count": count,
        "tokens": list(tokens) if not isinstance(tokens, int) else tokens,
        "groupSize": group_size,
        "weightVersion": weight_version,
        "concurrency": concurrency,
    }
    out = subprocess.run([node_binary(), WRITER, json.dumps(spec)], check=True, capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])["written"]


def expected_tokens(seed: int, length: int) -> np.ndarray:
    return seed * 1000 + np.arange(length, dtype=np.int32)


def expected_logprobs(seed: int, length: int) -> np.ndarray:
    return (-(seed + np.arange(length, dtype=np.float64) / 1000)).astype(np.float32)


class SamplerService:
    """One ``laminar sampler`` process; ``start()`` again after ``kill()`` restarts it on the same socket."""

    def __init__(self, nats_url: str, shm_dir: str, args: Sequence[str], name: str = "sampler") -> None:
        self.nats_url = nats_url
        self.shm_dir = shm_dir
        self.socket_path = os.path.join(shm_dir, f"{name}.sock")
        self.args = list(args)
        self.proc: Optional[subprocess.Popen] = None
        self.ready: dict[str, Any] = {}
        self.log: deque = deque(maxlen=500)

    def start(self) -> "SamplerService":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        argv = [
            node_binary(),
            CLI,
            "sampler",
            "--nats",
            self.nats_url,
            "--shm-dir",
            self.shm_dir,
            "--socket",
            self.socket_path,
            "--metrics-port",
            "-1",
            *self.args,
        ]
        proc = subprocess.Popen(ending_with_parent(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.proc = proc
        started = threading.Event()

        def read_log() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line.rstrip())
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("msg") == "sampler ready":
                    self.ready = entry
                    started.set()
            started.set()  # exited: the waiter sees no ready line

        threading.Thread(target=read_log, name="sampler-service-log", daemon=True).start()
        if not started.wait(START_TIMEOUT_SECONDS) or proc.poll() is not None:
            self.kill()
            raise RuntimeError("laminar sampler did not start:\n" + "\n".join(self.log))
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self, sig: int = signal.SIGKILL) -> Optional[int]:
        """Sends ``sig`` and waits for the exit; returns the exit code (negative: a signal)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(30)
