"""Python and TypeScript on one experience buffer (a real nats-server; the TypeScript side is
experience_node.mjs over dist/): what Python writes, the TypeScript ExperienceSampler samples
equal (and, sampled out, still known as written to the Python writer: the completion marks);
what the TypeScript writer writes, Python reads back equal and byte-identical to its own
encoding; and a trajectory written from both languages is stored once."""

from __future__ import annotations

from typing import Any, AsyncIterator, Dict, List

import nats
import pytest
from experience_support import assert_stored_equals, decode_sampled, multi_turn_input, node, trajectory_input
from nats_server import NatsServer

from laminar.data import ExperienceWriter, read_record
from laminar.data.codec import HEADER_ROOM, encode_meta, meta_of, validate_trajectory
from laminar.data.experience import buffer_names
from laminar.data.experience.jetstream import api_request

CHUNK = 4096
"""Chunk size of the small-max-payload server: payloads above it go in chunks."""


@pytest.fixture(scope="module")
def chunking_server() -> Any:
    server = NatsServer(max_payload=HEADER_ROOM + CHUNK).start()
    yield server
    server.cleanup()


async def messages(nc: Any, buffer: str) -> int:
    info = await api_request(nc, f"STREAM.INFO.{buffer_names(buffer).stream}", None, 5.0)
    return int(info["state"]["messages"])


@pytest.fixture
async def nc(chunking_server: NatsServer) -> AsyncIterator[Any]:
    conn = await nats.connect(chunking_server.url)
    yield conn
    await conn.close()


def mixed_inputs(first_seed: int) -> List[Dict[str, Any]]:
    """Trajectories of every shape: short, every optional field, one at the chunk limit, chunked,
    multi-turn (a v2 record with segments)."""
    return [
        trajectory_input(first_seed, tokens=1),
        trajectory_input(first_seed + 1, tokens=40, priority=3.5, reward=-2, info={"advantage": -0.125, "tag": "é", "2": True}),
        trajectory_input(first_seed + 2, tokens=CHUNK // 8),  # exactly the limit: one message
        trajectory_input(first_seed + 3, tokens=CHUNK // 8 + 1),  # one byte over: 2 chunks
        trajectory_input(first_seed + 4, tokens=2000),  # 16000 bytes: 4 chunks
        trajectory_input(first_seed + 5, tokens=0, promptLength=0, responseLength=0),
        multi_turn_input(first_seed + 6),
    ]


def without_optional(t: Dict[str, Any], key: str) -> Dict[str, Any]:
    return {k: v for k, v in t.items() if k != key}


async def test_python_writes_and_the_typescript_sampler_samples_them_equal(chunking_server: NatsServer, nc: Any) -> None:
    buffer = "py-to-ts"
    writer = await ExperienceWriter.open(nc, buffer)
    inputs = mixed_inputs(1000) + [without_optional(trajectory_input(1010, tokens=9), "rolloutId")]
    results = {t["id"]: await writer.write(t) for t in inputs}
    assert [r.chunks for r in results.values()] == [0, 0, 0, 2, 4, 0, 0, 0]
    items = {i["id"]: decode_sampled(i) for i in node("sample", chunking_server.url, buffer, str(len(inputs)))}
    assert set(items) == set(results)
    for t in inputs:
        item = items[t["id"]]
        assert item["seq"] == results[t["id"]].seq
        for key in ("promptId", "groupId", "sampleIndex", "groupSize", "weightVersion", "reward", "promptLength", "responseLength", "createdAt", "completedAt"):
            assert item[key] == t[key], key
        assert item.get("rolloutId") == t.get("rolloutId")
        assert item["priority"] == t.get("priority", 1)
        assert item.get("info") == t.get("info")
        assert item.get("segments") == t.get("segments")
        assert list(item["tokens"]) == list(t["tokens"])
        assert item["logprobs"].tolist() == t["logprobs"]
    # Sampled out, the records are gone; the TypeScript sampler's completion marks answer has().
    assert await messages(nc, buffer) == 0
    for t in inputs:
        assert await writer.has(t["id"])
    assert not await writer.has("never-written")


async def test_typescript_writes_and_python_reads_them_back_byte_for_byte(chunking_server: NatsServer, nc: Any) -> None:
    buffer = "ts-to-py"
    inputs = mixed_inputs(2000)
    results = node("write", chunking_server.url, buffer, stdin=inputs)
    assert [r["chunks"] for r in results] == [0, 0, 0, 2, 4, 0, 0]
    for t, r in zip(inputs, results):
        stored = await read_record(nc, t["id"], buffer)
        assert stored is not None and stored.seq == r["seq"]
        assert_stored_equals(stored.trajectory, t)
        assert len(stored.chunk_seqs) == r["chunks"]
        # The header TypeScript stored is the one Python writes for the same input.
        assert stored.meta_header == encode_meta(meta_of(validate_trajectory(t), stored.chunk_seqs))


async def test_a_trajectory_written_from_both_languages_is_stored_once(chunking_server: NatsServer, nc: Any) -> None:
    buffer = "both"
    writer = await ExperienceWriter.open(nc, buffer)
    small, big = trajectory_input(3000, tokens=8), trajectory_input(3001, tokens=2000)
    # TypeScript first, then Python: duplicates naming TypeScript's records.
    ts_first = node("write", chunking_server.url, buffer, stdin=[small, big])
    before = await messages(nc, buffer)
    assert before == 1 + 5  # small; big's 4 chunks and record
    for t, ts in zip((small, big), ts_first):
        again = await writer.write(t)
        assert (again.seq, again.duplicate, again.chunks) == (ts["seq"], True, 0)
    assert await messages(nc, buffer) == before  # not even a chunk was added
    # Python first, then TypeScript.
    small2, big2 = trajectory_input(3002, tokens=8), trajectory_input(3003, tokens=2000)
    py_first = [await writer.write(small2), await writer.write(big2)]
    after = await messages(nc, buffer)
    ts_again = node("write", chunking_server.url, buffer, stdin=[small2, big2])
    assert [(r["seq"], r["duplicate"]) for r in ts_again] == [(r.seq, True) for r in py_first]
    assert await messages(nc, buffer) == after
    assert writer.stats().duplicates == 2
