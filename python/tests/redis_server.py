"""A real redis-server for the Python tests, on a unix socket in a temp dir (no TCP port to race
for), without persistence. conftest.py makes the ``redis_socket`` fixture of it.

    with redis_server() as socket_path:
        client = redis.Redis(unix_socket_path=socket_path)
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

import redis

#: How long redis-server may take to answer a PING after it starts.
START_TIMEOUT_SECONDS = 30.0


@contextmanager
def redis_server() -> Iterator[str]:
    """Starts redis-server, yields its socket path once it answers, and stops it afterwards."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (scripts/bootstrap.sh installs it)"
    root = tempfile.mkdtemp(prefix="laminar-pp-")
    sock = f"{root}/redis.sock"
    proc = subprocess.Popen([binary, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", root], stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(unix_socket_path=sock)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:  # until it answers (or exits, or the deadline passes)
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert proc.poll() is None, "redis-server exited at start"
                assert time.monotonic() < deadline, f"redis-server did not answer within {START_TIMEOUT_SECONDS:.0f} s"
                time.sleep(0.02)
        client.close()
        yield sock
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)
