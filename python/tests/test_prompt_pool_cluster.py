"""The Python PromptPool on a 3-master Redis Cluster through `connect("redis+cluster://...")`:
one pool's scripts run on the node of its hash tag, and a write's WAIT goes to that node too
(no replicas here, so `replicas=1` is refused and the claim given back)."""

from __future__ import annotations

import pytest
from redis_cluster import redis_cluster

from laminar import error_codes
from laminar.data.errors import StoreError
from laminar.data.prompts import PromptPool, connect


def test_pool_on_a_cluster() -> None:
    with redis_cluster() as url:
        client = connect(url)
        try:
            pool = PromptPool.open(client, "gsm8k", default_group_size=2)
            assert pool.load({"id": f"q{i}", "payload": i} for i in range(10)).loaded == 10
            claims = pool.claim("r0", 4) + pool.claim("r1", 10)
            assert sorted(c.id for c in claims) == sorted(f"q{i}" for i in range(10))
            pool.return_samples(claims[0].group_id, [1])
            assert all(pool.complete(c) == "ok" for c in claims)
            (returned,) = pool.claim("r2", 1)
            assert (returned.id, returned.samples, returned.returned) == (claims[0].id, [1], True)
            assert pool.complete(returned) == "ok"
            assert pool.progress().finished

            strict = PromptPool(client, "waits", default_group_size=1, replicas=1, replica_timeout_ms=100)
            PromptPool.open(client, "waits").load([{"id": "a", "payload": 1}])
            with pytest.raises(StoreError) as info:
                strict.claim("r0", 1)
            assert info.value.code == error_codes.NOT_REPLICATED
            p = strict.progress()
            assert (p.pending, p.leased, p.returned) == (1, 0, 1)
        finally:
            client.close()
