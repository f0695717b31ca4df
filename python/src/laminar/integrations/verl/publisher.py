"""The trainer side: a stream of ``(name, tensor)`` pairs published as the next version of a model.

verl hands a checkpoint engine the model engine's per-tensor generator (FSDP and Megatron gather
each parameter as it is asked for; the tensor may be freed or reused once the next one is asked
for). A relay version is laid out before it is written (``begin`` takes every tensor's name,
dtype and shape), and a generator tells its layout only by being consumed. So:

- the first publish of a ``StreamPublisher`` stages the stream: each tensor is copied to host
  memory as it comes (one copy of the model in RAM, once), the layout is read from the copies,
  and the version is published from them;
- every later publish streams: the version is begun with the layout learnt, and each tensor is
  copied into the segment as it comes, straight from its device, with nothing kept.

A stream whose layout differs from the one learnt (a tensor of another name, dtype or shape, one
missing or twice) fails that publish with a typed error and is aborted; the layout is forgotten,
and the next publish stages again.

A publish returns once the bytes are in the relay's segment; the relay verifies the version
after and serves it only then: the result's ``wait_visible`` (or ``wait_visible_async``) waits
for that, and raises the relay's error for a version it refused.

The stream is always consumed to its end, even when the publish fails: on a trainer of several
ranks, every rank's generator takes part in the same collectives (all-gathers), and a rank that
stopped early would leave the others waiting for ever.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional

from ... import error_codes
from ...errors import LaminarError
from ...relay import RelayClient, specs_of
from ...relay.publish_result import PublishResult as RelayPublishResult

log = logging.getLogger(__name__)

#: Errors that say the stream does not have the layout learnt from an earlier one.
_LAYOUT_CODES = frozenset({error_codes.UNKNOWN_TENSOR, error_codes.BAD_TENSOR, error_codes.DUPLICATE_TENSOR, error_codes.INCOMPLETE})


@dataclass(frozen=True)
class PublishResult:
    """What one ``publish`` did."""

    model: str
    version: int
    #: Bytes of tensor data in the version (0 when skipped).
    bytes: int
    #: Seconds from the first tensor asked for to the bytes in the relay's segment and the commit sent.
    seconds: float
    #: True when this version had been published by this publisher already (the stream was consumed, nothing written).
    skipped: bool = False
    #: True when the stream was staged in host memory (the first publish, or after a layout change).
    staged: bool = False
    #: The relay's side: its verdict on the version (None when skipped).
    relay: Optional[RelayPublishResult] = field(default=None, compare=False)

    def wait_visible(self, timeout: Optional[float] = None) -> None:
        """Waits until the relay verified the version and serves it (at once when skipped); raises
        the relay's error when it refused it (see ``laminar.PublishResult.wait_visible``)."""
        if self.relay is not None:
            self.relay.wait_visible(timeout)

    async def wait_visible_async(self, timeout: Optional[float] = None) -> None:
        """``wait_visible`` for asyncio."""
        if self.relay is not None:
            await self.relay.wait_visible_async(timeout)


class StreamPublisher:
    """Publishes streams of ``(name, tensor)`` pairs as versions of ``model`` into the relay that
    ``relay()`` returns (called when a publish needs it, so that a process that never publishes
    never connects). ``rollout_dtype``: floating-point tensors are converted to it first, on
    their device."""

    def __init__(self, relay: Callable[[], RelayClient], model: str, rollout_dtype: Any = None) -> None:
        self._relay = relay
        self.model = model
        self.rollout_dtype = rollout_dtype
        #: The layout learnt from the last staged stream: ``[{name, dtype, shape}]`` in stream order.
        self.layout: Optional[list[dict[str, Any]]] = None
        #: The last version this publisher committed.
        self.last_version: Optional[int] = None

    def next_version(self) -> int:
        """The version a publish without one takes: one past the last this publisher committed,
        else one past the newest the relay holds of the model (a restarted trainer goes on), else 0."""
        if self.last_version is not None:
            return self.last_version + 1
        held = [int(v["version"]) for v in self._relay().status().get("versions", []) if v.get("model") == self.model]
        return max(held) + 1 if held else 0

    def publish(self, weights: Iterable[tuple[str, Any]], version: Optional[int] = None) -> PublishResult:
        """Publishes the stream as ``version`` (default ``next_version()``) and returns once its
        bytes are in the relay's segment (``wait_visible`` on the result: once the relay verified
        and serves it). Publishing again the version this publisher committed last
        (verl syncs the same step twice, e.g. to wake rollouts after validation) consumes the
        stream and writes nothing. Raises ``LaminarError``: the relay's (``ERR_CLOSED`` when no
        relay listens, ``ERR_VERSION_EXISTS`` for a version someone else published),
        ``ERR_VERSION_STALE`` for a version older than the last one published, or a layout error
        (see the module doc)."""
        stream = iter(weights)
        try:
            if version is None:
                version = self.next_version()
            if version == self.last_version:
                drain(stream)
                log.info("%s v%d was published already: nothing to write", self.model, version)
                return PublishResult(self.model, version, 0, 0.0, skipped=True)
            if self.last_version is not None and version < self.last_version:
                # Rollouts wait for versions newer than the one they hold: going back would strand them.
                raise LaminarError(error_codes.VERSION_STALE, f"{self.model} v{version} is older than v{self.last_version}, published last")
            started = time.perf_counter()
            if self.layout is None:
                nbytes, relay_result = self._publish_staged(version, stream)
                staged = True
            else:
                nbytes, relay_result = self._publish_streamed(version, stream)
                staged = False
        except Exception:
            # The other ranks' generators wait in the same collectives as this one's.
            _drain_after_failure(stream)
            raise
        self.last_version = version
        return PublishResult(self.model, version, nbytes, time.perf_counter() - started, staged=staged, relay=relay_result)

    # -- the two ways ------------------------------------------------------------------------

    def _publish_staged(self, version: int, stream: Iterator[tuple[str, Any]]) -> tuple[int, RelayPublishResult]:
        staged: dict[str, Any] = {}
        for name, tensor in stream:
            if name in staged:
                raise LaminarError(error_codes.DUPLICATE_TENSOR, f"the weights stream yields {name!r} twice")
            # A copy: the producer may reuse the tensor's memory for the next one.
            staged[name] = self._convert(tensor).detach().to("cpu", copy=True)
        if not staged:
            raise LaminarError(error_codes.INVALID_ARG, f"the weights stream for {self.model} v{version} yielded no tensors")
        layout = specs_of(staged)
        result = self._relay().publish(self.model, version, staged)
        self.layout = layout
        return sum(t.numel() * t.element_size() for t in staged.values()), result

    def _publish_streamed(self, version: int, stream: Iterator[tuple[str, Any]]) -> tuple[int, RelayPublishResult]:
        layout = self.layout
        assert layout is not None
        publication = self._relay().begin(self.model, version, layout)
        try:
            written: set[str] = set()
            for name, tensor in stream:
                tensor = self._convert(tensor)
                info = publication.info(name)  # UNKNOWN_TENSOR for a name the layout lacks
                if name in written:
                    raise LaminarError(error_codes.DUPLICATE_TENSOR, f"the weights stream yields {name!r} twice")
                if tuple(tensor.shape) != info.shape:
                    # Same byte count, other shape (a transpose) would otherwise pass unnoticed.
                    raise LaminarError(error_codes.BAD_TENSOR, f"tensor {name!r} has shape {list(tensor.shape)}, the layout learnt says {list(info.shape)}")
                publication.write(name, tensor)
                written.add(name)
            missing = [t["name"] for t in layout if t["name"] not in written]
            if missing:
                raise LaminarError(
                    error_codes.INCOMPLETE,
                    f"the weights stream for {self.model} v{version} lacks {len(missing)} tensor(s) of the layout learnt: {missing[:8]}",
                    {"missing": missing},
                )
            result = publication.commit()
        except BaseException as err:
            try:
                publication.abort()
            except LaminarError:
                pass  # the original error matters more
            if isinstance(err, LaminarError) and err.code in _LAYOUT_CODES:
                log.warning("%s v%d: the weights stream changed layout (%s); the next publish stages it again", self.model, version, err)
                self.layout = None
            raise
        return sum(int(info.byte_length) for info in publication.tensors.values()), result

    def _convert(self, tensor: Any) -> Any:
        dtype = self.rollout_dtype
        if dtype is not None and getattr(tensor, "is_floating_point", None) is not None and tensor.is_floating_point() and tensor.dtype != dtype:
            return tensor.to(dtype)
        return tensor


def drain(stream: Iterator[Any]) -> None:
    """Consumes a stream to its end, keeping nothing (a non-master rank's part in the gathers)."""
    for _ in stream:
        pass


def _drain_after_failure(stream: Iterator[Any]) -> None:
    try:
        drain(stream)
    except Exception as err:  # the producer's own failure; the publish's error is raised
        log.warning("consuming the rest of the weights stream after a failed publish failed too: %r", err)
