"""Watches: replay, filters, no duplicates, stopping from any thread, and the asyncio variant."""

from __future__ import annotations

import asyncio
import queue
import threading

import numpy as np
import pytest

from laminar import RelayClient
from laminar.relay import VersionEvent

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def client(relay):
    with RelayClient(relay.socket_path) as c:
        yield c


def publish(client, model: str, version: int) -> None:
    client.publish(model, version, {"w": np.full(16, version, np.float32)}).wait_visible(timeout=60)


def consume(watch, into: queue.Queue) -> threading.Thread:
    """Iterates ``watch`` on a thread, putting each event (then None at the end) into ``into``."""

    def run() -> None:
        try:
            for event in watch:
                into.put(event)
        finally:
            into.put(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


class TestWatch:
    def test_replay_gives_the_latest_of_each_model_then_new_versions(self, client, relay):
        publish(client, "org/a", 1)
        publish(client, "org/a", 2)
        publish(client, "org/b", 5)
        with RelayClient(relay.socket_path) as trainer, client.watch(replay=True) as watch:
            first = {next(watch), next(watch)}
            assert {(e.model, e.version) for e in first} == {("org/a", 2), ("org/b", 5)}
            publish(trainer, "org/a", 3)
            event = next(watch)
            assert isinstance(event, VersionEvent)
            assert (event.model, event.version, event.segment) == ("org/a", 3, "org~2fa.v3.safetensors")
            assert event.size > 0

    def test_a_model_filter(self, client, relay):
        with RelayClient(relay.socket_path) as trainer, client.watch("org/b") as watch:
            for version in (1, 2):
                publish(trainer, "org/a", version)
                publish(trainer, "org/b", version)
            assert [(e.model, e.version) for e in (next(watch), next(watch))] == [("org/b", 1), ("org/b", 2)]

    def test_close_from_another_thread_ends_the_iteration(self, client):
        events: queue.Queue = queue.Queue()
        watch = client.watch("org/a")
        thread = consume(watch, events)
        publish(client, "org/a", 1)
        assert events.get(timeout=30).version == 1
        watch.close()
        assert events.get(timeout=30) is None
        thread.join(30)
        assert not thread.is_alive()

    def test_closing_the_client_ends_every_watch(self, relay):
        client = RelayClient(relay.socket_path)
        events: queue.Queue = queue.Queue()
        thread = consume(client.watch(), events)
        publish(client, "org/a", 1)
        assert events.get(timeout=30).version == 1
        client.close()
        assert events.get(timeout=30) is None
        thread.join(30)

    def test_breaking_out_unsubscribes(self, client):
        publish(client, "org/a", 1)
        session = client._live()
        for event in client.watch("org/a", replay=True):
            assert event.version == 1
            break
        # the watch object is gone with the loop: its watcher is dropped, its unwatch sent
        assert session._watchers == {}
        client.status()  # the unwatch was answered before this (answers come in order)


class TestAsyncWatch:
    async def test_events_in_an_event_loop(self, client, relay):
        publish(client, "org/a", 1)
        with RelayClient(relay.socket_path) as trainer:
            seen = []
            async with client.awatch("org/a", replay=True) as watch:
                async for event in watch:
                    seen.append(event.version)
                    if event.version == 1:
                        await asyncio.to_thread(publish, trainer, "org/a", 2)
                    if event.version == 2:
                        break
            assert seen == [1, 2]

    async def test_closing_the_client_ends_an_async_watch(self, relay):
        client = RelayClient(relay.socket_path)
        publish(client, "org/a", 1)
        watch = client.awatch(replay=True)
        assert (await asyncio.wait_for(watch.__anext__(), 30)).version == 1
        following = asyncio.ensure_future(watch.__anext__())
        client.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(following, 30)
