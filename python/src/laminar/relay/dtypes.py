"""safetensors dtypes and how numpy and torch hold them.

The relay names dtypes as safetensors does (``BF16``, ``F32``, ``F8_E4M3``, ...). Reading, each
gets the numpy or torch dtype that holds its bits:

- numpy has no bfloat16 nor float8: ``BF16`` is viewed as ``uint16`` and ``F8_E4M3``/``F8_E5M2``
  as ``uint8`` (the raw bits; ``lease.torch()`` gives real bfloat16/float8 tensors);
- torch without float8 (before 2.1) views ``F8_*`` as ``uint8``; torch without unsigned 16/32/64
  bit types (before 2.3) views ``U16``/``U32``/``U64`` as the signed type of the same width (the
  bits are the same, values above the signed range read negative).

Publishing, a numpy array or torch tensor names its own dtype; a ``uint16`` array may fill a
``BF16`` tensor and a ``uint8`` array an ``F8_*`` one (the raw bits, as read above).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import error_codes
from ..errors import LaminarError

#: Element size in bytes of every dtype safetensors defines.
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

# Little-endian explicitly: a version's bytes are little-endian whatever the host.
_NUMPY_VIEWS: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "F8_E5M2": np.dtype("u1"),
    "F8_E4M3": np.dtype("u1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
}

# numpy dtype kind + size -> safetensors name, for arrays given to publish.
_FROM_NUMPY: dict[tuple[str, int], str] = {
    ("b", 1): "BOOL",
    ("u", 1): "U8",
    ("i", 1): "I8",
    ("i", 2): "I16",
    ("u", 2): "U16",
    ("f", 2): "F16",
    ("i", 4): "I32",
    ("u", 4): "U32",
    ("f", 4): "F32",
    ("i", 8): "I64",
    ("u", 8): "U64",
    ("f", 8): "F64",
}

# What may fill a tensor of another dtype: its raw bits as numpy holds them.
_RAW_BITS: dict[str, frozenset[str]] = {
    "BF16": frozenset({"U16", "I16"}),
    "F8_E4M3": frozenset({"U8", "I8"}),
    "F8_E5M2": frozenset({"U8", "I8"}),
}


def is_dtype(name: object) -> bool:
    """Whether ``name`` is a dtype safetensors defines."""
    return isinstance(name, str) and name in DTYPE_SIZES


def numpy_view_dtype(name: str) -> np.dtype:
    """The numpy dtype a tensor of safetensors dtype ``name`` is viewed as (see the module doc)."""
    try:
        return _NUMPY_VIEWS[name]
    except KeyError:
        raise LaminarError(error_codes.BAD_DTYPE, f"unknown dtype {name!r}") from None


def _torch_table() -> tuple[dict[Any, str], dict[str, Any]]:
    import torch

    pairs: list[tuple[str, Any]] = [
        ("BOOL", torch.bool),
        ("U8", torch.uint8),
        ("I8", torch.int8),
        ("I16", torch.int16),
        ("F16", torch.float16),
        ("BF16", torch.bfloat16),
        ("I32", torch.int32),
        ("F32", torch.float32),
        ("I64", torch.int64),
        ("F64", torch.float64),
    ]
    optional = [
        ("F8_E4M3", "float8_e4m3fn"),
        ("F8_E5M2", "float8_e5m2"),
        ("U16", "uint16"),
        ("U32", "uint32"),
        ("U64", "uint64"),
    ]
    for name, attribute in optional:
        dtype = getattr(torch, attribute, None)
        if dtype is not None:
            pairs.append((name, dtype))
    to_name = {dtype: name for name, dtype in pairs}
    to_torch = {name: dtype for name, dtype in pairs}
    # Fallbacks for reading only (publishing one of these is refused: no torch dtype names them).
    to_torch.setdefault("F8_E4M3", torch.uint8)
    to_torch.setdefault("F8_E5M2", torch.uint8)
    to_torch.setdefault("U16", torch.int16)
    to_torch.setdefault("U32", torch.int32)
    to_torch.setdefault("U64", torch.int64)
    return to_name, to_torch


_torch_cache: Optional[tuple[dict[Any, str], dict[str, Any]]] = None


def _torch_maps() -> tuple[dict[Any, str], dict[str, Any]]:
    global _torch_cache
    if _torch_cache is None:
        _torch_cache = _torch_table()
    return _torch_cache


def torch_view_dtype(name: str) -> Any:
    """The torch dtype a tensor of safetensors dtype ``name`` is viewed as (see the module doc)."""
    try:
        return _torch_maps()[1][name]
    except KeyError:
        raise LaminarError(error_codes.BAD_DTYPE, f"unknown dtype {name!r}") from None


def _is_torch_dtype(value: object) -> bool:
    return type(value).__module__ == "torch" and type(value).__name__ == "dtype"


def safetensors_dtype(value: Any) -> str:
    """The safetensors name of a dtype given as a name (passed through: the relay validates it),
    a numpy dtype or type, or a torch dtype. A numpy or torch dtype safetensors cannot hold
    (complex, object, strings) raises ``BAD_DTYPE``."""
    if isinstance(value, str):
        return value
    if _is_torch_dtype(value):
        name = _torch_maps()[0].get(value)
        if name is None:
            raise LaminarError(error_codes.BAD_DTYPE, f"safetensors has no dtype for {value}")
        return name
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise LaminarError(error_codes.BAD_DTYPE, f"{value!r} is not a dtype") from None
    name = _FROM_NUMPY.get((dtype.kind, dtype.itemsize))
    if name is None:
        raise LaminarError(error_codes.BAD_DTYPE, f"safetensors has no dtype for numpy {dtype}")
    return name


def fills(target: str, source: Optional[str]) -> bool:
    """Whether data of dtype ``source`` (None: raw bytes) may fill a tensor of dtype ``target``."""
    return source is None or source == target or source in _RAW_BITS.get(target, frozenset())
