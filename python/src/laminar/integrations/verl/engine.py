"""``LaminarCheckpointEngine``: verl's checkpoint-engine interface over the relay.

verl (``verl.checkpoint_engine``, 0.7.1 to 0.9.1 read) moves weights from the trainer to the
rollouts through a checkpoint engine that it builds on both sides from
``rollout.checkpoint_engine``:

- trainer: ``await engine.send_weights(per_tensor_generator, global_steps=step)`` on every rank
  (``is_master`` on rank 0), here: rank 0 publishes the stream into the relay on its host as
  version ``global_steps``; the other ranks consume their generators (the gathers are
  collective) and publish nothing;
- rollout: ``server_adapter.update_weights(engine.receive_weights(global_steps=step))``, here:
  version ``global_steps`` is leased from the relay on the rollout's host and its tensors are
  yielded as zero-copy CPU views of the relay's shared memory, which vLLM and SGLang copy to
  their GPUs; ``get_weights()`` yields the newest version held there now (verl's "local cache");
- ``prepare`` / ``build_topology`` / ``init_process_group`` do nothing: the relays, not a process
  group, carry the weights; ``finalize`` (called once every rollout's ``update_weights``
  returned) releases the rollout's lease.

The class subclasses verl's ``CheckpointEngineWithCache`` and is registered under ``laminar``
when verl is importable; otherwise it is the same class on ``object``, usable and testable
without verl. docs/components/verl.md has the configuration.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import Any, AsyncIterator, Iterable, Optional

from ... import error_codes
from ...errors import LaminarError
from ...relay import Lease, RelayClient
from .options import EngineOptions
from .publisher import PublishResult, StreamPublisher, drain
from .receiver import StreamReceiver

log = logging.getLogger(__name__)

#: The name verl configs use: ``rollout.checkpoint_engine.backend=laminar``.
BACKEND = "laminar"

try:
    from verl.checkpoint_engine.base import CheckpointEngineRegistry as _Registry

    try:
        from verl.checkpoint_engine.base import CheckpointEngineWithCache as _Base
    except ImportError:  # a verl before the cached family: the plain engine interface
        from verl.checkpoint_engine.base import CheckpointEngine as _Base
    #: Why verl could not be imported (None when it was).
    VERL_IMPORT_ERROR: Optional[ImportError] = None
except ImportError as err:  # verl absent, or present without what it needs (ray, torch 2, ...)
    _Registry = None
    _Base = object
    VERL_IMPORT_ERROR = err


class LaminarCheckpointEngine(_Base):  # type: ignore[misc, valid-type]
    """A verl checkpoint engine whose transport is laminar's relays (see the module doc).

    ``bucket_size`` and ``is_master`` are what verl passes to every engine (laminar has no
    buckets: a version is written in place and chunked by the relay; verl passes ``is_master``
    as ``rank == 0`` on the trainer, and a rollout never sends); the other keyword
    arguments are ``engine_kwargs.laminar`` (``EngineOptions``: ``model``, ``socket``,
    ``receive_timeout_s``, ``rollout_dtype``, ``client_name``). Nothing connects until a
    publish or a receive needs the relay."""

    #: How ``receive_weights`` yields (verl >= 0.9 asks): ``(name, tensor)`` pairs.
    wire_format = "named_tensors"

    def __init__(self, bucket_size: int = 0, is_master: bool = True, **engine_kwargs: Any) -> None:
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.options = EngineOptions.from_kwargs(engine_kwargs)
        self._client: Optional[RelayClient] = None
        self._client_lock = threading.Lock()
        self._closed = False
        self.publisher = StreamPublisher(self._relay, self.options.model, self.options.rollout_dtype)
        self.receiver = StreamReceiver(self._relay, self.options.model, self.options.receive_timeout_s, self.options.register_cuda)

    def __repr__(self) -> str:
        return f"LaminarCheckpointEngine({self.options.model!r}, master={self.is_master})"

    def _relay(self) -> RelayClient:
        with self._client_lock:
            if self._closed:
                raise LaminarError(error_codes.CLOSED, "the laminar checkpoint engine was closed")
            if self._client is None:
                self._client = RelayClient(self.options.socket, name=self.options.client_name or f"verl {self.options.model}")
            return self._client

    # -- topology: the relays carry the weights, there is no process group ---------------------

    def prepare(self) -> None:
        """Nothing to allocate or advertise."""
        return None

    @classmethod
    def build_topology(cls, trainer_world_size: int, rollout_world_size: int, metadata: list) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """No arguments for ``init_process_group`` on either side."""
        return {}, {}

    def init_process_group(self, **kwargs: Any) -> None:
        """Nothing to join."""
        return None

    def finalize(self) -> None:
        """After a weight sync: releases the rollout's lease (every rollout's ``update_weights``
        has returned by then, so nothing views it). Nothing to do on the trainer."""
        self.receiver.release()

    # -- trainer ----------------------------------------------------------------------------

    async def send_weights(self, weights: Iterable[tuple[str, Any]], global_steps: Optional[int] = None) -> dict[str, float]:
        """Rank 0 (``is_master``): publishes the stream as version ``global_steps`` (without one:
        one past the last published, see ``StreamPublisher.next_version``) and returns once the
        relay verified it, with metrics for verl's logger: the rollouts receive this version right
        after, so a version the relay refused fails here rather than leaving them waiting. The
        verification is awaited without holding the event loop. Other ranks consume the stream and
        return ``{}``. Runs on the caller's event loop, as verl's other engines do: the stream's
        tensors are produced (gathered) on this thread."""
        if hasattr(weights, "__aiter__"):
            raise LaminarError(error_codes.INVALID_ARG, "send_weights takes a (name, tensor) iterator, got an async iterator")
        if not self.is_master:
            drain(iter(weights))
            return {}
        result = self.publisher.publish(weights, global_steps)
        await result.wait_visible_async()
        if not result.skipped:
            visible = result.relay.visible_seconds if result.relay is not None else None
            log.info(
                "published %s v%d: %.3f GB in %.2f s, verified %.2f s after", result.model, result.version, result.bytes / 1e9, result.seconds, visible or 0.0
            )
        return _metrics(result)

    # -- rollout ----------------------------------------------------------------------------

    async def receive_weights(self, global_steps: Optional[int] = None) -> AsyncIterator[tuple[str, Any]]:
        """Leases version ``global_steps`` from the local relay (waiting up to
        ``receive_timeout_s`` for it to arrive; without one: a version newer than the last
        received, the first time the newest) and yields ``(name, tensor)`` for each tensor:
        read-only CPU views of the relay's shared memory, valid until ``finalize()``, the next
        receive or ``close()``. Never write into them (the memory is mapped read-only)."""
        lease = await self._acquire(global_steps, wait=True)
        for item in lease.torch().items():
            yield item

    async def get_weights(self, version: Optional[int] = None) -> AsyncIterator[tuple[str, Any]]:
        """The newest version the local relay holds now (or exactly ``version``), without waiting
        for a newer one: ``(name, tensor)`` views as in ``receive_weights``, held likewise.
        ``ERR_UNKNOWN_MODEL`` when the relay holds no version of the model."""
        lease = await self._acquire(version, wait=False)
        for item in lease.torch().items():
            yield item

    async def _acquire(self, version: Optional[int], wait: bool) -> Lease:
        # Off the event loop: the wait for a version may be long, and the loop serves verl's
        # other calls to this worker meanwhile. A receive cancelled meanwhile still ends with
        # the lease held by the receiver, released as any other.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.receiver.acquire, version, wait))

    # -- life -------------------------------------------------------------------------------

    @property
    def lease(self) -> Optional[Lease]:
        """The rollout's lease held now, if any."""
        return self.receiver.lease

    def close(self) -> None:
        """Releases the lease and closes the connection to the relay."""
        with self._client_lock:
            self._closed = True
            client, self._client = self._client, None
        self.receiver.release()
        if client is not None:
            client.close()


def _metrics(result: PublishResult) -> dict[str, float]:
    return {
        "laminar/version": float(result.version),
        "laminar/publish_s": result.seconds,
        "laminar/verify_s": (result.relay.visible_seconds or 0.0) if result.relay is not None else 0.0,
        "laminar/gbytes": result.bytes / 1e9,
        "laminar/skipped": float(result.skipped),
        "laminar/staged": float(result.staged),
    }


#: Whether ``LaminarCheckpointEngine`` is registered in verl's ``CheckpointEngineRegistry``.
REGISTERED = False
if _Registry is not None:
    _Registry.register(BACKEND)(LaminarCheckpointEngine)
    REGISTERED = True
