"""Fixtures shared by the Python tests: real relay processes (relay_process.py), real
nats-servers with JetStream (nats_server.py) and a real redis-server (redis_server.py)."""

from __future__ import annotations

import itertools
from typing import Callable, Iterator, List

import pytest
from nats_server import NatsServer
from redis_server import redis_server
from relay_process import RelayFactory, RelayProcess


@pytest.fixture
def relay_factory() -> Iterator[RelayFactory]:
    """Call it to start a relay (``relay_factory(args)``, default ``--no-pin``): a RelayProcess
    with ``socket_path``, ``shm_dir``, ``kill()``, ``stop()`` and ``start()``. Every relay it made
    is killed and its /dev/shm directory removed after the test."""
    factory = RelayFactory()
    yield factory
    factory.cleanup()


@pytest.fixture
def relay(relay_factory: RelayFactory) -> RelayProcess:
    """One relay with the default arguments."""
    return relay_factory()


@pytest.fixture(scope="module")
def module_relay() -> Iterator[RelayProcess]:
    """One relay with the default arguments for a whole test module: a relay's start is half a
    second of CPU (Node loading the CLI) and most of a second of wall time, and a module of small
    protocol cases started one per case (36 in test_relay_ops.py alone). Cases keep apart by
    model name (``model_name``); a case that reads relay-wide state (every version, the lease
    count) or kills the relay takes its own from ``relay_factory``."""
    factory = RelayFactory()
    yield factory()
    factory.cleanup()


_model_names = itertools.count(1)


@pytest.fixture
def model_name() -> str:
    """A model name no other case of the run uses (``org/case-<n>``), for cases sharing a relay."""
    return f"org/case-{next(_model_names)}"


@pytest.fixture(scope="module")
def nats_server() -> Iterator[NatsServer]:
    """One nats-server (JetStream, 1 MiB max payload) for a test module; tests keep apart by
    buffer name. Killed and its store removed after the module."""
    server = NatsServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def nats_server_factory() -> Iterator[Callable[..., NatsServer]]:
    """Call it to start a nats-server of the test's own (``nats_server_factory(max_payload=...)``),
    for a test that restarts or kills it; every one it made is cleaned up after the test."""
    made: List[NatsServer] = []

    def start(**options: object) -> NatsServer:
        server = NatsServer(**options)  # type: ignore[arg-type]
        made.append(server)
        return server.start()

    yield start
    for server in made:
        server.cleanup()


@pytest.fixture(scope="module")
def redis_socket() -> Iterator[str]:
    """One redis-server for a test module, on a unix socket; tests keep apart by key names.
    Stopped and its directory removed after the module."""
    with redis_server() as socket_path:
        yield socket_path
