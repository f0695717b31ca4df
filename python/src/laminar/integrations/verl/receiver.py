"""The rollout side: the version to load, leased from the local relay and held while it loads.

A rollout loads weights from the tensors a lease maps (zero-copy views of the relay's shared
memory), so the lease must outlive the loading: it is held by the ``StreamReceiver`` until the
next version is leased (then the previous one is released, after the new one is held), or until
``release()`` (verl's ``finalize``, which it calls once every rollout's ``update_weights``
returned), or ``close()``.

Where the rollout's GPU takes the weights, each leased version is page-locked for CUDA while it is
held (``Lease.register_cuda``): the engine's copies from the views then run at the link's speed
(55 GB/s against 6-8 GB/s on an H200, docs/performance/gpu.md) for 30-45 ms per GiB once.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Callable, Optional

from ...errors import LaminarError
from ...relay import Lease, RelayClient

log = logging.getLogger(__name__)


class StreamReceiver:
    """Leases versions of ``model`` from the relay that ``relay()`` returns; ``timeout_s``: how
    long ``acquire`` waits for its version to complete at that relay; ``register_cuda``: page-lock
    each lease for CUDA (None: when torch sees a CUDA device, a refusal logged once; True: a
    refusal raised; False: never)."""

    def __init__(self, relay: Callable[[], RelayClient], model: str, timeout_s: float, register_cuda: Optional[bool] = None) -> None:
        self._relay = relay
        self.model = model
        self.timeout_s = timeout_s
        self.register_cuda = register_cuda
        self._refusal_logged = False
        self._lock = threading.Lock()
        self._lease: Optional[Lease] = None
        #: The version of the last lease taken (kept after its release: the next ``acquire``
        #: without a version waits for a newer one).
        self.last_version: Optional[int] = None

    @property
    def lease(self) -> Optional[Lease]:
        """The lease held now (None before the first acquire and after ``release()``)."""
        return self._lease

    def acquire(self, version: Optional[int] = None, wait: bool = True) -> Lease:
        """Leases the version to load and makes it the one held (the previous lease is released
        once the new one is held):

        - ``version`` given: exactly that version, waiting up to ``timeout_s`` for it to complete
          (``ERR_UNKNOWN_VERSION`` at once when the relay dropped it already);
        - else, with ``wait``: a version newer than the last one leased, waiting up to
          ``timeout_s`` (the first time: the newest, waiting for one to exist);
        - else: the newest the relay holds now (``ERR_UNKNOWN_MODEL`` when it holds none).

        ``ERR_TIMEOUT`` when nothing matching completed in time; ``ERR_CLOSED`` when no relay
        listens. Blocks: call it from a thread when on an event loop."""
        args: dict[str, int] = {}
        if version is not None:
            args["version"] = version
        elif wait and self.last_version is not None:
            args["at_least"] = self.last_version + 1
        lease = self._relay().acquire(self.model, timeout=self.timeout_s if wait or version is not None else 0.0, **args)
        try:
            self._register(lease)
        except BaseException:
            lease.release()
            raise
        with self._lock:
            previous, self._lease = self._lease, lease
            self.last_version = lease.version
        if previous is not None:
            previous.release()
        return lease

    def _register(self, lease: Lease) -> None:
        wanted = self.register_cuda
        if wanted is None:
            torch = sys.modules.get("torch")  # a rollout that loads to a GPU imported it already
            wanted = torch is not None and torch.cuda.is_available()
        if not wanted:
            return
        try:
            lease.register_cuda()
        except LaminarError as err:
            if self.register_cuda:
                raise
            if not self._refusal_logged:
                self._refusal_logged = True
                log.warning("%s v%d: loading from the lease unpinned (staged by the CUDA driver): %s", self.model, lease.version, err)

    def release(self) -> None:
        """Releases the lease held, if any (the relay may then drop its version; the views of it
        must not be used any more)."""
        with self._lock:
            lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()
