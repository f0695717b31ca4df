"""Where the prompt pool's Redis is, in the address forms of the TypeScript side
(src/data/prompts/redis-address.ts, the same `--redis` / `LAMINAR_REDIS` strings), and the redis-py
client for one:

    redis://[:password@]host:port[/db]                          one server (rediss:// for TLS)
    redis+sentinel://[:password@]h1:p1,h2:p2,h3:p3/master[/db]  Sentinel: the master the sentinels
                                                                name, found again after a failover
    redis+cluster://[:password@]h1:p1,h2:p2[,...]               Redis Cluster: any nodes (seeds)

Query parameters: `replicas=<k>` (each pool write waits until k replicas have it: WAIT),
`replicaTimeoutMs` (default 1000), `sentinelPassword`. The replication settings travel with the
client (`replication_of`), so that `PromptPool(connect(address))` honours them.

    from laminar.data.prompts import PromptPool, connect
    pool = PromptPool.open(connect("redis+sentinel://s1:26379,s2:26379,s3:26379/laminar?replicas=1"))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple
from urllib.parse import parse_qs, unquote

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from ... import error_codes
from ..errors import DataInputError

DEFAULT_REPLICA_TIMEOUT_MS = 1000
_DEFAULT_PORT = {"server": 6379, "sentinel": 26379}
_OUR_PARAMS = ("replicas", "replicaTimeoutMs", "sentinelPassword")
_ATTR = "_laminar_replication"


@dataclass(frozen=True)
class Replication:
    """Replicas that must acknowledge each pool write, and how long to wait for them."""

    replicas: int = 0
    timeout_ms: int = DEFAULT_REPLICA_TIMEOUT_MS


def mask_password(address: str) -> str:
    """The address as it may be printed: a password in it is masked."""
    return re.sub(r"^([a-z+]+://)([^@/]*:)[^@/]*@", r"\1\2***@", address, flags=re.I)


def _bad(address: str, why: str) -> DataInputError:
    return DataInputError(error_codes.BAD_REDIS_URL, f"bad Redis address {mask_password(address)!r}: {why}")


def _hosts(address: str, text: str, default_port: int) -> List[Tuple[str, int]]:
    out = []
    for item in text.split(","):
        m = re.fullmatch(r"(?:\[([^\]]+)\]|([^:\[\]]+))(?::(\d+))?", item)
        if m is None:
            raise _bad(address, f"{item!r} is not host[:port]")
        port = default_port if m.group(3) is None else int(m.group(3))
        if not 0 < port < 65536:
            raise _bad(address, f"port {m.group(3)} is outside 1-65535")
        out.append((m.group(1) or m.group(2), port))
    return out


def connect(address: str, **options: Any) -> Any:
    """The redis-py client for an address: `redis.Redis` (one server, or the master through the
    sentinels) or `redis.cluster.RedisCluster`. `options` go to the data connections (timeouts).
    DataInputError(ERR_BAD_REDIS_URL) for an address that is none of the forms above."""
    m = re.fullmatch(r"([a-z+]+)://(?:([^@/]*)@)?([^/?]*)(/[^?]*)?(?:\?(.*))?", address.strip(), flags=re.I)
    if m is None:
        raise _bad(address, "expected redis://, rediss://, redis+sentinel:// or redis+cluster://")
    scheme, user_info, hosts, path, query = m.group(1).lower(), m.group(2), m.group(3), m.group(4) or "", m.group(5) or ""
    params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    password = unquote(user_info.split(":", 1)[1]) if user_info and ":" in user_info else None

    def integer(name: str, fallback: int, least: int) -> int:
        text = params.get(name)
        if text is None:
            return fallback
        if not re.fullmatch(r"\d+", text) or int(text) < least:
            raise _bad(address, f"{name}={text} is not an integer >= {least}")
        return int(text)

    replication = Replication(integer("replicas", 0, 0), integer("replicaTimeoutMs", DEFAULT_REPLICA_TIMEOUT_MS, 1))
    client: Any
    if scheme in ("redis", "rediss"):
        _hosts(address, hosts, _DEFAULT_PORT["server"])
        rest = "&".join(f"{k}={v}" for k, v in params.items() if k not in _OUR_PARAMS)
        client = redis.Redis.from_url(address.strip().split("?", 1)[0] + (f"?{rest}" if rest else ""), **options)
    elif scheme == "redis+sentinel":
        sentinels = _hosts(address, hosts, _DEFAULT_PORT["sentinel"])
        parts = [p for p in path.split("/") if p]
        if not 1 <= len(parts) <= 2:
            raise _bad(address, "expected /<master name>[/<db>] after the sentinels")
        if len(parts) == 2 and not parts[1].isdigit():
            raise _bad(address, f"database {parts[1]} is not an integer >= 0")
        sentinel_kwargs = {"password": params["sentinelPassword"]} if params.get("sentinelPassword") else {}
        sentinel = Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs, **options)
        # master_for: a client whose connections ask the sentinels for the master, again after a
        # failover (a dead master's connection error, or READONLY from a demoted one).
        client = sentinel.master_for(unquote(parts[0]), db=int(parts[1]) if len(parts) == 2 else 0, password=password)
    elif scheme == "redis+cluster":
        if path not in ("", "/"):
            raise _bad(address, "a cluster has no database or master name (one keyspace, db 0)")
        nodes = [ClusterNode(h, p) for h, p in _hosts(address, hosts, _DEFAULT_PORT["server"])]
        client = RedisCluster(startup_nodes=nodes, password=password, **options)
    else:
        raise _bad(address, f"unknown scheme {scheme}://")
    setattr(client, _ATTR, replication)
    return client


def replication_of(client: Any) -> Optional[Replication]:
    """What the address of a client made by `connect` asked (None for any other client)."""
    return getattr(client, _ATTR, None)
