"""Versions as they complete on the relay: ``RelayClient.watch`` (an iterator) and
``RelayClient.awatch`` (an async iterator), with the TypeScript client's semantics:

- with ``replay``, the latest complete version of each model comes first;
- if the relay goes away, the watch subscribes again once it is back (trying every 0.1-2 s) and
  is first given the latest complete version of each model when it is newer than the last one
  delivered (versions completed meanwhile besides the latest are not replayed); a version is
  never delivered twice;
- ``watch()`` subscribes at once (when the relay is there), so nothing that completes between
  creating the watch and iterating it is missed; ``awatch()`` subscribes at ``async with``
  entry or at the first ``async for`` step;
- it ends when the consumer stops (``break``, ``close()``/``aclose()``, leaving its ``with``
  block), when the client is closed, or, with ``reconnect=False``, with the connection;
- a consumer more than 1024 events behind gets ``WATCH_OVERFLOW``.

The iterator objects hold their generators, never the reverse: a consumer that breaks out of its
loop drops the watch, and the generator's cleanup unsubscribes at once (no reference cycle
waiting for the garbage collector).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, AsyncGenerator, Generator, Mapping, Optional, Protocol

from .. import error_codes
from ..errors import ClosedError, LaminarError
from .protocol import VersionEvent
from .session import WATCH_QUEUE_LIMIT, Session


class WatchedClient(Protocol):
    """What a watch needs of its client (``RelayClient`` is one): the live session, whether to
    come back after the relay goes away, and a place to register the watch so that closing the
    client ends it. A protocol here rather than an import of ``client``, which imports this
    module."""

    reconnect: bool

    @property
    def closed(self) -> bool: ...

    def _live(self) -> Session: ...

    def _track_watch(self, control: Any) -> None: ...


#: Backoff between attempts to subscribe again while the relay is away.
RESUBSCRIBE_FIRST_SECONDS = 0.1
RESUBSCRIBE_MAX_SECONDS = 2.0

# What a subscription's queue carries besides events.
_LOST = object()  # its connection ended
_STOP = object()  # the consumer or the client stopped the watch
_OVERFLOW = object()  # the consumer fell too far behind
# Yielded once by a watch's generator after its first attempt to subscribe (whether the relay
# was there or not): the watch object takes it at creation, so that it is subscribed from then on.
_READY = object()


class _Delivered:
    """The subscription's arguments, and the newest version delivered of each model (after a
    resubscription the replay repeats the version delivered last: it is skipped)."""

    def __init__(self, model: Optional[str], replay: bool) -> None:
        self.model = model
        self.replay = replay
        self._latest: dict[str, int] = {}

    def args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"replay": self.replay}
        if self.model is not None:
            args["model"] = self.model
        return args

    def fresh(self, raw: Mapping[str, Any]) -> Optional[VersionEvent]:
        event = VersionEvent.from_wire(raw)
        if self._latest.get(event.model, -1) >= event.version:
            return None
        self._latest[event.model] = event.version
        return event


def _overflow() -> LaminarError:
    return LaminarError(error_codes.WATCH_OVERFLOW, f"more than {WATCH_QUEUE_LIMIT} version events were not consumed")


# -- threads ------------------------------------------------------------------------------------


class _Control:
    """How a watch is stopped from any thread: shared by the watch object and its generator."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.queue: Optional[queue.SimpleQueue] = None

    def stop(self) -> None:
        self.stopped.set()
        q = self.queue
        if q is not None:
            q.put(_STOP)


class Watch:
    """An iterator of ``VersionEvent``s (see the module doc). ``close()`` may be called from any
    thread; ``with relay.watch(...) as w:`` closes it on leaving."""

    def __init__(self, client: WatchedClient, model: Optional[str], replay: bool) -> None:
        self._control = _Control()
        client._track_watch(self._control)
        self._events = _watch(client, _Delivered(model, replay), self._control)
        next(self._events, None)  # subscribes (_READY), or finds the client closed (the end)

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> VersionEvent:
        return next(self._events)  # type: ignore[return-value]

    def close(self) -> None:
        """Ends the iteration: the consumer's next ``next()`` raises StopIteration."""
        self._control.stop()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
        self._events.close()


def _watch(client: WatchedClient, state: _Delivered, control: _Control) -> Generator[Any, None, None]:
    backoff = RESUBSCRIBE_FIRST_SECONDS
    first = True
    while not control.stopped.is_set():
        try:
            session = client._live()
            watch = session.connection.request("watch", state.args())["watch"]
        except ClosedError:
            # A lost or refused connection is waited out; the relay's own answer is not.
            if client.closed or not client.reconnect:
                return
            if first:
                first = False
                yield _READY
            control.stopped.wait(backoff)
            backoff = min(RESUBSCRIBE_MAX_SECONDS, backoff * 2)
            continue
        backoff = RESUBSCRIBE_FIRST_SECONDS
        yield from _subscription(session, watch, state, control, first)
        first = False
        if not client.reconnect:
            return
        state.replay = True


def _subscription(session: Session, watch: int, state: _Delivered, control: _Control, ready: bool) -> Generator[Any, None, None]:
    q: queue.SimpleQueue = queue.SimpleQueue()
    overflowed = False

    def deliver(event: Mapping[str, Any]) -> None:
        nonlocal overflowed
        if overflowed:
            return
        if q.qsize() >= WATCH_QUEUE_LIMIT:
            overflowed = True
            q.put(_OVERFLOW)
        else:
            q.put(event)

    control.queue = q
    session.add_watcher(watch, deliver)
    unsubscribe = session.connection.on_closed(lambda _err: q.put(_LOST))
    if control.stopped.is_set():
        q.put(_STOP)  # stopped while subscribing
    try:
        if ready:
            yield _READY
        while True:
            item = q.get()
            if item is _STOP or item is _LOST:
                return
            if item is _OVERFLOW:
                raise _overflow()
            event = state.fresh(item)
            if event is not None:
                yield event
    finally:
        control.queue = None
        unsubscribe()
        session.drop_watcher(watch)
        if not session.connection.closed:
            session.connection.request_future("unwatch", {"watch": watch})  # not waited for


# -- asyncio ------------------------------------------------------------------------------------


class _AsyncControl:
    """How an async watch is stopped from any thread (through its loop)."""

    def __init__(self) -> None:
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.stopped = False
        self.wake: Optional[asyncio.Event] = None
        self.queue: Optional[asyncio.Queue] = None

    def stop_in_loop(self) -> None:
        self.stopped = True
        if self.wake is not None:
            self.wake.set()
        if self.queue is not None:
            self.queue.put_nowait(_STOP)

    def stop(self) -> None:
        loop = self.loop
        self.stopped = True
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self.stop_in_loop)
        except RuntimeError:
            pass  # the loop is closed: nobody iterates any more


class AsyncWatch:
    """An async iterator of ``VersionEvent``s (see the module doc), for asyncio. End it with
    ``await w.aclose()`` (or ``async with relay.awatch(...) as w:``), by breaking out of the
    loop, or by closing the client."""

    def __init__(self, client: WatchedClient, model: Optional[str], replay: bool) -> None:
        self._control = _AsyncControl()
        client._track_watch(self._control)
        self._events = _awatch(client, _Delivered(model, replay), self._control)

    def __aiter__(self) -> "AsyncWatch":
        return self

    async def __anext__(self) -> VersionEvent:
        item = await self._events.__anext__()
        if item is _READY:
            item = await self._events.__anext__()
        return item  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Ends the iteration and unsubscribes."""
        self._control.stop_in_loop()
        try:
            await self._events.aclose()
        except RuntimeError:
            pass  # another task is in __anext__: the stop ends its iteration, and the generator

    async def __aenter__(self) -> "AsyncWatch":
        try:
            item = await self._events.__anext__()  # subscribes
        except StopAsyncIteration:
            return self  # the client is closed: the iteration is over
        assert item is _READY
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


async def _awatch(client: WatchedClient, state: _Delivered, control: _AsyncControl) -> AsyncGenerator[Any, None]:
    loop = asyncio.get_running_loop()
    control.loop = loop
    control.wake = asyncio.Event()
    backoff = RESUBSCRIBE_FIRST_SECONDS
    first = True
    while not control.stopped:
        try:
            # Connecting again (a socket connect and a hello) blocks: on a thread.
            session = await loop.run_in_executor(None, client._live)
            watch = (await asyncio.wrap_future(session.connection.request_future("watch", state.args())))["watch"]
        except ClosedError:
            if client.closed or not client.reconnect:
                return
            if first:
                first = False
                yield _READY
            try:
                await asyncio.wait_for(control.wake.wait(), backoff)
            except asyncio.TimeoutError:
                pass
            backoff = min(RESUBSCRIBE_MAX_SECONDS, backoff * 2)
            continue
        backoff = RESUBSCRIBE_FIRST_SECONDS
        async for event in _asubscription(session, watch, state, control, loop, first):
            yield event
        first = False
        if not client.reconnect:
            return
        state.replay = True


async def _asubscription(
    session: Session, watch: int, state: _Delivered, control: _AsyncControl, loop: asyncio.AbstractEventLoop, ready: bool
) -> AsyncGenerator[Any, None]:
    q: asyncio.Queue = asyncio.Queue()
    overflowed = False

    def put(item: Any) -> None:
        nonlocal overflowed
        if overflowed:
            return
        if item is not _LOST and q.qsize() >= WATCH_QUEUE_LIMIT:
            overflowed = True
            item = _OVERFLOW
        q.put_nowait(item)

    def from_reader(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(put, item)
        except RuntimeError:
            pass  # the loop is closed

    control.queue = q
    session.add_watcher(watch, from_reader)
    unsubscribe = session.connection.on_closed(lambda _err: from_reader(_LOST))
    if control.stopped:
        q.put_nowait(_STOP)
    try:
        if ready:
            yield _READY
        while True:
            item = await q.get()
            if item is _STOP or item is _LOST:
                return
            if item is _OVERFLOW:
                raise _overflow()
            event = state.fresh(item)
            if event is not None:
                yield event
    finally:
        control.queue = None
        unsubscribe()
        session.drop_watcher(watch)
        if not session.connection.closed:
            session.connection.request_future("unwatch", {"watch": watch})
