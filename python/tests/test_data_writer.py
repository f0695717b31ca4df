"""The Python ExperienceWriter on a real nats-server (JetStream, file storage): records as the
reader gets them back, chunked payloads, both duplicate paths, rejections that never reach the
stream, back-pressure, the stream's configuration, a server restart under a write, and the
blocking front for loops that are not asyncio."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict

import nats
import nats.js.errors
import numpy as np
import pytest
from experience_support import assert_stored_equals, trajectory_input
from nats_server import NatsServer

from laminar import error_codes
from laminar.data import (
    DataCapacityError,
    DataInputError,
    ExperienceWriter,
    StoreError,
    SyncExperienceWriter,
    read_record,
)
from laminar.data.codec import HEADER_ROOM, META_HEADER, encode_meta, encode_payload, meta_of, validate_trajectory
from laminar.data.experience import buffer_names
from laminar.data.experience.jetstream import api_request, direct_get, leader_get
from laminar.data.retry import is_transient
from laminar.errors import ClosedError

_buffers = iter(range(1_000_000))


def fresh_buffer() -> str:
    return f"w{next(_buffers)}"


async def connect(url: str) -> Any:
    return await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.05)


async def close(nc: Any) -> None:
    """Closes a client; nats-py's close raises when the server went away under it."""
    try:
        await nc.close()
    except ConnectionResetError:
        pass


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Any]:
    conn = await connect(nats_server.url)
    yield conn
    await conn.close()


async def stream_info(nc: Any, buffer: str) -> Dict[str, Any]:
    return await api_request(nc, f"STREAM.INFO.{buffer_names(buffer).stream}", None, 5.0)


async def messages(nc: Any, buffer: str) -> int:
    return int((await stream_info(nc, buffer))["state"]["messages"])


async def test_a_written_trajectory_reads_back_equal(nc: Any) -> None:
    buffer = fresh_buffer()
    writer = await ExperienceWriter.open(nc, buffer)
    t = trajectory_input(1, tokens=300, priority=2.5)
    result = await writer.write(t)
    assert (result.duplicate, result.chunks) == (False, 0) and result.seq >= 1
    stored = await read_record(nc, t["id"], buffer)
    assert stored is not None and stored.seq == result.seq and stored.chunk_seqs == []
    assert_stored_equals(stored.trajectory, t)
    assert stored.meta_header == encode_meta(meta_of(validate_trajectory(t), []))
    assert await writer.has(t["id"]) and not await writer.has("never-written")
    assert await read_record(nc, "never-written", buffer) is None
    s = writer.stats()
    assert (s.written, s.duplicates, s.bytes, s.chunked) == (1, 0, 300 * 8, 0)


async def test_a_read_from_the_leader_gives_the_message_a_direct_get_gives(nc: Any) -> None:
    # has() and the lost-ack check read through the stream's leader (a lagging replica answers
    # direct gets from a stale copy: test/cluster-nats/stale-replica.test.ts); the message must
    # come back the same: headers (the record's metadata), body, sequence, subject.
    buffer = fresh_buffer()
    writer = await ExperienceWriter.open(nc, buffer)
    await writer.write(trajectory_input(7, tokens=40))
    names = buffer_names(buffer)
    subject = names.record_subject("traj-7")
    direct = await direct_get(nc, names.stream, last_by_subj=subject, timeout=5.0)
    leader = await leader_get(nc, names.stream, last_by_subj=subject, timeout=5.0)
    assert direct is not None and leader is not None
    assert (leader.seq, leader.subject, leader.data) == (direct.seq, direct.subject, direct.data)
    assert leader.headers[META_HEADER] == direct.headers[META_HEADER]
    assert await leader_get(nc, names.stream, seq=leader.seq, timeout=5.0) == leader
    assert await leader_get(nc, names.stream, last_by_subj=names.record_subject("never-written"), timeout=5.0) is None


def test_cluster_not_available_is_retried_other_answers_are_not() -> None:
    # A read from the leader asked of a replica that knows none (an election) is answered 10008:
    # ask again, as retry.ts does; "maximum bytes exceeded" (10077) is an answer.
    assert is_transient(nats.js.errors.APIError(code=503, err_code=10008, description="JetStream system temporarily unavailable"))
    assert not is_transient(nats.js.errors.APIError(code=503, err_code=10077, description="maximum bytes exceeded"))


async def test_the_stream_is_created_with_the_typescript_configuration(nc: Any) -> None:
    buffer = fresh_buffer()
    await ExperienceWriter.open(nc, buffer, max_stream_bytes=1 << 30, duplicate_window=30)
    config = (await stream_info(nc, buffer))["config"]
    assert config["subjects"] == [f"laminar.exp.{buffer}.>"]
    assert (config["storage"], config["retention"], config["discard"]) == ("file", "limits", "new")
    assert (config["max_bytes"], config["num_replicas"], config["duplicate_window"], config["allow_direct"]) == (1 << 30, 1, 30 * 10**9, True)
    # An existing stream is used as it is.
    await ExperienceWriter.open(nc, buffer)
    assert (await stream_info(nc, buffer))["config"]["max_bytes"] == 1 << 30


async def test_the_same_id_twice_is_a_duplicate_with_the_first_sequence(nc: Any) -> None:
    writer = await ExperienceWriter.open(nc, fresh_buffer())
    t = trajectory_input(2)
    first = await writer.write(t)
    again = await writer.write({**t, "reward": 99})  # same id, other content: still the first record
    assert again.duplicate and again.seq == first.seq
    assert (await read_record(nc, t["id"], writer.names.buffer)).trajectory.reward == t["reward"]
    assert writer.stats().duplicates == 1


async def test_a_retry_after_a_lost_acknowledgement_is_written_not_a_duplicate(nc: Any) -> None:
    """The server stores the record and is killed before it answers: the writer retries, the
    server refuses the retry, and the stored record is this write's own (TypeScript: same)."""
    buffer = fresh_buffer()
    writer = await ExperienceWriter.open(nc, buffer)
    real = writer._js.publish
    attempts = 0

    async def lose_first_ack(*args: Any, **kwargs: Any) -> Any:
        nonlocal attempts
        attempts += 1
        ack = await real(*args, **kwargs)
        if attempts == 1:
            raise asyncio.TimeoutError()
        return ack

    writer._js.publish = lose_first_ack  # type: ignore[method-assign]
    t = trajectory_input(4)
    result = await writer.write(t)
    assert not result.duplicate and attempts == 2
    assert await messages(nc, buffer) == 1
    s = writer.stats()
    assert (s.written, s.duplicates, s.lost_acks) == (1, 0, 1)
    writer._js.publish = real  # type: ignore[method-assign]
    assert (await writer.write(t)).duplicate


async def test_a_record_outside_the_duplicate_window_is_found_by_its_subject(nc: Any) -> None:
    """Wrong last subject sequence (10071): the record exists, but not under this message id
    any more (written before the window); the result names the existing record."""
    buffer = fresh_buffer()
    writer = await ExperienceWriter.open(nc, buffer)
    t = validate_trajectory(trajectory_input(3))
    js = nc.jetstream()
    old = await js.publish(
        buffer_names(buffer).record_subject(t.id),
        encode_payload(t.tokens, t.logprobs),
        headers={"Laminar-Meta": encode_meta(meta_of(t, [])), "Nats-Msg-Id": "written-long-ago"},
    )
    result = await writer.write(trajectory_input(3))
    assert (result.seq, result.duplicate, result.chunks) == (old.seq, True, 0)
    assert await messages(nc, buffer) == 1


async def test_large_payloads_go_in_chunks_before_their_record(nats_server_factory: Any) -> None:
    server = nats_server_factory(max_payload=HEADER_ROOM + 4096)  # chunks of 4096 bytes
    nc = await connect(server.url)
    try:
        buffer = fresh_buffer()
        writer = await ExperienceWriter.open(nc, buffer)
        t = trajectory_input(4, tokens=1500)  # 12000 bytes: 3 chunks
        result = await writer.write(t)
        assert (result.duplicate, result.chunks) == (False, 3)
        stored = await read_record(nc, t["id"], buffer)
        assert stored.chunk_seqs == [result.seq - 3, result.seq - 2, result.seq - 1]
        assert_stored_equals(stored.trajectory, t)
        assert await messages(nc, buffer) == 4
        # Written again: found before any chunk is published, so nothing is added.
        again = await writer.write(t)
        assert (again.seq, again.duplicate) == (result.seq, True)
        assert await messages(nc, buffer) == 4
        assert writer.stats().chunked == 1
        # A payload of exactly the limit stays in the record's body.
        fits = await writer.write(trajectory_input(5, tokens=512))
        assert fits.chunks == 0
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"tokens": [1, 2, 3]}, error_codes.LENGTH_MISMATCH),
        ({"promptLength": -1}, error_codes.NEGATIVE_LENGTH),
        ({"sampleIndex": 4}, error_codes.GROUP_MISMATCH),
        ({"weightVersion": 11}, error_codes.FUTURE_VERSION),
        ({"reward": float("nan")}, error_codes.BAD_TRAJECTORY),
        ({"tokens": list(range(300)), "logprobs": [0.0] * 300, "promptLength": 4, "responseLength": 296}, error_codes.PAYLOAD_TOO_LARGE),
    ],
)
async def test_bad_trajectories_are_rejected_counted_and_never_stored(nc: Any, over: Dict[str, Any], code: str) -> None:
    buffer = fresh_buffer()
    writer = await ExperienceWriter.open(nc, buffer, max_weight_version=lambda: 10, max_trajectory_bytes=2048)
    with pytest.raises((DataInputError, DataCapacityError)) as caught:
        await writer.write({**trajectory_input(6), **over})
    assert caught.value.code == code
    assert dict(writer.rejections) == {code: 1}
    assert await messages(nc, buffer) == 0


async def test_group_sizes_are_checked_against_the_registry(nc: Any) -> None:
    async def group_size(group_id: str) -> Any:
        return {"known": 4}.get(group_id)

    for registry in (group_size, {"known": 4}.get):  # async or plain
        writer = await ExperienceWriter.open(nc, fresh_buffer(), groups=registry)
        with pytest.raises(DataInputError) as unknown:
            await writer.write(trajectory_input(7, groupId="ghost"))
        assert unknown.value.code == error_codes.UNKNOWN_GROUP
        assert unknown.value.message == 'unknown group id "ghost"'
        with pytest.raises(DataInputError) as mismatch:
            await writer.write(trajectory_input(7, groupId="known", groupSize=8))
        assert mismatch.value.code == error_codes.GROUP_MISMATCH
        assert (await writer.write(trajectory_input(7, groupId="known"))).duplicate is False
        assert dict(writer.rejections) == {error_codes.UNKNOWN_GROUP: 1, error_codes.GROUP_MISMATCH: 1}


async def test_a_full_buffer_is_back_pressure_not_a_silent_drop(nc: Any) -> None:
    buffer = fresh_buffer()
    writer = await ExperienceWriter.open(nc, buffer, max_stream_bytes=64 * 1024)
    with pytest.raises(DataCapacityError) as caught:
        for i in range(100):
            await writer.write(trajectory_input(100 + i, tokens=1024))  # 8 KiB each
    assert caught.value.code == error_codes.BUFFER_FULL
    assert "is full" in caught.value.message
    # Recognised by JetStream's API error code (the stream's limit, discard=new), not its text.
    assert caught.value.__cause__.err_code == 10077
    assert writer.rejections[error_codes.BUFFER_FULL] == 1
    stored = await messages(nc, buffer)
    assert 0 < stored < 10 and writer.stats().written == stored


async def test_a_server_out_of_jetstream_storage_is_a_full_buffer(nats_server_factory: Any) -> None:
    # No limit on the stream: the server's JetStream file storage (256 KiB) runs out first.
    server = nats_server_factory(max_file_store=256 * 1024)
    conn = await connect(server.url)
    try:
        writer = await ExperienceWriter.open(conn, fresh_buffer())
        with pytest.raises(DataCapacityError) as caught:
            for i in range(100):
                await writer.write(trajectory_input(300 + i, tokens=1024))  # 8 KiB each
        assert caught.value.code == error_codes.BUFFER_FULL
        assert caught.value.__cause__.err_code == 10023  # insufficient resources
        assert writer.rejections[error_codes.BUFFER_FULL] == 1 and 0 < writer.stats().written < 40
    finally:
        await conn.close()


async def test_write_many_pipelines_and_reports_the_first_failure_after_the_rest(nc: Any) -> None:
    buffer = fresh_buffer()
    writer = await ExperienceWriter.open(nc, buffer)
    ts = [trajectory_input(200 + i, tokens=64) for i in range(200)]
    results = await writer.write_many(ts, concurrency=32)
    assert len({r.seq for r in results}) == 200 and not any(r.duplicate for r in results)
    for r, t in zip(results[:3], ts):
        assert (await read_record(nc, t["id"], buffer)).seq == r.seq
    bad = [trajectory_input(500), {**trajectory_input(501), "tokens": []}, trajectory_input(502)]
    with pytest.raises(DataInputError):
        await writer.write_many(bad)
    assert await writer.has("traj-500") and await writer.has("traj-502")


async def test_options_are_checked(nc: Any) -> None:
    for options in ({"max_trajectory_bytes": 0}, {"retry_for": -1}, {"timeout": 0}, {"replicas": 0}, {"replicas": 6}):
        with pytest.raises(DataInputError) as caught:
            await ExperienceWriter.open(nc, fresh_buffer(), **options)
        assert caught.value.code == error_codes.BAD_DATA_OPTIONS
    with pytest.raises(DataInputError) as bad_name:
        await ExperienceWriter.open(nc, "a.b")
    assert bad_name.value.code == error_codes.BAD_DATA_OPTIONS


async def test_an_id_a_header_cannot_carry_is_refused_before_anything_is_stored(nc: Any) -> None:
    writer = await ExperienceWriter.open(nc, fresh_buffer())
    for bad in ("two\nlines", " x", "x\u00a0"):
        with pytest.raises(DataInputError) as caught:
            await writer.write(trajectory_input(8, id=bad))
        assert caught.value.code == error_codes.BAD_TRAJECTORY
    assert writer.rejections[error_codes.BAD_TRAJECTORY] == 3
    assert writer.stats().written == 0


async def test_a_write_retries_through_a_server_restart(nats_server_factory: Any) -> None:
    server = nats_server_factory()
    nc = await connect(server.url)
    try:
        buffer = fresh_buffer()
        writer = await ExperienceWriter.open(nc, buffer, timeout=0.5, retry_for=60)
        await writer.write(trajectory_input(9))
        server.stop()
        write = asyncio.ensure_future(writer.write(trajectory_input(10)))
        # The server comes back only once the writer has seen a failure and retried.
        while writer.stats().retries == 0:
            assert not write.done(), write
            await asyncio.sleep(0.02)
        server.start()
        result = await asyncio.wait_for(write, 60)
        assert result.duplicate is False
        assert_stored_equals((await read_record(nc, "traj-10", buffer)).trajectory, trajectory_input(10))
        assert (await read_record(nc, "traj-9", buffer)) is not None
    finally:
        await nc.close()


async def test_a_write_fails_with_err_store_once_retry_for_has_passed(nats_server_factory: Any) -> None:
    server = nats_server_factory()
    nc = await connect(server.url)
    try:
        writer = await ExperienceWriter.open(nc, fresh_buffer(), timeout=0.2, retry_for=0.5)
        server.stop()
        with pytest.raises(StoreError) as caught:
            await writer.write(trajectory_input(11))
        assert caught.value.code == error_codes.STORE
        assert writer.stats().retries >= 1 and writer.rejections[error_codes.STORE] == 1
    finally:
        await close(nc)


def test_the_blocking_writer_for_loops_without_asyncio(nats_server: NatsServer) -> None:
    buffer = fresh_buffer()
    with SyncExperienceWriter.connect(nats_server.url, buffer) as writer:
        first = writer.write(trajectory_input(12, tokens=32))
        assert first.duplicate is False
        futures = [writer.submit(trajectory_input(13 + i, tokens=32)) for i in range(50)]
        assert len({f.result(30).seq for f in futures}) == 50
        assert writer.write(trajectory_input(12, tokens=32)).duplicate
        assert [r.duplicate for r in writer.write_many([trajectory_input(100), trajectory_input(12)])] == [False, True]
        assert writer.has("traj-12") and not writer.has("nope")
        with pytest.raises(DataInputError):
            writer.write({**trajectory_input(99), "logprobs": []})
        assert writer.rejections[error_codes.LENGTH_MISMATCH] == 1
        assert writer.stats().written == 52
    with pytest.raises(ClosedError):
        writer.write(trajectory_input(200))
    writer.close()  # idempotent

    async def read_back() -> Any:
        nc = await connect(nats_server.url)
        try:
            return await read_record(nc, "traj-30", buffer)
        finally:
            await nc.close()

    assert_stored_equals(asyncio.run(read_back()).trajectory, trajectory_input(30, tokens=32))


def test_numpy_payloads_are_stored_byte_for_byte(nats_server: NatsServer) -> None:
    tokens = np.arange(-500, 500, dtype=np.int64) * 4_000_000 // 1000
    logprobs = np.linspace(-20, 0, 1000, dtype=np.float64)
    t = {**trajectory_input(14, tokens=1000), "tokens": tokens, "logprobs": logprobs}
    with SyncExperienceWriter.connect(nats_server.url, fresh_buffer()) as writer:
        writer.write(t)
        buffer = writer.writer.names.buffer

    async def read_back() -> Any:
        nc = await connect(nats_server.url)
        try:
            return await read_record(nc, "traj-14", buffer)
        finally:
            await nc.close()

    stored = asyncio.run(read_back()).trajectory
    assert stored.tokens.tobytes() == tokens.astype("<i4").tobytes()
    np.testing.assert_array_equal(stored.logprobs, logprobs.astype(np.float32))
