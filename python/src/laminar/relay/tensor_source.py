"""What a tensor given to ``publish`` or ``Publication.write`` is, as bytes to copy.

- a contiguous CPU tensor or array is a 1-D ``uint8`` numpy view of its bytes (no copy): it is
  copied into the segment block by block, each block checksummed while it is in cache;
- a non-contiguous CPU tensor or array is copied into the segment with its strides by one job
  of the writer's pool, torch's copy for a torch tensor, numpy's for an array (it lands
  contiguous there; no intermediate contiguous copy: strided_copy.py), then checksummed;
- a tensor on an accelerator (CUDA) is copied by torch straight from the device into the
  segment (``copy_`` into a torch view of the shared memory), part by part, never through an
  intermediate host buffer of ours.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .. import error_codes
from ..errors import LaminarError
from .dtypes import safetensors_dtype


@dataclass(frozen=True)
class TensorSource:
    """Bytes to publish: exactly one of ``host``, ``strided`` and ``device`` is set."""

    #: safetensors dtype of the data (None: raw bytes, fit for any dtype of the same size).
    dtype: Optional[str]
    nbytes: int
    #: Contiguous host bytes, as a 1-D uint8 array.
    host: Optional[np.ndarray] = None
    #: A host array or CPU torch tensor that is not contiguous (copied with its strides).
    strided: Any = None
    #: A contiguous accelerator tensor, viewed as 1-D uint8.
    device: Any = None


def _torch_module() -> Any:
    # torch is optional: a tensor can only be a torch tensor if torch was imported already.
    return sys.modules.get("torch")


def is_torch_tensor(value: Any) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(value, torch.Tensor)


def _same_width_int(torch: Any, element_size: int) -> Any:
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[element_size]


def _cpu_tensor_as_numpy(tensor: Any) -> np.ndarray:
    """A CPU tensor as a numpy array over the same memory (bfloat16, float8 and unsigned types
    numpy or this torch cannot convert go as integers of the same width: only bytes matter)."""
    torch = _torch_module()
    try:
        return tensor.numpy()
    except (TypeError, RuntimeError):
        return tensor.view(_same_width_int(torch, tensor.element_size())).numpy()


def _from_numpy(array: np.ndarray, dtype: Optional[str]) -> TensorSource:
    if array.dtype.byteorder == ">":
        # A version is little-endian; a big-endian array is converted (a copy, the only one).
        array = array.astype(array.dtype.newbyteorder("<"))
    if array.flags.c_contiguous:
        flat = array.reshape(-1).view(np.uint8)
        return TensorSource(dtype, flat.nbytes, host=flat)
    return TensorSource(dtype, array.nbytes, strided=array)


def tensor_source(value: Any) -> TensorSource:
    """The bytes of a torch tensor, a numpy array or a bytes-like object, without copying them."""
    if is_torch_tensor(value):
        tensor = value.detach()
        dtype = safetensors_dtype(tensor.dtype)
        if tensor.device.type == "cpu":
            if not tensor.is_contiguous():
                # Copied by torch, whose CPU copy kernel handles transposes faster than numpy's.
                return TensorSource(dtype, tensor.numel() * tensor.element_size(), strided=tensor)
            return _from_numpy(_cpu_tensor_as_numpy(tensor), dtype)
        torch = _torch_module()
        tensor = tensor.contiguous()
        if tensor.device.type == "cuda":
            # The copies run on other threads' (default) streams: whatever the caller's stream
            # still has to do to this tensor is done first.
            torch.cuda.current_stream(tensor.device).synchronize()
        flat = tensor.reshape(-1).view(torch.uint8)
        return TensorSource(dtype, flat.numel(), device=flat)
    if isinstance(value, np.ndarray):
        return _from_numpy(value, safetensors_dtype(value.dtype))
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            flat = np.frombuffer(value, np.uint8)
        except ValueError as err:
            raise LaminarError(error_codes.INVALID_ARG, f"cannot publish a non-contiguous buffer: {err}") from err
        return TensorSource(None, flat.nbytes, host=flat)
    raise LaminarError(
        error_codes.INVALID_ARG,
        f"cannot publish a {type(value).__name__}: give a torch.Tensor, a numpy array or bytes",
    )
