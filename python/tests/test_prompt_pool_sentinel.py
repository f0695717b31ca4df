"""The Python PromptPool on Redis Sentinel (redis-py's Sentinel through `connect`): the master
SIGKILLed while three threads claim and complete; after the failover every prompt is completed
once and none was handed out twice (docs/components/data.md, "Failover: Sentinel and Cluster").
The TypeScript side's longer version is test/cluster-redis/sentinel-failover.test.ts."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Callable, List, TypeVar

import pytest
from redis_sentinel import sentinel_group

from laminar import error_codes
from laminar.data.errors import StoreError
from laminar.data.prompts import PromptPool, connect, replication_of

_T = TypeVar("_T")
DEADLINE_SECONDS = 40.0


def until_done(deadline: float, fn: Callable[[], _T]) -> _T:
    """`fn` until it returns, retrying what a failover raises (ERR_STORE, ERR_NOT_REPLICATED)."""
    while True:
        try:
            return fn()
        except StoreError as err:
            assert err.code in (error_codes.STORE, error_codes.NOT_REPLICATED), err
            assert time.monotonic() < deadline, f"still failing at the deadline: {err}"
            time.sleep(0.05)


def test_the_address_forms() -> None:
    client = connect("redis+sentinel://127.0.0.1:1,127.0.0.1:2/m/2?replicas=1&replicaTimeoutMs=300")
    assert replication_of(client) is not None and replication_of(client).replicas == 1  # type: ignore[union-attr]
    for bad in ["http://h:1", "redis+sentinel://h:1", "redis+cluster://h:1/0", "redis://h:1?replicas=-1"]:
        with pytest.raises(Exception) as info:
            connect(bad)
        assert getattr(info.value, "code", None) == error_codes.BAD_REDIS_URL, bad


def test_master_killed_in_the_middle_of_claims() -> None:
    total = 120
    # Two replicas: after the failover the new master still has one to acknowledge writes.
    with sentinel_group(replicas=2) as group:
        url = group.url + "?replicas=1&replicaTimeoutMs=2000"
        clients: List[Any] = []

        def pool() -> PromptPool:
            clients.append(connect(url, socket_timeout=5))
            # Leases far longer than the failover (~2 s): a second hand-out would be a lost write.
            return PromptPool.open(clients[-1], "failover", default_group_size=1, lease_ms=8000)

        loader = pool()
        assert loader.load({"id": f"q{i}", "payload": i} for i in range(total)).loaded == total
        handed_out: Counter = Counter()
        lock = threading.Lock()
        killed: List[int] = []
        errors: List[BaseException] = []
        deadline = time.monotonic() + DEADLINE_SECONDS

        def claimer(r: int) -> None:
            try:
                p = pool()
                while True:
                    claims = until_done(deadline, lambda: p.claim(f"r{r}", 2))
                    if not claims:
                        if until_done(deadline, p.progress).finished:
                            return
                        assert time.monotonic() < deadline, "pool not finished by the deadline"
                        time.sleep(0.1)  # leased elsewhere, or a claim cut off by the kill
                        continue
                    for c in claims:
                        with lock:
                            handed_out[c.id] += 1
                        until_done(deadline, lambda: p.complete(c))
                        with lock:
                            if sum(handed_out.values()) >= total // 4 and not killed:
                                killed.append(group.kill_master())
            except BaseException as err:  # reported by the main thread
                errors.append(err)

        threads = [threading.Thread(target=claimer, args=(r,)) for r in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE_SECONDS + 10)
        assert not errors, errors
        assert killed, "the master was never killed"
        assert group.wait_for_new_master(killed[0]) != killed[0]
        progress = until_done(time.monotonic() + 10, loader.progress)
        assert (progress.total, progress.done_this_epoch, progress.completions, progress.finished) == (total, total, total, True)
        assert len(handed_out) == total
        assert [k for k, n in handed_out.items() if n > 1] == []
        for c in clients:
            c.close()
