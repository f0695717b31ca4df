"""A 3-master Redis Cluster for the Python tests, as src/services/redis-cluster.ts starts one for
the TypeScript tests: nodes started with redis_server.spawn_redis, the slots split evenly (CLUSTER
ADDSLOTSRANGE), joined with CLUSTER MEET (with each node's own bus port), ready when every node
says cluster_state:ok.

    with redis_cluster() as url:                      # redis+cluster://127.0.0.1:p1,p2,p3
        pool = PromptPool.open(connect(url))
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator, List

import redis
from redis_sentinel import _free_port, _until
from redis_server import spawn_redis

SLOTS = 16384


@contextmanager
def redis_cluster(masters: int = 3) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="laminar-rcluster-")
    procs = []
    try:
        ports: List[int] = []
        for i in range(masters):
            port, bus = _free_port(), _free_port()
            directory = f"{root}/n{i}"
            os.makedirs(directory)
            args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "", "--appendonly", "no", "--logfile", ""]
            args += ["--cluster-enabled", "yes", "--cluster-port", str(bus), "--cluster-node-timeout", "2000"]
            procs.append(spawn_redis(args, redis.Redis(port=port)))
            ports.append(port)
        nodes = [redis.Redis(port=p, decode_responses=True) for p in ports]
        bounds = [i * SLOTS // masters for i in range(masters + 1)]
        for i, node in enumerate(nodes):
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)
        for node, port in zip(nodes[1:], ports[1:]):
            me = next(line for line in node.execute_command("CLUSTER", "NODES").splitlines() if "myself" in line)
            bus_port = me.split()[1].split("@")[1].split(",")[0]
            nodes[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port, bus_port)
        _until(
            "cluster_state:ok on every node",
            lambda: all(
                n.execute_command("CLUSTER", "INFO").startswith("cluster_state:ok") and f"cluster_known_nodes:{masters}" in n.execute_command("CLUSTER", "INFO")
                for n in nodes
            ),
        )
        for n in nodes:
            n.close()
        yield "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)
