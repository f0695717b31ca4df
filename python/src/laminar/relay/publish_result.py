"""What a publish returns: ``PublishResult``, the writer's stall over and the relay's verdict to come.

``RelayClient.publish`` and ``Publication.commit`` return as soon as the tensors are in the relay's
segment and the commit is sent: a trainer's stall is the copy. The relay then reads every byte
once more, checks it against the checksums the writer computed while copying, and serves the
version (``acquire``, ``watch``, the broadcast to other relays) only once it passed.
``wait_visible()`` waits for that verdict:

    result = relay.publish("policy", step, model.state_dict())   # back to training at once
    ...
    description = result.wait_visible(timeout=60)                # verified and served

A version the relay refused (``ERR_CHECKSUM_MISMATCH``: its bytes changed after they were
checksummed) is aborted by the client before ``wait_visible`` raises, so the previous version
stays the latest; nothing has to wait for the verdict for that to happen.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from concurrent.futures import Future
from typing import Any, Optional

from ..errors import LaminarTimeoutError


class PublishResult:
    """A version handed to the relay. ``model``, ``version``, ``segment`` (the segment's name while it
    was written) and ``size`` say which; ``stall_seconds`` is how long the call that returned it
    blocked its caller (``publish``: begin, copies and commit; ``commit``: the reports and the
    commit request). ``visible_seconds`` is the time from the commit request to the version
    served, once it is (None before, and when it was refused)."""

    def __init__(self, model: str, version: int, segment: str, size: int, committed_at: float) -> None:
        self.model = model
        self.version = version
        self.segment = segment
        self.size = size
        #: Set by the call that returns this result, when it does.
        self.stall_seconds = 0.0
        self.visible_seconds: Optional[float] = None
        self._committed_at = committed_at
        self._visible: Future = Future()
        # Running from the start: nobody may cancel it (the relay's verdict must find it).
        self._visible.set_running_or_notify_cancel()

    def __repr__(self) -> str:
        state = "visible" if self.visible else ("refused" if self.done else "verifying")
        return f"PublishResult({self.model!r}, v{self.version}, {state})"

    @property
    def done(self) -> bool:
        """True once the relay served the version or refused it."""
        return self._visible.done()

    @property
    def visible(self) -> bool:
        """True once the relay verified the version and serves it."""
        return self._visible.done() and self._visible.exception() is None

    @property
    def future(self) -> Future:
        """The verdict as a ``concurrent.futures.Future``: the relay's description of the version, or
        its error. Its callbacks run on the client's reader thread: keep them short."""
        return self._visible

    def wait_visible(self, timeout: Optional[float] = None) -> dict[str, Any]:
        """Waits until the relay verified the version and serves it, and returns the relay's
        description of it (``checksums``, ``dir``, ...). Raises the relay's error when it refused the
        version (``ERR_CHECKSUM_MISMATCH``, ``ERR_INCOMPLETE``; the version was aborted by then),
        ``ClosedError`` when the relay went away first, and ``LaminarTimeoutError`` after
        ``timeout`` seconds (None: no limit; the verdict still comes later)."""
        try:
            return self._visible.result(timeout)
        except concurrent.futures.TimeoutError:
            if self._visible.done():
                raise  # the relay's own answer was a timeout error
            raise LaminarTimeoutError(f"{self.model} v{self.version} was not verified within {timeout} s") from None

    async def wait_visible_async(self, timeout: Optional[float] = None) -> dict[str, Any]:
        """``wait_visible`` for asyncio: waits without blocking the event loop."""
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self._visible)), timeout)
        except asyncio.TimeoutError:
            raise LaminarTimeoutError(f"{self.model} v{self.version} was not verified within {timeout} s") from None

    # -- the publication's side -------------------------------------------------------------

    def _served(self, description: dict[str, Any]) -> None:
        # Before the future: whoever wakes from wait_visible finds visible_seconds set.
        self.visible_seconds = time.perf_counter() - self._committed_at
        self._visible.set_result(description)

    def _refused(self, err: BaseException) -> None:
        self._visible.set_exception(err)
