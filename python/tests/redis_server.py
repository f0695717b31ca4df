"""Real redis-servers for the Python tests, in temp dirs. ``redis_server()`` is one server on a
unix socket (no TCP port to race for), without persistence; conftest.py makes the ``redis_socket``
fixture of it. ``spawn_redis`` starts any redis-server (a replica, a sentinel: redis_sentinel.py)
and waits until it answers.

    with redis_server() as socket_path:
        client = redis.Redis(unix_socket_path=socket_path)
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator, List

import redis
from child_process import ending_with_parent

#: How long redis-server may take to answer a PING after it starts.
START_TIMEOUT_SECONDS = 30.0


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (scripts/bootstrap.sh installs it)"
    return binary


def spawn_redis(args: List[str], client: redis.Redis) -> "subprocess.Popen[bytes]":
    """Starts ``redis-server <args>`` and returns it once ``client`` gets an answer to PING (or
    fails: it exited, or the deadline passed)."""
    proc = subprocess.Popen(ending_with_parent([redis_binary(), *args]), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:  # until it answers (or exits, or the deadline passes)
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"redis-server {' '.join(args[:2])} did not answer within {START_TIMEOUT_SECONDS:.0f} s (exit {proc.poll()})")
            time.sleep(0.02)
    client.close()
    return proc


@contextmanager
def redis_server() -> Iterator[str]:
    """Starts redis-server, yields its socket path once it answers, and stops it afterwards."""
    root = tempfile.mkdtemp(prefix="laminar-pp-")
    sock = f"{root}/redis.sock"
    try:
        proc = spawn_redis(["--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", root], redis.Redis(unix_socket_path=sock))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield sock
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)
