"""msgpack bytes as msgpackr's `pack` (the TypeScript side's default packer) writes them.

Two of msgpackr's choices differ from msgpack-python's, and the record header must be the same
bytes in both languages:

- every JavaScript number is a double, and msgpackr writes an integral one in [-2^31, 2^32) as
  the smallest int (fixint, uint8/16/32, int8/16/32) and every other one (fractions, larger
  integers such as epoch milliseconds) as float64; a Python int or float is written by the same
  rule (so 1.0 is the int 1, and 2**32 is a float64);
- every map has a map16 header, however few its keys (msgpackr reserves the length and fills it
  in after writing the entries).

Strings are written with the smallest header of their UTF-8 length (fixstr, str8, str16, str32),
arrays with the smallest of theirs, as msgpack-python does. Keys keep the dict's order.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Mapping, Sequence

import numpy as np

from .js_values import is_number

_PACK_F64 = struct.Struct(">Bd").pack
_PACK_U16 = struct.Struct(">BH").pack
_PACK_U32 = struct.Struct(">BI").pack
_PACK_I16 = struct.Struct(">Bh").pack
_PACK_I32 = struct.Struct(">Bi").pack

_INT_MIN = -(2**31)
_UINT_END = 2**32


def pack_js(value: Any) -> bytes:
    """Packs str, bool, None, numbers, mappings (str keys) and sequences as msgpackr does."""
    out = bytearray()
    _pack(value, out)
    return bytes(out)


def _pack(v: Any, out: bytearray) -> None:
    # The metadata's own types first, by exact type (the writer's hot path); then the general case.
    t = type(v)
    if t is str:
        _pack_str(v, out)
    elif t is int:
        if _INT_MIN <= v < _UINT_END:
            _pack_int(v, out)
        else:
            out += _PACK_F64(0xCB, _double(v))
    elif t is float:
        if _INT_MIN <= v < _UINT_END and v.is_integer():
            _pack_int(int(v), out)
        else:
            out += _PACK_F64(0xCB, v)
    elif t is dict:
        _pack_map(v, out)
    else:
        _pack_other(v, out)


def _pack_map(v: Mapping, out: bytearray) -> None:
    n = len(v)
    if n > 0xFFFF:
        raise ValueError("msgpackr's map16 holds at most 65535 entries")
    out += _PACK_U16(0xDE, n)
    for key, item in v.items():
        _pack_str(key, out)
        _pack(item, out)


def _pack_other(v: Any, out: bytearray) -> None:
    if isinstance(v, str):
        _pack_str(v, out)
    elif v is None:
        out.append(0xC0)
    elif isinstance(v, (bool, np.bool_)):
        out.append(0xC3 if v else 0xC2)
    elif isinstance(v, int):
        if _INT_MIN <= v < _UINT_END:
            _pack_int(v, out)
        else:
            out += _PACK_F64(0xCB, _double(v))
    elif is_number(v):
        x = float(v)
        if _INT_MIN <= x < _UINT_END and x.is_integer():
            _pack_int(int(x), out)
        else:
            out += _PACK_F64(0xCB, x)
    elif isinstance(v, Mapping):
        _pack_map(v, out)
    elif isinstance(v, (Sequence, np.ndarray)) and not isinstance(v, (bytes, bytearray)):
        n = len(v)
        if n < 0x10:
            out.append(0x90 | n)
        elif n < 0x10000:
            out += _PACK_U16(0xDC, n)
        else:
            out += _PACK_U32(0xDD, n)
        for item in v:
            _pack(item, out)
    else:
        raise TypeError(f"cannot pack {type(v).__name__} as msgpackr would")


def _double(v: int) -> float:
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _pack_int(v: int, out: bytearray) -> None:
    if v >= 0:
        if v < 0x80:
            out.append(v)
        elif v < 0x100:
            out += bytes((0xCC, v))
        elif v < 0x10000:
            out += _PACK_U16(0xCD, v)
        else:
            out += _PACK_U32(0xCE, v)
    elif v >= -0x20:
        out.append(0x100 + v)
    elif v >= -0x80:
        out += bytes((0xD0, v + 0x100))
    elif v >= -0x8000:
        out += _PACK_I16(0xD1, v)
    else:
        out += _PACK_I32(0xD2, v)


def _pack_str(s: str, out: bytearray) -> None:
    b = s.encode("utf-8")
    n = len(b)
    if n < 0x20:
        out.append(0xA0 | n)
    elif n < 0x100:
        out += bytes((0xD9, n))
    elif n < 0x10000:
        out += _PACK_U16(0xDA, n)
    else:
        out += _PACK_U32(0xDB, n)
    out += b
