"""Copying a tensor that is not contiguous (a transposed weight, a slice, a strided view) into its
contiguous place in a segment: one copy, read through the source's strides, straight into the
segment (no contiguous copy of it first). A torch tensor is copied by torch, whose CPU kernel
copies a transposed matrix in cache-sized tiles (about twice as fast as numpy's element order);
a numpy array by numpy. Both release the GIL.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .tensor_source import is_torch_tensor


def copy_strided(target: np.ndarray, src: Any) -> None:
    """Copies ``src`` (a numpy array or CPU torch tensor, any strides) in C order into
    ``target``, a contiguous 1-D uint8 array of exactly its bytes."""
    if target.size == 0:
        return  # nothing to copy (and torch views no empty byte array as another dtype)
    if is_torch_tensor(src):
        import torch

        torch.from_numpy(target).view(src.dtype).view(src.shape).copy_(src)
    else:
        np.copyto(target.view(src.dtype).reshape(src.shape), src)
