"""Retries of idempotent JetStream calls through a server restart or a lost connection, as
src/data/retry.ts: only transport failures are retried (timeouts, no responders, a connection
being re-established); an answer from the server (a JetStream API error: "no") goes back to
the caller at once, and so does a closed or draining connection (retrying cannot help)."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Optional, TypeVar

import nats.errors
import nats.js.errors

T = TypeVar("T")

DEFAULT_RETRY_FOR = 30.0
"""Seconds a call keeps retrying before its last failure goes to the caller."""

_FINAL = (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError)
_TRANSIENT = (
    asyncio.TimeoutError,  # nats.errors.TimeoutError is one
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,  # no responders to a JetStream publish
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,  # disconnected and the reconnect buffer is full
    nats.errors.StaleConnectionError,
)


_CLUSTER_NOT_AVAILABLE = 10008
"""JetStream's "temporarily unavailable": the server asked knows no leader for the stream (an
election); a read from the leader (experience/jetstream.py `leader_get`) may get it. As retry.ts."""


def is_transient(err: BaseException) -> bool:
    """Whether a failure may go away by itself (the server restarting, a reconnection, an election)."""
    if isinstance(err, _FINAL):
        return False
    if isinstance(err, nats.js.errors.APIError):
        # An answer, even a 503 one (nats-server 2.9 answers "maximum bytes exceeded" so), except
        # "cluster not available", which says to ask again.
        return err.err_code == _CLUSTER_NOT_AVAILABLE
    return isinstance(err, _TRANSIENT)


def backoff(attempt: int) -> float:
    """Capped exponential backoff: 25 ms, 50 ms, ... 1 s."""
    return min(1.0, 0.025 * 2**attempt)


async def retry_transient(
    fn: Callable[[], Awaitable[T]],
    retry_for: float = DEFAULT_RETRY_FOR,
    on_retry: Optional[Callable[[BaseException, int], None]] = None,
) -> T:
    """Calls `fn` until it succeeds, fails for good, or `retry_for` seconds have passed."""
    deadline = time.monotonic() + retry_for
    attempt = 0
    while True:
        try:
            return await fn()
        except Exception as err:
            if not is_transient(err) or time.monotonic() > deadline:
                raise
            if on_retry is not None:
                on_retry(err, attempt)
        await asyncio.sleep(backoff(attempt))
        attempt += 1
