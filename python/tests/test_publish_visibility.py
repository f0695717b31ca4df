"""A publish returns once the bytes are in the relay's segment; the relay verifies the version after
and serves it only then. ``wait_visible`` gives the verdict: the description of the version served,
or the relay's refusal of bytes that changed after they were checksummed, counted by the relay,
with the version discarded and the previous one still served."""

from __future__ import annotations

import json
import os
import urllib.request

import numpy as np
import pytest

from laminar import LaminarError, PublishResult, RelayClient, error_codes

pytestmark = pytest.mark.timeout(120)

MODEL = "org/visible"


@pytest.fixture
def client(relay):
    with RelayClient(relay.socket_path, name="visibility test") as c:
        yield c


def weights(version: int) -> dict[str, np.ndarray]:
    return {"w": np.full((256, 64), version, np.float32), "b": np.arange(64, dtype=np.float32) + version}


def metric(relay, name: str, labels: str) -> float:
    """One sample of the relay's /metrics (its port from the relay's ready line)."""
    ready = next(json.loads(line) for line in list(relay.logs) if '"relay ready"' in line)
    with urllib.request.urlopen(f"http://127.0.0.1:{ready['metricsPort']}/metrics", timeout=30) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.split(" ")[1])
    return 0.0


def test_publish_returns_then_the_version_becomes_visible(client):
    result = client.publish(MODEL, 1, weights(1))
    assert isinstance(result, PublishResult)
    assert (result.model, result.version) == (MODEL, 1) and result.stall_seconds > 0
    description = result.wait_visible(timeout=60)
    assert result.visible and result.done and result.visible_seconds is not None and result.visible_seconds >= 0
    assert description["version"] == 1 and description["dir"] is not None and len(description["checksums"]) >= 1
    with client.acquire(MODEL) as lease:
        assert lease.version == 1 and (lease.numpy("w") == 1).all()
        assert lease.checksums == description["checksums"]


async def test_the_verdict_can_be_awaited_from_asyncio(client):
    result = client.publish(MODEL, 1, weights(1))
    description = await result.wait_visible_async(timeout=60)
    assert description["version"] == 1
    with client.acquire(MODEL) as lease:
        assert lease.version == 1


def test_bytes_changed_after_the_write_fail_the_version_visibly(client, relay):
    client.publish(MODEL, 1, weights(1)).wait_visible(timeout=60)
    pub = client.begin(MODEL, 2, [(name, t.dtype, t.shape) for name, t in weights(2).items()])
    pub.write_many(weights(2))
    path = pub.path
    # A stray write through the writer's mapping after the copy took its checksums.
    view = pub.numpy("w")
    view[100, 3] += 1
    del view
    result = pub.commit()  # the stall is over: nothing is checked yet
    with pytest.raises(LaminarError) as info:
        result.wait_visible(timeout=60)
    assert info.value.code == error_codes.CHECKSUM_MISMATCH
    assert info.value.details == {"mismatched": ["w"]}
    assert result.done and not result.visible and result.visible_seconds is None
    # Counted by the relay; aborted by the client before the verdict came out: no segment left.
    assert metric(relay, "laminar_relay_publishes_total", 'result="rejected"') == 1
    assert [v["version"] for v in client.status()["versions"] if v["model"] == MODEL] == [1]
    assert not os.path.exists(path)
    with client.acquire(MODEL) as lease:
        assert lease.version == 1 and (lease.numpy("w") == 1).all()
    # The version may be published again, and then it is served.
    client.publish(MODEL, 2, weights(2)).wait_visible(timeout=60)
    with client.acquire(MODEL) as lease:
        assert lease.version == 2
