"""The servers a test process starts end with it, however it ends: a pytest killed with SIGKILL
(a CI timeout, say) runs no teardown, and its nats-server, redis-servers and relays used to run on,
adopted by init (child_process.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).parent

STARTER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from nats_server import NatsServer
server = NatsServer().start()
print(server.pid, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, exited and not yet reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_a_nats_server_ends_with_the_process_that_started_it_killed():
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(TESTS)], stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        server = int(starter.stdout.readline())
        assert running(server)
        starter.kill()  # SIGKILL: no teardown, no handler
        starter.wait()
        # The kernel's SIGTERM reaches the server at once; it stops cleanly within moments. The
        # deadline only bounds a failing test.
        deadline = time.monotonic() + 30
        while running(server) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not running(server), f"nats-server {server} outlived the process that started it"
    finally:
        starter.kill()
        if "server" in locals() and running(server):
            os.kill(server, 9)
