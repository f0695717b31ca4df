"""A Redis group under Sentinel for the Python tests, as src/services/redis-sentinel.ts starts one
for the TypeScript tests: a master, replicas and three sentinels (quorum 2, down-after 500 ms) on
127.0.0.1, each in its own temp dir (redis_server.spawn_redis), so that a failover takes ~2 s.

    with sentinel_group(replicas=2) as group:
        pool = PromptPool.open(connect(group.url + "?replicas=1"))
        old = group.kill_master()
        group.wait_for_new_master(old)
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional

import redis
from redis_server import spawn_redis

MASTER = "laminar"
#: Bound of every wait of the group (a start, the sentinels seeing each other, a failover).
WAIT_SECONDS = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(what: str, check, timeout: float = WAIT_SECONDS):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except redis.RedisError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"sentinel group: {what} within {timeout:.0f} s"
        time.sleep(0.05)


@dataclass
class SentinelGroup:
    root: str
    servers: Dict[int, "subprocess.Popen[bytes]"] = field(default_factory=dict)
    sentinels: Dict[int, "subprocess.Popen[bytes]"] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in self.sentinels) + f"/{MASTER}"

    def _ask(self, port: int, *command: object) -> object:
        client = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def master_port(self) -> int:
        port = next(iter(self.sentinels))
        return int(self._ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)[1])  # type: ignore[index]

    def kill_master(self) -> int:
        """SIGKILLs the master, as in a crash; its port."""
        port = self.master_port()
        self.servers[port].kill()
        self.servers[port].wait(10)
        return port

    def wait_for_new_master(self, old: int) -> int:
        """Until every sentinel names a master other than `old` and it says it is one."""

        def switched() -> Optional[int]:
            named = {int(self._ask(s, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)[1]) for s in self.sentinels}  # type: ignore[index]
            if len(named) != 1 or old in named:
                return None
            port = named.pop()
            return port if self._ask(port, "ROLE")[0] == "master" else None  # type: ignore[index]

        return int(_until(f"a master other than port {old}", switched))

    def stop(self) -> None:
        for proc in [*self.sentinels.values(), *self.servers.values()]:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def sentinel_group(replicas: int = 1, sentinels: int = 3, quorum: int = 2, down_after_ms: int = 500) -> Iterator[SentinelGroup]:
    group = SentinelGroup(tempfile.mkdtemp(prefix="laminar-sentinel-"))
    try:

        def start(name: str, args: list) -> int:  # type: ignore[type-arg]
            port = _free_port()
            directory = f"{group.root}/{name}"
            os.makedirs(directory)
            common = ["--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "", "--logfile", ""]
            if args and args[0] == "sentinel":
                conf = f"{directory}/sentinel.conf"
                with open(conf, "w") as f:
                    f.write("\n".join(args[1:]) + "\n")
                group.sentinels[port] = spawn_redis([conf, "--sentinel", *common], redis.Redis(port=port))
            else:
                group.servers[port] = spawn_redis([*common, "--appendonly", "yes", *args], redis.Redis(port=port))
            return port

        master = start("master", [])
        for i in range(replicas):
            start(f"replica{i}", ["--replicaof", "127.0.0.1", str(master)])
        _until(
            f"{replicas} replicas in sync",
            lambda: (
                group._ask(master, "INFO", "replication").get("connected_slaves") == replicas  # type: ignore[union-attr]
                and all("online" in str(v) for k, v in group._ask(master, "INFO", "replication").items() if k.startswith("slave"))
            ),  # type: ignore[union-attr]
        )
        for i in range(sentinels):
            start(
                f"sentinel{i}",
                [
                    "sentinel",
                    f"sentinel monitor {MASTER} 127.0.0.1 {master} {quorum}",
                    f"sentinel down-after-milliseconds {MASTER} {down_after_ms}",
                    f"sentinel failover-timeout {MASTER} 5000",
                ],
            )
        _until(
            "sentinels that know every replica and each other",
            lambda: all(
                len(group._ask(s, "SENTINEL", "SENTINELS", MASTER)) == sentinels - 1  # type: ignore[arg-type]
                and len(group._ask(s, "SENTINEL", "REPLICAS", MASTER)) == replicas  # type: ignore[arg-type]
                for s in group.sentinels
            ),
        )
        yield group
    finally:
        group.stop()
