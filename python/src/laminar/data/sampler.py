"""Batches of the experience buffer for a Python trainer, zero-copy.

The sampling itself is the TypeScript ``ExperienceSampler`` run as a local service
(``laminar sampler --nats ... --batch-size N``): it assembles each batch in a file in shared
memory and answers ``sample`` with where everything is in that file. ``Sampler.sample()`` maps the
file and hands out numpy views of it; nothing of the batch is copied on the Python side until the
trainer copies it (to a GPU, typically)::

    from laminar.data import Sampler

    sampler = Sampler()                       # /dev/shm/laminar/sampler-default.sock
    while training:
        with sampler.sample(timeout=60) as batch:
            tokens = torch.from_numpy(batch.tokens).cuda(non_blocking=True)   # all tokens, packed
            lengths = batch.lengths                                           # per item
            ...
        sampler.set_trainer_version(step)

Layout of a batch: ``tokens`` (int32) holds every item's tokens one after the other, in item
order; ``logprobs`` (float32) every item's logprobs at the same indices, and ``loss_mask`` (uint8)
every item's loss mask at the same indices: 1 for a token the model generated, 0 for prompt
tokens and for the observations of a multi-turn trajectory (what tools returned), so that a loss
is ``(per_token_loss * loss_mask).sum()``. Item ``i`` is
``tokens[offsets[i] : offsets[i] + lengths[i]]`` (``batch.item(i).tokens``). The per-item numbers
(``rewards``, ``staleness``, ``weight_versions``, ``prompt_lengths``, ...) are arrays too, read
from the same file. Strings (ids, group ids, info) are lists.

A batch's memory goes back to the service with ``release()`` (or at the end of its ``with``), and
the service builds a later batch in it: views of a released batch must not be used any more (they
would show the later batch). A trainer that dies, or whose connection ends, has its batches
released by the service. When the service restarts, the next call connects to the new one (for
up to ``reconnect_timeout`` seconds) and goes on; batches taken from the old one stay readable
(their file is unlinked, not unmapped) and their release is local.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from typing import Any, Iterator, Mapping, Optional

import numpy as np

from .. import error_codes
from ..errors import ClosedError, LaminarError
from .codec.segments import Segment, from_wire, loss_mask_of, turn_boundaries_of
from .sampler_connection import SamplerConnection

DEFAULT_SHM_DIR = "/dev/shm/laminar"
DEFAULT_RECONNECT_TIMEOUT = 60.0
# Client-side grace beyond the service's own timeout of a sample() (the answer travels back).
ANSWER_GRACE_SECONDS = 10.0

_DTYPES = {"int32": np.dtype("<i4"), "int64": np.dtype("<i8"), "float64": np.dtype("<f8")}


def default_socket_path(buffer: str = "default", shm_dir: Optional[str] = None) -> str:
    """Where ``laminar sampler`` listens when started without ``--socket``: ``LAMINAR_SAMPLER_SOCKET``,
    else ``<shm dir>/sampler-<buffer>.sock`` (the shm dir: ``LAMINAR_SHM_DIR`` or /dev/shm/laminar)."""
    env = os.environ.get("LAMINAR_SAMPLER_SOCKET")
    if env:
        return env
    directory = shm_dir or os.environ.get("LAMINAR_SHM_DIR") or DEFAULT_SHM_DIR
    return os.path.join(directory, f"sampler-{buffer}.sock")


class BatchItem:
    """One trajectory of a batch: its metadata, and views of its tokens, logprobs and loss mask."""

    __slots__ = ("_batch", "index")

    def __init__(self, batch: "Batch", index: int) -> None:
        self._batch = batch
        self.index = index

    def _col(self, name: str) -> Any:
        return self._batch.columns[name][self.index].item()

    @property
    def tokens(self) -> np.ndarray:
        b = self._batch
        start = int(b.offsets[self.index])
        return b.tokens[start : start + int(b.lengths[self.index])]

    @property
    def logprobs(self) -> np.ndarray:
        b = self._batch
        start = int(b.offsets[self.index])
        return b.logprobs[start : start + int(b.lengths[self.index])]

    @property
    def loss_mask(self) -> np.ndarray:
        """1 for the tokens the model generated, 0 for prompt and observation tokens."""
        b = self._batch
        start = int(b.offsets[self.index])
        return b.loss_mask[start : start + int(b.lengths[self.index])]

    @property
    def segments(self) -> Optional[list[Segment]]:
        """The trajectory's turns and observations in order; None for a single-turn one."""
        return self._batch.segments[self.index]

    @property
    def turn_boundaries(self) -> list[int]:
        """Where each segment starts (an index into this item's tokens), then the end."""
        return turn_boundaries_of(self.prompt_length, self.response_length, self.segments)

    @property
    def id(self) -> str:
        return self._batch.ids[self.index]

    @property
    def prompt_id(self) -> str:
        return self._batch.prompt_ids[self.index]

    @property
    def group_id(self) -> str:
        return self._batch.group_ids[self.index]

    @property
    def rollout_id(self) -> Optional[str]:
        return self._batch.rollout_ids[self.index]

    @property
    def info(self) -> Optional[dict[str, Any]]:
        return self._batch.infos[self.index]

    @property
    def sample_index(self) -> int:
        return self._col("sample_indices")

    @property
    def group_size(self) -> int:
        return self._col("group_sizes")

    @property
    def weight_version(self) -> int:
        return self._col("weight_versions")

    @property
    def reward(self) -> float:
        return self._col("rewards")

    @property
    def priority(self) -> float:
        return self._col("priorities")

    @property
    def prompt_length(self) -> int:
        return self._col("prompt_lengths")

    @property
    def response_length(self) -> int:
        return self._col("response_lengths")

    @property
    def staleness(self) -> int:
        return self._col("staleness")

    @property
    def times_sampled(self) -> int:
        return self._col("times_sampled")

    @property
    def seq(self) -> int:
        return self._col("seqs")

    @property
    def created_at(self) -> float:
        return self._col("created_at")

    @property
    def completed_at(self) -> float:
        return self._col("completed_at")

    def __repr__(self) -> str:
        return f"BatchItem({self.id!r}, tokens={int(self._batch.lengths[self.index])}, reward={self.reward})"


class Batch:
    """A sampled batch, read in place from its shared-memory file (see the module's doc).

    Arrays (numpy, read-only unless the file could be mapped writable): ``tokens``, ``logprobs``,
    ``loss_mask``, ``offsets``, ``lengths``, ``rewards``, ``staleness``, ``weight_versions``, ``prompt_lengths``,
    ``response_lengths``, ``sample_indices``, ``group_sizes``, ``times_sampled``, ``seqs``,
    ``priorities``, ``created_at``, ``completed_at`` (all in ``columns`` by name). Lists: ``ids``,
    ``prompt_ids``, ``group_ids``, ``rollout_ids``, ``infos``, ``groups``, ``segments`` (per item:
    its segments, or None for a single-turn trajectory; ``item(i).turn_boundaries`` from them).
    """

    def __init__(self, sampler: "Sampler", descriptor: Mapping[str, Any], epoch: int) -> None:
        self._sampler = sampler
        self._epoch = epoch
        self._released = False
        self._lock = threading.Lock()
        self.id: int = descriptor["batch"]
        self.instance: str = descriptor["instance"]
        self.path: str = descriptor["path"]
        self.count: int = descriptor["count"]
        self.trainer_version: int = descriptor["trainerVersion"]
        summary = descriptor["staleness"]
        #: ``{min, max, mean, histogram: {staleness: count}}`` over the items.
        self.staleness_summary: dict[str, Any] = {
            "min": summary["min"],
            "max": summary["max"],
            "mean": summary["mean"],
            "histogram": {int(k): v for k, v in summary["histogram"].items()},
        }
        self.groups: list[str] = descriptor["groups"]
        self.ids: list[str] = descriptor["ids"]
        self.prompt_ids: list[str] = descriptor["promptIds"]
        self.group_ids: list[str] = descriptor["groupIds"]
        self.rollout_ids: list[Optional[str]] = descriptor["rolloutIds"]
        self.infos: list[Optional[dict[str, Any]]] = descriptor["infos"]
        #: Payload bytes (tokens and logprobs).
        self.bytes: int = descriptor["bytes"]
        self.prefetched: bool = descriptor["prefetched"]
        self._mmap, self.writable = _map(self.path, descriptor["fileBytes"])
        mm = self._mmap
        tokens = descriptor["tokens"]
        logprobs = descriptor["logprobs"]
        self.tokens: np.ndarray = np.frombuffer(mm, dtype="<i4", count=tokens["count"], offset=tokens["offset"])
        self.logprobs: np.ndarray = np.frombuffer(mm, dtype="<f4", count=logprobs["count"], offset=logprobs["offset"])
        wire = descriptor.get("segments")
        #: Per item: its segments (dicts, segments.py), or None for a single-turn trajectory.
        self.segments: list[Optional[list[Segment]]] = [None if w is None else from_wire(w) for w in wire] if wire else [None] * self.count
        #: Per-item arrays by name (one view each, whatever the batch size).
        self.columns: dict[str, np.ndarray] = {
            c["name"]: np.frombuffer(mm, dtype=_DTYPES[c["dtype"]], count=self.count, offset=c["offset"]) for c in descriptor["columns"]
        }
        cols = self.columns
        self.offsets: np.ndarray = cols["token_offsets"]
        self.lengths: np.ndarray = cols["lengths"]
        self.rewards: np.ndarray = cols["rewards"]
        self.staleness: np.ndarray = cols["staleness"]
        self.weight_versions: np.ndarray = cols["weight_versions"]
        self.prompt_lengths: np.ndarray = cols["prompt_lengths"]
        self.response_lengths: np.ndarray = cols["response_lengths"]
        self.sample_indices: np.ndarray = cols["sample_indices"]
        self.group_sizes: np.ndarray = cols["group_sizes"]
        self.times_sampled: np.ndarray = cols["times_sampled"]
        self.seqs: np.ndarray = cols["seqs"]
        self.priorities: np.ndarray = cols["priorities"]
        self.created_at: np.ndarray = cols["created_at"]
        self.completed_at: np.ndarray = cols["completed_at"]
        mask = descriptor.get("lossMask")
        if mask is not None:
            self.loss_mask: np.ndarray = np.frombuffer(mm, dtype=np.uint8, count=mask["count"], offset=mask["offset"])
        else:
            # A service from before multi-turn trajectories: every record is single-turn.
            self.loss_mask = np.concatenate(
                [loss_mask_of(int(p), int(r)) for p, r in zip(self.prompt_lengths, self.response_lengths)] or [np.zeros(0, np.uint8)]
            )

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[BatchItem]:
        return (BatchItem(self, i) for i in range(self.count))

    def item(self, i: int) -> BatchItem:
        """Item ``i`` (negative counts from the end)."""
        if i < 0:
            i += self.count
        if not 0 <= i < self.count:
            raise IndexError(f"batch of {self.count} items has no item {i}")
        return BatchItem(self, i)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array of the batch by name: ``tokens``, ``logprobs`` and the per-item columns
        (``offsets`` stands for ``token_offsets``)."""
        out = {"tokens": self.tokens, "logprobs": self.logprobs, "loss_mask": self.loss_mask, "offsets": self.offsets}
        out.update((name, a) for name, a in self.columns.items() if name != "token_offsets")
        return out

    def torch(self) -> dict[str, Any]:
        """The arrays of ``arrays()`` as CPU tensors over the same memory (``torch.from_numpy``;
        no copy). Needs torch; a read-only mapping gives tensors that must not be written to."""
        import warnings

        import torch  # optional dependency

        with warnings.catch_warnings():
            # Read-only mappings: torch warns that it cannot guard against writes.
            warnings.filterwarnings("ignore", message=".*not writable.*")
            return {name: torch.from_numpy(a) for name, a in self.arrays().items()}

    def copies(self) -> int:
        """How many of the batch's arrays (and per-item views) do not read the shared file in
        place: 0 unless something copied. What the benchmark reports as ``py_batch_copies``."""
        arrays = list(self.arrays().values())
        if self.count:
            for item in (self.item(0), self.item(-1)):
                arrays += [item.tokens, item.logprobs, item.loss_mask]
        return sum(0 if _reads(a, self._mmap) else 1 for a in arrays)

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Gives the batch's memory back to the service for a later batch. Idempotent. The views
        must not be used afterwards (the service reuses the memory)."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._sampler._release(self)
        self._unmap()

    def _unmap(self) -> None:
        try:
            self._mmap.close()
        except BufferError:
            pass  # views are still referenced: the mapping goes with the last of them

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else f"{self.tokens.size} tokens"
        return f"Batch(id={self.id}, items={self.count}, {state}, trainer_version={self.trainer_version})"


class Sampler:
    """The trainer's side of the sampler service (``laminar sampler``).

    ``socket_path``: the service's socket (default: ``default_socket_path(buffer)``).
    ``reconnect_timeout``: how long a call waits for the service to come back when it went away
    (restarted) before it raises ``ClosedError``; the constructor connects at once and waits as
    long for a service that is still starting. Thread-safe: requests are sent one at a time.
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        buffer: str = "default",
        reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT,
        client: str = "laminar-python",
    ) -> None:
        self.socket_path = socket_path or default_socket_path(buffer)
        self._trainer_version: Optional[int] = None
        self._conn = SamplerConnection(self.socket_path, client=client, reconnect_timeout=reconnect_timeout, on_connect=self._on_connect)
        self._held: dict[int, Batch] = {}
        self._held_lock = threading.Lock()
        self._conn.hello  # connect now: a wrong path fails here, not at the first sample()

    # -- the service's answers -------------------------------------------------------------

    @property
    def instance(self) -> str:
        """The service instance this sampler is connected to (changes when it restarts)."""
        return self._conn.hello["instance"]

    @property
    def batch_size(self) -> int:
        return self._conn.hello["batchSize"]

    @property
    def reconnects(self) -> int:
        """Times this sampler connected again after losing the service."""
        return self._conn.reconnects

    def sample(self, timeout: Optional[float] = None) -> Batch:
        """The next batch; waits until the service's strategy and rate limiter allow one.
        ``timeout`` in seconds (None: wait forever): ``LaminarTimeoutError`` (ERR_TIMEOUT) when no
        batch came in time; ``ERR_BATCH_IMPOSSIBLE`` when the batch can never exist."""
        wait: Optional[float] = None
        deadline: Optional[float] = None
        if timeout is not None:
            if not timeout >= 0:
                raise LaminarError(error_codes.INVALID_ARG, f"timeout must be a number of seconds >= 0, got {timeout!r}")
            deadline = time.monotonic() + timeout
            wait = timeout + ANSWER_GRACE_SECONDS

        def args() -> dict[str, Any]:
            # Sent again after a reconnect: the service gets what is left of the timeout.
            return {} if deadline is None else {"timeoutMs": max(0.0, deadline - time.monotonic()) * 1000.0}

        descriptor, epoch = self._conn.request("sample", args, wait=wait)
        try:
            batch = Batch(self, descriptor, epoch)
        except BaseException:
            # Unreadable here (a mapping that failed): the service must not keep it for us.
            self._send_release(descriptor["batch"], epoch)
            raise
        with self._held_lock:
            self._held[batch.id] = batch
        return batch

    def set_trainer_version(self, version: int) -> None:
        """The trainer moved to weight version ``version``: staleness is measured against it. It
        never goes back (``ERR_BAD_DATA_OPTIONS``), and a restarted service is told it again."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise LaminarError(error_codes.INVALID_ARG, f"version must be an integer >= 0, got {version!r}")
        self._conn.request("setTrainerVersion", {"version": version})
        self._trainer_version = version

    def update_priority(self, trajectory_id: str, priority: float) -> bool:
        """Sets the priority of a trajectory still in the buffer (``--strategy prioritized``);
        False when it is not there any more."""
        result, _ = self._conn.request("updatePriority", {"trajectory": trajectory_id, "priority": float(priority)})
        return bool(result["updated"])

    def stats(self) -> dict[str, Any]:
        """The service's counters: items, bytes, inserts, samples, evicted, readyBatches,
        spareArenaBytes, trainerVersion, connections, batchesHeld, arenaFiles, arenaBytes, ..."""
        result, _ = self._conn.request("stats", {})
        return result

    def close(self) -> None:
        """Releases what this sampler holds and closes the connection."""
        with self._held_lock:
            held = list(self._held.values())
        for b in held:
            b.release()
        self._conn.close()

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _on_connect(self, hello: Mapping[str, Any], first: bool) -> None:
        # A restarted service starts at its --trainer-version: tell it where the trainer is.
        if not first and self._trainer_version is not None and self._trainer_version > hello["trainerVersion"]:
            self._conn.request("setTrainerVersion", {"version": self._trainer_version}, retry=False)

    def _release(self, batch: Batch) -> None:
        with self._held_lock:
            self._held.pop(batch.id, None)
        self._send_release(batch.id, batch._epoch)

    def _send_release(self, batch_id: int, epoch: int) -> None:
        # A batch of an earlier connection was released by the service when that connection ended.
        if epoch != self._conn.epoch:
            return
        try:
            self._conn.request("release", {"batch": batch_id}, retry=False)
        except ClosedError:
            pass  # the connection ended meanwhile: the service released it
        except LaminarError as err:
            if err.code != error_codes.UNKNOWN_BATCH:
                raise


def _map(path: str, size: int) -> tuple[mmap.mmap, bool]:
    """Maps the arena file: writable when the file allows it (torch tensors without warnings),
    else read-only."""
    try:
        fd = os.open(path, os.O_RDWR)
        writable = True
    except PermissionError:
        fd = os.open(path, os.O_RDONLY)
        writable = False
    except FileNotFoundError as err:
        raise LaminarError(error_codes.CLOSED, f"the batch's arena file {path} is gone (the sampler service stopped)") from err
    try:
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
    finally:
        os.close(fd)
    return mm, writable


def _reads(array: np.ndarray, mm: mmap.mmap) -> bool:
    """True when ``array`` is a view whose memory chain ends in ``mm`` (nothing was copied)."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and base.obj is mm
