"""laminar.data.Sampler against a real ``laminar sampler`` process on a real nats-server, with
trajectories written by the TypeScript writer: contents (chunked payloads included) read in place,
no copies, release and reuse of arenas, prefetch, error codes, a killed client, and the service
killed and restarted under a trainer with nothing lost."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterator, List

import nats
import numpy as np
import pytest
import torch

from laminar import error_codes
from laminar.data import Batch, ExperienceWriter, Sampler, TrajectoryBuilder, loss_mask_of, turn_boundaries_of
from laminar.errors import ClosedError, LaminarError, LaminarTimeoutError
from sampler_service import SamplerService, expected_logprobs, expected_tokens, write_trajectories

_names = itertools.count(1)


@pytest.fixture
def buffer() -> str:
    return f"pysampler{os.getpid()}x{next(_names)}"


@pytest.fixture
def shm_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="laminar-py-sampler-", dir="/dev/shm")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def service_factory(nats_server, shm_dir: str, buffer: str) -> Iterator[Callable[..., SamplerService]]:
    """Starts ``laminar sampler --buffer <buffer> ARGS``; every service is killed after the test."""
    made: List[SamplerService] = []

    def start(*args: str, name: str = "sampler") -> SamplerService:
        s = SamplerService(nats_server.url, shm_dir, ["--buffer", buffer, *args], name=name)
        made.append(s)
        return s.start()

    yield start
    for s in made:
        s.kill()


def until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    """Polls ``check`` (a request to the service) until it holds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def seed_of(trajectory_id: str) -> int:
    return int(trajectory_id[1:])


def check_contents(batch: Batch, length_of: Callable[[int], int]) -> None:
    """Every item's tokens, logprobs and numbers are what the writer wrote for its seed."""
    assert batch.copies() == 0
    offset = 0
    for i, item in enumerate(batch):
        seed = seed_of(item.id)
        n = length_of(seed)
        assert batch.offsets[i] == offset
        assert batch.lengths[i] == n
        np.testing.assert_array_equal(item.tokens, expected_tokens(seed, n))
        np.testing.assert_array_equal(item.logprobs, expected_logprobs(seed, n))
        np.testing.assert_array_equal(batch.tokens[offset : offset + n], expected_tokens(seed, n))
        # Single-turn records: the prompt masked out, the whole response in.
        np.testing.assert_array_equal(item.loss_mask, np.repeat(np.array([0, 1], np.uint8), [min(4, n), n - min(4, n)]))
        assert item.segments is None and item.turn_boundaries == [min(4, n), n]
        assert item.reward == batch.rewards[i] == seed / 2
        assert item.prompt_length == batch.prompt_lengths[i] == min(4, n)
        assert item.response_length == n - min(4, n)
        assert item.info == {"seed": seed}
        assert item.group_id == f"g{seed}" and item.sample_index == 0 and item.group_size == 1
        assert item.times_sampled == 1 and item.staleness == 0 and item.weight_version == 0
        offset += n
    assert batch.tokens.size == batch.logprobs.size == batch.loss_mask.size == offset
    assert batch.bytes == offset * 8
    assert batch.tokens.dtype == np.int32 and batch.logprobs.dtype == np.float32


def test_batches_hold_what_was_written_read_in_place(nats_server, buffer, service_factory):
    # 300 000 tokens = 2.4 MB: above the server's 1 MiB max payload, so the writer chunks them.
    def length_of(seed: int) -> int:
        return 300_000 if seed % 3 == 2 else 40 + seed

    written = write_trajectories(nats_server.url, buffer, count=12, tokens=[length_of(s) for s in range(12)], concurrency=1)
    service = service_factory("--batch-size", "4", "--prefetch", "off")
    sampler = Sampler(service.socket_path)
    seen: List[str] = []
    for _ in range(3):
        with sampler.sample(timeout=30) as batch:
            assert len(batch) == 4 and batch.path.startswith(service.shm_dir)
            check_contents(batch, length_of)
            seen += batch.ids
            # torch views over the same memory: no copy either.
            tensors = batch.torch()
            assert tensors["tokens"].data_ptr() == batch.tokens.ctypes.data
            assert tensors["rewards"].data_ptr() == batch.rewards.ctypes.data
            assert int(tensors["lengths"].sum()) == batch.tokens.size
        assert batch.released
    assert sorted(seen) == sorted(written)
    sampler.close()


def write_multi_turn(nats_url: str, buffer: str, count: int) -> List[Any]:
    """Writes `count` multi-turn trajectories with the Python writer (TrajectoryBuilder); returns them."""

    def built(seed: int) -> Any:
        b = TrajectoryBuilder([seed, seed + 1, seed + 2])
        for turn in range(1 + seed % 3):
            n = 2 + (seed + turn) % 5
            b.add_generated([seed * 100 + turn * 10 + k for k in range(n)], [-0.5 - k for k in range(n)], weight_version=0, finish_reason="tool_call")
            b.add_observation([7] * (1 + turn), tool="lookup", action_id=f"m{seed}/turn-{turn}", status="ok", latency_ms=3 + turn)
        b.add_generated([seed, 2], [-1.0, -2.0], weight_version=0, finish_reason="stop")
        return b.build(id=f"m{seed}", prompt_id=f"p{seed}", group_id=f"g{seed}", sample_index=0, group_size=1, reward=float(seed))

    async def write() -> List[Any]:
        nc = await nats.connect(nats_url)
        try:
            writer = await ExperienceWriter.open(nc, buffer)
            out = [built(seed) for seed in range(count)]
            for t in out:
                await writer.write(t)
            return out
        finally:
            await nc.close()

    return asyncio.run(write())


def test_multi_turn_batches_carry_the_loss_mask_and_segments_in_place(nats_server, buffer, service_factory):
    written = {t.id: t for t in write_multi_turn(nats_server.url, buffer, 8)}
    write_trajectories(nats_server.url, buffer, start=100, count=4, tokens=9)  # single-turn beside them
    service = service_factory("--batch-size", "6", "--prefetch", "off")
    sampler = Sampler(service.socket_path)
    for _ in range(2):  # the second batch is built in the first one's released file
        with sampler.sample(timeout=30) as batch:
            assert batch.copies() == 0  # the mask is a view of the file too
            tensors = batch.torch()
            assert tensors["loss_mask"].data_ptr() == batch.loss_mask.ctypes.data and tensors["loss_mask"].dtype == torch.uint8
            for item in batch:
                t = written.get(item.id)
                if t is None:
                    np.testing.assert_array_equal(item.loss_mask, loss_mask_of(4, 5))
                    assert item.segments is None
                    continue
                assert item.segments == t.segments
                np.testing.assert_array_equal(item.tokens, t.tokens)
                np.testing.assert_array_equal(item.logprobs, t.logprobs)
                np.testing.assert_array_equal(item.loss_mask, loss_mask_of(t.prompt_length, t.response_length, t.segments))
                bounds = item.turn_boundaries
                assert bounds == turn_boundaries_of(t.prompt_length, t.response_length, t.segments) and bounds[-1] == len(item.tokens)
                # Observations are out of the loss: the masked logprobs are the generated ones only.
                assert (item.logprobs[item.loss_mask == 0] == 0).all()
    sampler.close()


def test_release_returns_the_arena_for_the_next_batch(nats_server, buffer, service_factory):
    write_trajectories(nats_server.url, buffer, count=16, tokens=64)
    service = service_factory("--batch-size", "4", "--prefetch", "off")
    sampler = Sampler(service.socket_path)
    first = sampler.sample(timeout=30)
    path = first.path
    first.release()
    first.release()  # idempotent
    assert sampler.stats()["spareArenaBytes"] == first.bytes
    with sampler.sample(timeout=30) as second:
        assert second.path == path
        check_contents(second, lambda seed: 64)
    held = sampler.sample(timeout=30)
    stats = sampler.stats()
    assert stats["batchesHeld"] == 1 and stats["arenaFiles"] == 1
    sampler.close()  # releases what it holds
    assert held.released


def test_prefetched_batch(nats_server, buffer, service_factory):
    write_trajectories(nats_server.url, buffer, count=12, tokens=32)
    service = service_factory("--batch-size", "4")
    sampler = Sampler(service.socket_path)
    until(lambda: sampler.stats()["readyBatches"] == 1)
    with sampler.sample(timeout=30) as batch:
        assert batch.prefetched
        check_contents(batch, lambda seed: 32)
        until(lambda: sampler.stats()["readyBatches"] == 1)  # the next one, while this one is held
    with sampler.sample(timeout=30) as batch:
        assert batch.prefetched
    sampler.close()


def test_errors_carry_the_service_codes(nats_server, buffer, service_factory, shm_dir):
    write_trajectories(nats_server.url, buffer, count=8, tokens=16, group_size=4)
    service = service_factory("--batch-size", "4", "--strategy", "prioritized")
    sampler = Sampler(service.socket_path)
    sampler.set_trainer_version(3)
    with pytest.raises(LaminarError) as err:
        sampler.set_trainer_version(2)
    assert err.value.code == error_codes.BAD_DATA_OPTIONS
    assert sampler.update_priority("t0", 2.5) is True
    assert sampler.update_priority("missing", 1.0) is False
    with pytest.raises(LaminarError) as err:
        sampler.update_priority("t0", -1)
    assert err.value.code == error_codes.BAD_REQUEST
    sampler.sample(timeout=30).release()
    sampler.sample(timeout=30).release()
    with pytest.raises(LaminarTimeoutError) as timeout:
        sampler.sample(timeout=0.2)
    assert timeout.value.code == error_codes.TIMEOUT
    sampler.close()

    six = service_factory("--batch-size", "6", "--strategy", "groups", name="six")
    write_trajectories(nats_server.url, buffer, count=4, start=100, tokens=16, group_size=4)
    with Sampler(six.socket_path) as groups:
        with pytest.raises(LaminarError) as err:
            groups.sample(timeout=10)
        assert err.value.code == error_codes.BATCH_IMPOSSIBLE

    with pytest.raises(ClosedError):
        Sampler(os.path.join(shm_dir, "nobody.sock"), reconnect_timeout=0.2)


def test_a_killed_client_has_its_batches_released(nats_server, buffer, service_factory):
    write_trajectories(nats_server.url, buffer, count=8, tokens=16)
    service = service_factory("--batch-size", "4", "--prefetch", "off")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from laminar.data import Sampler\n"
            f"b = Sampler({service.socket_path!r}).sample(timeout=30)\n"
            "print(b.bytes, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        held_bytes = int(child.stdout.readline())
        watcher = Sampler(service.socket_path)
        assert watcher.stats()["batchesHeld"] == 1
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        until(lambda: watcher.stats()["batchesHeld"] == 0)
        assert watcher.stats()["spareArenaBytes"] == held_bytes
        # Its trajectories were handed over (sampled out), the rest is still there.
        with watcher.sample(timeout=30) as batch:
            assert sorted(batch.ids) == ["t4", "t5", "t6", "t7"]
        watcher.close()
    finally:
        child.kill()
        child.wait()


def test_service_killed_and_restarted_under_a_trainer_loses_nothing(nats_server, buffer, service_factory):
    """ "Nothing lost": every trajectory whose write JetStream acknowledged reaches the trainer in
    some batch, before the kill or after the restart. The service deletes a trajectory from the
    stream only after its batch's descriptor is on the trainer's socket (the kernel keeps it for
    the trainer when the service dies), so a kill can make a trajectory come twice (handed over,
    not deleted yet: at least once), never zero times. Duplicates may only be trajectories handed
    over by the killed service."""
    count, size = 96, 8
    written = set(write_trajectories(nats_server.url, buffer, count=count, tokens=[40 + s for s in range(count)]))
    service = service_factory("--batch-size", str(size))
    sampler = Sampler(service.socket_path, reconnect_timeout=60)
    before_kill: List[str] = []
    received: List[str] = []
    held: List[Batch] = []
    for step in range(3):
        batch = sampler.sample(timeout=30)
        check_contents(batch, lambda seed: 40 + seed)
        received += batch.ids
        before_kill += batch.ids
        if step < 2:
            batch.release()
        else:
            held.append(batch)  # the trainer is training on this one when the service dies
    sampler.set_trainer_version(5)
    old_instance = sampler.instance
    service.kill(signal.SIGKILL)
    service.start()  # the same socket; the trainer's next call finds the new instance

    def drain() -> None:
        while True:
            try:
                batch = sampler.sample(timeout=3)
            except LaminarTimeoutError:
                return
            check_contents_at_version(batch, 5)
            received.extend(batch.ids)
            batch.release()

    drain()
    # A kill in the middle of deleting a batch's records can leave fewer than a batch behind:
    # they are "sampled later" once more trajectories arrive (FIFO: the oldest go first).
    write_trajectories(nats_server.url, buffer, count=size, start=1000, tokens=[40 + s for s in range(1000, 1000 + size)])
    drain()
    assert sampler.instance != old_instance and sampler.reconnects == 1
    assert sampler.stats()["trainerVersion"] == 5
    # The batch held across the restart is still readable (its file was removed, not its pages).
    check_contents(held[0], lambda seed: 40 + seed)
    held[0].release()  # local: that service is gone
    assert written <= set(received)
    duplicates = {i for i in received if received.count(i) > 1}
    assert duplicates <= set(before_kill)
    assert sampler.stats()["items"] == 0
    sampler.close()


def check_contents_at_version(batch: Batch, trainer_version: int) -> None:
    """check_contents for batches sampled after set_trainer_version(v): staleness is v - 0."""
    assert batch.trainer_version == trainer_version
    assert (batch.staleness == trainer_version).all()
    assert batch.copies() == 0
    for item in batch:
        seed = seed_of(item.id)
        np.testing.assert_array_equal(item.tokens, expected_tokens(seed, 40 + seed))
        np.testing.assert_array_equal(item.logprobs, expected_logprobs(seed, 40 + seed))


def test_a_sample_waiting_when_the_service_dies_goes_on_with_the_next_one(nats_server, buffer, service_factory):
    """The trainer waits in sample() on an empty buffer; the service is killed and restarted, and
    trajectories arrive: the waiting call reconnects and returns them."""
    service = service_factory("--batch-size", "4")
    sampler = Sampler(service.socket_path)
    result: List[object] = []

    def trainer() -> None:
        try:
            with sampler.sample(timeout=60) as batch:
                check_contents(batch, lambda seed: 24)
                result.append(sorted(batch.ids))
        except BaseException as err:  # reported by the assertion below
            result.append(err)

    thread = threading.Thread(target=trainer)
    thread.start()

    def waiting_in_sample() -> bool:
        # The trainer thread holds the connection's lock for as long as its request is out.
        lock = sampler._conn._lock
        free = lock.acquire(blocking=False)
        if free:
            lock.release()
        return not free

    until(waiting_in_sample)
    service.kill(signal.SIGKILL)
    service.start()
    write_trajectories(nats_server.url, buffer, count=4, tokens=24)
    thread.join(90)
    assert result == [["t0", "t1", "t2", "t3"]]
    assert sampler.reconnects == 1
    sampler.close()
