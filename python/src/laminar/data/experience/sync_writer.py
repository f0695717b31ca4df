"""`ExperienceWriter` for rollout loops that are not asyncio: the writer and its NATS connection
live on an event loop in a background thread, and each call hands its work to that loop.

    with SyncExperienceWriter.connect("nats://127.0.0.1:4222", buffer="main") as writer:
        writer.write(trajectory)                    # blocks until stored: WriteResult
        futures = [writer.submit(t) for t in batch] # pipelined; each a concurrent.futures.Future
        results = [f.result() for f in futures]
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Coroutine, Dict, Iterable, List, Optional, TypeVar

import nats

from ...errors import ClosedError
from ..rejections import RejectionCounter
from .writer import DEFAULT_CONCURRENCY, ExperienceWriter, WriteResult, WriterStats

T = TypeVar("T")

_DEFAULT_CONNECT: Dict[str, Any] = {
    # Through a server restart: reconnect for as long as it takes, quickly; writes wait (and
    # retry for the writer's retry_for) meanwhile.
    "max_reconnect_attempts": -1,
    "reconnect_time_wait": 0.25,
}


class SyncExperienceWriter:
    """A blocking front of `ExperienceWriter` (see the module doc). Thread-safe: any thread may
    call it; the writes run concurrently on the writer's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread, nc: Any, writer: ExperienceWriter) -> None:
        """Use `SyncExperienceWriter.connect`."""
        self._loop = loop
        self._thread = thread
        self._nc = nc
        self._writer = writer
        self._closed = False
        self._in_flight: "set[concurrent.futures.Future[Any]]" = set()
        self._lock = threading.Lock()

    @classmethod
    def connect(
        cls,
        servers: Any = "nats://127.0.0.1:4222",
        buffer: str = "default",
        *,
        connect_options: Optional[Dict[str, Any]] = None,
        **writer_options: Any,
    ) -> "SyncExperienceWriter":
        """Connects to NATS (nats-py's `connect` with `connect_options`) and opens a writer on
        `buffer` with `writer_options` (those of `ExperienceWriter.open`)."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="laminar-experience-writer", daemon=True)
        thread.start()

        async def start() -> tuple:
            nc = await nats.connect(servers, **{**_DEFAULT_CONNECT, **(connect_options or {})})
            try:
                return nc, await ExperienceWriter.open(nc, buffer, **writer_options)
            except BaseException:
                await nc.close()
                raise

        try:
            nc, writer = asyncio.run_coroutine_threadsafe(start(), loop).result()
        except BaseException:
            _stop(loop, thread)
            raise
        return cls(loop, thread, nc, writer)

    @property
    def writer(self) -> ExperienceWriter:
        """The asyncio writer underneath (use it only from its loop)."""
        return self._writer

    @property
    def rejections(self) -> RejectionCounter:
        return self._writer.rejections

    def stats(self) -> WriterStats:
        return self._writer.stats()

    def submit(self, trajectory: Any) -> "concurrent.futures.Future[WriteResult]":
        """Starts a write and returns at once; the future holds its `WriteResult` or error."""
        return self._run(self._writer.write(trajectory))

    def write(self, trajectory: Any, timeout: Optional[float] = None) -> WriteResult:
        """Validates and stores one trajectory (see `ExperienceWriter.write`)."""
        return self.submit(trajectory).result(timeout)

    def write_many(self, trajectories: Iterable[Any], concurrency: int = DEFAULT_CONCURRENCY) -> List[WriteResult]:
        """Writes trajectories with up to `concurrency` in flight; results in input order."""
        return self._run(self._writer.write_many(trajectories, concurrency)).result()

    def has(self, id: str) -> bool:
        return self._run(self._writer.has(id)).result()

    def close(self) -> None:
        """Waits for the writes in flight, closes the connection and stops the loop. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            in_flight = list(self._in_flight)
        try:
            concurrent.futures.wait(in_flight)
            asyncio.run_coroutine_threadsafe(self._nc.close(), self._loop).result()
        finally:
            _stop(self._loop, self._thread)

    def __enter__(self) -> "SyncExperienceWriter":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        with self._lock:
            if self._closed:
                coro.close()
                raise ClosedError("the writer is closed")
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
            self._in_flight.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: "concurrent.futures.Future[Any]") -> None:
        with self._lock:
            self._in_flight.discard(future)


def _stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()
