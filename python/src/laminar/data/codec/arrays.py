"""Token ids and logprobs as the payload stores them: int32 and float32 numpy arrays.

A writer accepts what a rollout loop has at hand:
- a list or tuple of numbers, checked as the TypeScript writer checks a `number[]`: token ids
  integral (bool is not a number) and int32, logprobs finite;
- a 1-D numpy array of any integer or floating dtype, or a torch tensor (any device, bf16/f16
  included): converted to int32 / float32 like a typed array, refusing token ids that are not
  integral or do not fit int32. Logprob arrays are taken as they are (NaN, ±inf kept), as a
  `Float32Array` is in TypeScript.

Each function returns the converted array, or a `Problem` that names what is wrong in zod's
terms (the messages of src/data/codec/trajectory.ts).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple, Union

import numpy as np

from .js_values import MAX_SAFE_INTEGER, is_number

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT32_MESSAGE = f"token ids must be int32 ({INT32_MIN}..{INT32_MAX})"
"""The TypeScript schema's message for token ids outside int32."""


@dataclass(frozen=True)
class Problem:
    """What is wrong with an array: zod issues as (path suffix, message) pairs."""

    issues: Tuple[Tuple[str, str], ...]


_INVALID = Problem((("", "Invalid input"),))


def _as_numpy(v: Any) -> Optional[np.ndarray]:
    """A numpy array for an ndarray or a torch tensor (copied off a GPU), else None."""
    if isinstance(v, np.ndarray):
        return v
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        t = v.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()  # numpy has no bfloat16; float32 holds both exactly
        return t.numpy()
    return None


def token_ids(v: Any) -> Union[np.ndarray, Problem]:
    """Token ids as an int32 array, or what is wrong with them."""
    arr = _as_numpy(v)
    if arr is not None:
        return _token_array(arr)
    if not isinstance(v, (list, tuple)):
        return _INVALID
    if all(type(x) is int for x in v):
        # The common case: plain ints. Any beyond int64 fall through to the slow path.
        try:
            a = np.array(v, dtype=np.int64)
        except OverflowError:
            pass
        else:
            if a.size and (a.min() < INT32_MIN or a.max() > INT32_MAX):
                return _token_list_problem(v)
            return a.astype(np.int32)
    return _token_list_problem(v)


def _token_list_problem(v: Union[list, tuple]) -> Union[np.ndarray, Problem]:
    """zod's verdict on a number[] of token ids, element by element (the slow path)."""
    values: List[int] = []
    for x in v:
        if not is_number(x):
            return _INVALID
        f = float(x) if not isinstance(x, int) else None
        if f is not None and (not math.isfinite(f) or not f.is_integer()):
            return _INVALID
        values.append(int(x) if f is None else int(f))
    issues: List[Tuple[str, str]] = []
    for i, x in enumerate(values):
        if x > MAX_SAFE_INTEGER:
            issues.append((f".{i}", f"Too big: expected int to be <={MAX_SAFE_INTEGER}"))
        elif x < -MAX_SAFE_INTEGER:
            issues.append((f".{i}", f"Too small: expected int to be >=-{MAX_SAFE_INTEGER}"))
    if any(x < INT32_MIN or x > INT32_MAX for x in values):
        issues.append(("", INT32_MESSAGE))
    if issues:
        return Problem(tuple(issues))
    return np.array(values, dtype=np.int32)


def _token_array(a: np.ndarray) -> Union[np.ndarray, Problem]:
    if a.ndim != 1:
        return Problem((("", f"Invalid input: expected a 1-D array, got shape {tuple(a.shape)}"),))
    kind = a.dtype.kind
    if kind in "iu":
        if a.dtype.itemsize >= 4 and a.dtype != np.int32 and a.size and (int(a.min()) < INT32_MIN or int(a.max()) > INT32_MAX):
            return Problem((("", INT32_MESSAGE),))
    elif kind == "f":
        if a.size and not (np.isfinite(a).all() and (np.floor(a) == a).all()):
            return Problem((("", "Invalid input: token ids must be integral"),))
        if a.size and (a.min() < INT32_MIN or a.max() > INT32_MAX):
            return Problem((("", INT32_MESSAGE),))
    else:
        return Problem((("", f"Invalid input: token ids of dtype {a.dtype} (expected integers)"),))
    return np.ascontiguousarray(a, dtype=np.int32)


def logprobs(v: Any) -> Union[np.ndarray, Problem]:
    """Logprobs as a float32 array, or what is wrong with them."""
    arr = _as_numpy(v)
    if arr is not None:
        if arr.ndim != 1:
            return Problem((("", f"Invalid input: expected a 1-D array, got shape {tuple(arr.shape)}"),))
        if arr.dtype.kind not in "iuf":
            return Problem((("", f"Invalid input: logprobs of dtype {arr.dtype} (expected numbers)"),))
        with np.errstate(over="ignore"):
            return np.ascontiguousarray(arr, dtype=np.float32)
    if not isinstance(v, (list, tuple)):
        return _INVALID
    if not all(type(x) is float or type(x) is int for x in v):
        if not all(is_number(x) for x in v):
            return _INVALID
    try:
        a = np.array(v, dtype=np.float64)
    except OverflowError:
        return _INVALID
    if a.size and not np.isfinite(a).all():
        return _INVALID
    # float64 -> float32 rounds to nearest, ties to even (Float32Array.from does the same).
    with np.errstate(over="ignore"):
        return a.astype(np.float32)
