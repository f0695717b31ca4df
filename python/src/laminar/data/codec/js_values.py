"""JavaScript's view of values, where the record format depends on it.

The TypeScript writer's bytes come from JavaScript semantics: every number is a double,
`JSON.stringify` prints numbers its own way, and an object's keys iterate with the array-index
keys ("0", "1", ...) first in ascending order. A Python writer that must produce the same bytes
(and the same size checks) reproduces exactly those rules here, and nowhere else.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from typing import Any, Iterable, List

import numpy as np

MAX_SAFE_INTEGER = 2**53 - 1
"""Number.MAX_SAFE_INTEGER: zod's `.int()` accepts integers up to it."""

_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")
_MAX_ARRAY_INDEX = 2**32 - 2

# String.prototype.trim's whitespace: WhiteSpace and LineTerminator of ECMA-262.
JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


def is_number(v: object) -> bool:
    """A JavaScript number's Python counterparts: int and float (numpy's too), not bool."""
    t = type(v)
    if t is int or t is float:
        return True
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def js_double(v: Any) -> float:
    """The double JavaScript would hold for a Python number (huge ints become ±inf)."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def type_name(v: object) -> str:
    """What zod calls a value's type in "expected X, received Y" (its parsedType)."""
    if v is None:
        return "null"
    if isinstance(v, (bool, np.bool_)):
        return "boolean"
    if is_number(v):
        x = js_double(v)
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple, np.ndarray)):
        return "array"
    if callable(v):
        return "function"
    return "object"


def is_array_index(key: str) -> bool:
    """Whether JavaScript treats this property key as an array index (iterated first, ascending)."""
    return _ARRAY_INDEX.fullmatch(key) is not None and int(key) <= _MAX_ARRAY_INDEX


def js_key_order(keys: Iterable[str]) -> List[str]:
    """Keys in the order a JavaScript object built from them iterates: array indices first in
    ascending order, then the other keys as given."""
    keys = list(keys)
    indices = sorted((k for k in keys if is_array_index(k)), key=int)
    if not indices:
        return keys
    return indices + [k for k in keys if not is_array_index(k)]


def js_number_string(x: float) -> str:
    """Number.prototype.toString (and JSON.stringify) of a finite double: the shortest digits
    that round-trip, in positional notation from 1e-6 up to 1e21, else exponential."""
    if x == 0:
        return "0"  # -0 too
    if x < 0:
        return "-" + js_number_string(-x)
    mantissa, _, exp = repr(x).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    s = stripped.rstrip("0")
    k, n = len(s), point
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return f"{s[:n]}.{s[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    sign = "+" if e >= 0 else "-"
    return f"{s[0]}{'.' + s[1:] if k > 1 else ''}e{sign}{abs(e)}"


def js_json_string(s: str) -> str:
    """JSON.stringify of a string (Python's escapes are the same set, written the same way)."""
    return json.dumps(s, ensure_ascii=False)


def js_json_size(record: dict) -> int:
    """Buffer.byteLength(JSON.stringify(record)) of a flat record of strings, numbers and
    booleans whose keys are already in JavaScript order."""
    parts = []
    for k, v in record.items():
        if isinstance(v, str):
            text = js_json_string(v)
        elif isinstance(v, (bool, np.bool_)):
            text = "true" if v else "false"
        else:
            text = js_number_string(js_double(v))
        parts.append(f"{js_json_string(k)}:{text}")
    return len(("{" + ",".join(parts) + "}").encode("utf-8"))


def js_trim(s: str) -> str:
    """String.prototype.trim (nats.js trims header values so)."""
    return s.strip(JS_WHITESPACE)
