"""Faults: a relay killed under a client (reconnect, watches resubscribe, what the old
connection held is gone) and a Python client process killed (the relay releases its leases and
drops its unfinished publication)."""

from __future__ import annotations

import queue
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from laminar import ClosedError, LaminarError, RelayClient, error_codes

pytestmark = pytest.mark.timeout(180)


def publish(client, model: str, version: int) -> None:
    client.publish(model, version, {"w": np.full(64, version, np.float32)}).wait_visible(timeout=60)


def wait_until(condition, timeout: float = 60.0, what: str = "the condition"):
    """Polls ``condition`` until it returns something true; the deadline only bounds the wait."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.02)


class TestRelayKilled:
    def test_the_client_reconnects_and_its_watch_resubscribes(self, relay):
        client = RelayClient(relay.socket_path, name="survivor")
        try:
            publish(client, "org/m", 1)
            lease = client.acquire("org/m")
            pub = client.begin("org/m", 2, [("w", "F32", [64])])
            events: queue.Queue = queue.Queue()
            watch = client.watch("org/m", replay=True)
            threading.Thread(target=lambda: [events.put(e) for e in watch], daemon=True).start()
            assert events.get(timeout=30).version == 1
            old_relay = client.relay_id

            relay.kill()
            wait_until(lambda: not client.connected, what="the client seeing the relay gone")
            with pytest.raises(ClosedError):
                client.status()  # nobody listens: fails at once, nothing waits
            lease.release()  # the relay took the lease with the connection: released silently
            with pytest.raises(ClosedError):
                pub.commit()  # the publication went with the connection too

            relay.start()
            status = client.status()  # the next request connects again
            assert client.reconnects == 1 and client.relay_id == old_relay
            assert status["leases"] == 0
            # the unfinished version 2 was not kept; version 1 was
            assert [(v["version"], v["state"]) for v in status["versions"] if v["model"] == "org/m"] == [(1, "complete")]

            publish(client, "org/m", 2)
            # the watch came back by itself: it sees version 2, and not version 1 again
            assert events.get(timeout=60).version == 2
            watch.close()
        finally:
            client.close()

    def test_without_reconnect_a_lost_relay_closes_the_client(self, relay):
        client = RelayClient(relay.socket_path, reconnect=False)
        try:
            publish(client, "org/m", 1)
            watch = client.watch("org/m")
            relay.kill()
            assert next(watch, None) is None  # the watch ends with the connection
            with pytest.raises(ClosedError):
                client.status()
            assert client.closed
            relay.start()
            with pytest.raises(ClosedError):
                client.status()
        finally:
            client.close()

    def test_a_request_in_flight_fails_with_closed(self, relay):
        client = RelayClient(relay.socket_path)
        try:
            publish(client, "org/m", 1)
            waiting = client._live().connection.request_future("acquire", {"model": "org/m", "atLeast": 2, "timeoutMs": 120_000})
            relay.kill()
            with pytest.raises(ClosedError) as info:
                waiting.result(60)
            assert info.value.code == error_codes.CLOSED
        finally:
            client.close()


VICTIM = textwrap.dedent(
    """
    import sys
    import numpy as np
    from laminar import RelayClient

    relay = RelayClient(sys.argv[1], name="victim")
    lease = relay.acquire("org/m")
    views = lease.numpy()
    pub = relay.begin("org/m", 2, [("w", "F32", [64])])
    pub.write("w", np.zeros(64, np.float32))
    pub.flush()
    print("ready", flush=True)
    sys.stdin.read()  # until killed
    """
)


class TestClientKilled:
    def test_its_leases_are_released_and_its_publication_dropped(self, relay):
        with RelayClient(relay.socket_path, name="observer") as observer:
            publish(observer, "org/m", 1)
            victim = subprocess.Popen([sys.executable, "-c", VICTIM, relay.socket_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                assert victim.stdout.readline().strip() == "ready"
                status = observer.status()
                assert status["leases"] == 1
                assert {(v["version"], v["state"]) for v in status["versions"]} == {(1, "complete"), (2, "writing")}

                victim.kill()
                victim.wait(30)

                def released():
                    s = observer.status()
                    return s["leases"] == 0 and [v["version"] for v in s["versions"]] == [1]

                wait_until(released, what="the relay releasing the dead client's lease and publication")
                publish(observer, "org/m", 2)  # version 2 is free again
            finally:
                victim.kill()
                victim.wait(30)
                victim.stdout.close()
                victim.stdin.close()


def test_a_lease_of_a_lost_connection_still_reads_until_released(relay):
    """The mapping is this process's: the views stay readable after the relay died (the pages
    are the relay's shm files, still on /dev/shm); releasing is silent."""
    client = RelayClient(relay.socket_path)
    try:
        publish(client, "org/m", 3)
        with client.acquire("org/m") as lease:
            relay.kill()
            wait_until(lambda: not client.connected, what="the client seeing the relay gone")
            assert (lease.numpy("w") == 3).all()
        with pytest.raises(LaminarError) as info:
            lease.numpy()
        assert info.value.code == error_codes.MAPPING_CLOSED
    finally:
        client.close()
