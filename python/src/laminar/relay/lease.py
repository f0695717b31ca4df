"""A version leased from the relay and mapped read-only into this process.

The relay keeps the version while the lease lives; ``release()`` (or leaving the ``with``
block, or losing the connection) gives it back. ``numpy()`` and ``torch()`` are views of the
relay's shared memory: nothing is copied until the caller copies (to a GPU, typically).

Views must not be used after ``release()``: the relay may drop the version then, and once the
last view is gone the memory is unmapped. (While a view still exists ``mmap.close()`` cannot
unmap; the lease then drops its own reference and the garbage collector unmaps when the views
go. Reading a view after release reads memory the relay no longer promises to keep.)
"""

from __future__ import annotations

import mmap
import warnings
from concurrent.futures import Executor
from typing import Any, Callable, Mapping, Optional, overload

import numpy as np

from .. import error_codes
from ..errors import ClosedError, LaminarError
from .checksums import checksum_ranges
from .connection import FrameConnection
from .cuda_registration import CudaRegistration
from .dtypes import DTYPE_SIZES, numpy_view_dtype, torch_view_dtype
from .layout import ChunkGrid, chunk_ranges
from .protocol import TensorInfo, tensor_index
from .segment_map import close_mapping


class Lease:
    """A leased version: its description, and views of its tensors."""

    def __init__(self, connection: FrameConnection, result: Mapping[str, Any], mapping: mmap.mmap, executor: Callable[[], Executor]) -> None:
        self._connection = connection
        self._mapping: Optional[mmap.mmap] = mapping
        self._executor = executor
        #: The relay's acquire result, as sent.
        self.description = dict(result)
        self.id: int = int(result["lease"])
        self.model: str = result["model"]
        self.version: int = int(result["version"])
        self.segment: str = result["segment"]
        #: The segment file (a valid safetensors file).
        self.path: str = result["path"]
        #: A directory holding exactly this version (``model.safetensors`` and the engine's
        #: files), for engines that load a directory; None from a relay that makes none.
        self.dir: Optional[str] = result.get("dir")
        self.size: int = int(result["size"])
        self.data_offset: int = int(result["dataOffset"])
        self.chunk_size: int = int(result["chunkSize"])
        #: The version's ``__metadata__`` without laminar's own keys.
        self.metadata: dict[str, str] = dict(result.get("metadata") or {})
        #: One XXH3-64 per chunk, as the relay verified them.
        self.checksums: Optional[list[str]] = result.get("checksums")
        #: The tensors, by name, in segment order.
        self.tensors: dict[str, TensorInfo] = tensor_index(result)
        self._cuda: Optional[CudaRegistration] = None

    def __repr__(self) -> str:
        state = "released" if self.released else f"lease {self.id}"
        return f"Lease({self.model!r}, v{self.version}, {len(self.tensors)} tensors, {state})"

    @property
    def released(self) -> bool:
        return self._mapping is None

    def info(self, name: str) -> TensorInfo:
        """Where tensor ``name`` lies; ``UNKNOWN_TENSOR`` when the version has none of that name."""
        t = self.tensors.get(name)
        if t is None:
            raise LaminarError(error_codes.UNKNOWN_TENSOR, f"version {self.version} of {self.model} has no tensor {name!r}")
        return t

    # -- views -------------------------------------------------------------------------------

    @overload
    def numpy(self) -> dict[str, np.ndarray]: ...
    @overload
    def numpy(self, name: str) -> np.ndarray: ...

    def numpy(self, name: Optional[str] = None) -> Any:
        """Zero-copy read-only numpy views: of every tensor (a dict, by name) or of one. BF16 is
        viewed as uint16 and F8_E4M3/F8_E5M2 as uint8 (numpy has neither: the raw bits), BOOL as
        bool, every other dtype as itself."""
        if name is not None:
            return self._numpy(self.info(name))
        return {t.name: self._numpy(t) for t in self.tensors.values()}

    def _numpy(self, t: TensorInfo) -> np.ndarray:
        mapping = self._live_mapping()
        dtype = numpy_view_dtype(t.dtype)
        return np.frombuffer(mapping, dtype, t.byte_length // dtype.itemsize, t.offset).reshape(t.shape)

    def torch(self, name: Optional[str] = None) -> Any:
        """Zero-copy read-only CPU torch tensors (``torch.frombuffer``): of every tensor (a dict, by
        name) or of one. BF16 is torch.bfloat16; F8_* is float8 where this torch has it, else
        uint8. Never write into them: the memory is mapped read-only, and torch does not know
        it (a write crashes the process with SIGSEGV; it cannot corrupt the version)."""
        if name is not None:
            return self.tensor(name)
        with _quiet_read_only():
            return {t.name: self._tensor(t) for t in self.tensors.values()}

    def tensor(self, name: str) -> Any:
        """A zero-copy read-only CPU torch tensor of tensor ``name``."""
        with _quiet_read_only():
            return self._tensor(self.info(name))

    def _tensor(self, t: TensorInfo) -> Any:
        import torch

        mapping = self._live_mapping()
        dtype = torch_view_dtype(t.dtype)
        count = t.byte_length // DTYPE_SIZES[t.dtype]
        if count == 0:
            return torch.empty(t.shape, dtype=dtype)  # frombuffer refuses empty views
        return torch.frombuffer(mapping, dtype=dtype, count=count, offset=t.offset).view(t.shape)

    def verify(self) -> None:
        """Reads every chunk again and compares it with the checksums the relay verified at
        commit (``CHECKSUM_MISMATCH`` naming the chunks that differ)."""
        if not self.checksums:
            return
        data = np.frombuffer(self._live_mapping(), np.uint8)
        try:
            ranges = chunk_ranges(ChunkGrid(self.data_offset, self.chunk_size), self.size - self.data_offset)
            actual = checksum_ranges(data, ranges, self._executor())
        finally:
            del data
        bad = [i for i, (a, b) in enumerate(zip(actual, self.checksums)) if a != b]
        if bad or len(actual) != len(self.checksums):
            raise LaminarError(
                error_codes.CHECKSUM_MISMATCH,
                f"chunks {bad} of {self.model} v{self.version} fail verification",
                {"chunks": bad},
            )

    # -- CUDA --------------------------------------------------------------------------------

    def register_cuda(self) -> "Lease":
        """Page-locks the whole mapping for CUDA until ``release()``: copies from its views to a
        GPU (``tensor.to("cuda")``, a model's ``load_weights``) then run by DMA at the link's
        speed, 55 GB/s against 6-8 GB/s unregistered on an H200 (docs/performance/gpu.md), for
        30-45 ms per GiB once. ``CUDA_REGISTER_REFUSED`` when there is no CUDA device or the
        driver refuses (the lease stays usable, unregistered). Registering twice does nothing."""
        if self._cuda is None:
            view = np.frombuffer(self._live_mapping(), np.uint8)
            pointer, nbytes = view.ctypes.data, view.nbytes
            del view  # no export left behind: release() must be able to unmap
            self._cuda = CudaRegistration(pointer, nbytes).register()
        return self

    @property
    def cuda_registration(self) -> Optional[CudaRegistration]:
        """The mapping's registration with CUDA while ``register_cuda()`` holds one (its
        ``flags`` say whether the driver took the read-only flag), else None."""
        return self._cuda

    # -- life --------------------------------------------------------------------------------

    def release(self) -> None:
        """Gives the version back to the relay, then unmaps it (see the module doc about views
        still alive). A lease whose connection is gone was released by the relay already;
        releasing twice does nothing."""
        mapping, self._mapping = self._mapping, None
        if mapping is None:
            return
        cuda, self._cuda = self._cuda, None
        if cuda is not None:
            cuda.unregister()  # before the unmapping: the driver would keep the pages locked
        try:
            if not self._connection.closed:
                try:
                    self._connection.request("release", {"lease": self.id})
                except ClosedError:
                    pass  # lost on the way: the relay dropped the connection's leases
        finally:
            close_mapping(mapping)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.release()

    def _live_mapping(self) -> mmap.mmap:
        if self._mapping is None:
            raise LaminarError(error_codes.MAPPING_CLOSED, f"lease {self.id} of {self.model} v{self.version} was released")
        return self._mapping


class _quiet_read_only(warnings.catch_warnings):
    """torch warns that it does not support non-writable buffers; these views are read-only on
    purpose (writing faults, it cannot corrupt the version)."""

    def __enter__(self) -> Any:
        result = super().__enter__()
        warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning)
        return result
