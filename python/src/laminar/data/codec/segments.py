"""A multi-turn trajectory's response as ordered segments, as src/data/codec/segments.ts: the
turns the model generated and the observations the environment returned between them.

A segment is a dict under the record's own names::

    {"kind": "generated", "length": 4, "weightVersion": 3, "finishReason": "tool_call"}
    {"kind": "observation", "length": 2,
     "action": {"tool": "lookup", "actionId": "a-1", "status": "ok", "latencyMs": 12}}

(the Python names ``weight_version``, ``finish_reason``, ``action_id`` and ``latency_ms`` are
accepted too). Tokens and logprobs stay flat; observation tokens carry logprob 0 and are masked
out of the loss. A trajectory without segments is one generated segment of its whole response.
The checks give the TypeScript writer's codes and messages, word for word (the shared vectors
hold both to it).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ... import error_codes
from ..errors import DataCapacityError, DataInputError
from ..ids import MAX_ID_BYTES
from .js_values import MAX_SAFE_INTEGER, is_number, js_double, js_number_string
from .msgpack_js import pack_js

ACTION_STATUSES = ("ok", "error", "timeout", "failed", "truncated", "bad_call")
MAX_SEGMENTS = 256
"""A record holds at most this many segments..."""
MAX_SEGMENT_BYTES = 4096
"""...and at most this many bytes of them (msgpack of the wire form) in its header."""
MAX_TOOL_BYTES = 64
MAX_FINISH_REASON_BYTES = 64

Segment = Dict[str, Any]

_ALIASES = {"weightVersion": "weight_version", "finishReason": "finish_reason", "actionId": "action_id", "latencyMs": "latency_ms"}
_ABSENT = object()


def _get(m: Mapping, key: str) -> Any:
    if key in m:
        return m[key]
    return m.get(_ALIASES.get(key, key), _ABSENT)


def _is_count(v: Any) -> bool:
    """Number.isSafeInteger(v) && v >= 0."""
    if not is_number(v):
        return False
    x = js_double(v)
    return math.isfinite(x) and x.is_integer() and 0 <= x <= MAX_SAFE_INTEGER


def _bounded_string(v: Any, limit: int) -> Optional[str]:
    if not isinstance(v, str):
        return "expected a string"
    try:
        size = len(v.encode("utf-8"))
    except UnicodeEncodeError:
        return "a string with a lone surrogate"
    if not v:
        return "expected a non-empty string"
    if size > limit:
        return f"at most {limit} bytes"
    return None


def _problem(v: Any) -> Optional[Tuple[str, str]]:
    """The first thing wrong with one segment: (path under it, message)."""
    if not isinstance(v, Mapping):
        return "", "expected an object"
    kind = v.get("kind")
    if not isinstance(kind, str) or kind not in ("generated", "observation"):
        return "kind", 'expected "generated" or "observation"'
    if not _is_count(v.get("length", _ABSENT)):
        return "length", "expected an integer >= 0"
    if kind == "generated":
        if not _is_count(_get(v, "weightVersion")):
            return "weightVersion", "expected an integer >= 0"
        problem = _bounded_string(_get(v, "finishReason"), MAX_FINISH_REASON_BYTES)
        return None if problem is None else ("finishReason", problem)
    a = v.get("action", _ABSENT)
    if not isinstance(a, Mapping):
        return "action", "expected an object"
    problem = _bounded_string(a.get("tool", _ABSENT), MAX_TOOL_BYTES)
    if problem is not None:
        return "action.tool", problem
    problem = _bounded_string(_get(a, "actionId"), MAX_ID_BYTES)
    if problem is not None:
        return "action.actionId", problem
    status = a.get("status", _ABSENT)
    if not isinstance(status, str) or status not in ACTION_STATUSES:
        return "action.status", f"expected one of {', '.join(ACTION_STATUSES)}"
    latency = _get(a, "latencyMs")
    if not is_number(latency) or not math.isfinite(js_double(latency)) or js_double(latency) < 0:
        return "action.latencyMs", "expected a finite number >= 0"
    return None


def _number(v: Any) -> Any:
    """A number as the record holds it: int when integral (as msgpack writes it), else float."""
    x = js_double(v)
    return int(x) if x.is_integer() and abs(x) <= MAX_SAFE_INTEGER else x


def _normalised(v: Mapping) -> Segment:
    if v["kind"] == "generated":
        return {
            "kind": "generated",
            "length": _number(v["length"]),
            "weightVersion": _number(_get(v, "weightVersion")),
            "finishReason": str(_get(v, "finishReason")),
        }
    a = v["action"]
    return {
        "kind": "observation",
        "length": _number(v["length"]),
        "action": {"tool": str(a["tool"]), "actionId": str(_get(a, "actionId")), "status": str(a["status"]), "latencyMs": _number(_get(a, "latencyMs"))},
    }


def to_wire(segments: Sequence[Segment]) -> List[list]:
    """The compact form a record's header holds: [0, length, weightVersion, finishReason] or
    [1, length, tool, actionId, status, latencyMs]."""
    out: List[list] = []
    for s in segments:
        if s["kind"] == "generated":
            out.append([0, s["length"], s["weightVersion"], s["finishReason"]])
        else:
            a = s["action"]
            out.append([1, s["length"], a["tool"], a["actionId"], a["status"], a["latencyMs"]])
    return out


def from_wire(wire: Sequence[Sequence[Any]]) -> List[Segment]:
    out: List[Segment] = []
    for w in wire:
        if w[0] == 0:
            out.append({"kind": "generated", "length": w[1], "weightVersion": w[2], "finishReason": w[3]})
        else:
            out.append({"kind": "observation", "length": w[1], "action": {"tool": w[2], "actionId": w[3], "status": w[4], "latencyMs": w[5]}})
    return out


def _js(x: float) -> str:
    """A float as a JavaScript template literal prints it."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return js_number_string(x)


def _js_value(v: Any) -> str:
    return str(v) if isinstance(v, int) else _js(float(v))


def validate_segments(
    value: Any,
    *,
    id: str,
    prompt_length: int,
    response_length: int,
    logprobs: np.ndarray,
    max_weight_version: Optional[int] = None,
) -> List[Segment]:
    """Checks a trajectory's segments against its lengths and logprobs; returns them
    normalised. Raises ERR_BAD_SEGMENTS, ERR_TOO_MANY_SEGMENTS, ERR_SEGMENT_LENGTHS,
    ERR_FUTURE_VERSION or ERR_OBSERVATION_LOGPROB, checked in that order."""
    d = {"id": id}
    if not isinstance(value, (list, tuple)):
        raise DataInputError(error_codes.BAD_SEGMENTS, "invalid segments: expected an array", {**d, "path": "segments"})
    if len(value) > MAX_SEGMENTS:
        raise DataCapacityError(
            error_codes.TOO_MANY_SEGMENTS,
            f"{len(value)} segments, more than the maximum {MAX_SEGMENTS}",
            {**d, "segments": len(value), "max": MAX_SEGMENTS},
        )
    out: List[Segment] = []
    for i, s in enumerate(value):
        problem = _problem(s)
        if problem is not None:
            path = f"segments.{i}" if problem[0] == "" else f"segments.{i}.{problem[0]}"
            raise DataInputError(error_codes.BAD_SEGMENTS, f"invalid segments: {path}: {problem[1]}", {**d, "path": path})
        out.append(_normalised(s))
    size = len(pack_js(to_wire(out)))
    if size > MAX_SEGMENT_BYTES:
        raise DataCapacityError(
            error_codes.TOO_MANY_SEGMENTS,
            f"the segments take {size} bytes, more than the maximum {MAX_SEGMENT_BYTES}",
            {**d, "bytes": size, "max": MAX_SEGMENT_BYTES},
        )
    total = sum(s["length"] for s in out)
    if total != response_length:
        raise DataInputError(
            error_codes.SEGMENT_LENGTHS,
            f"segment lengths add up to {total}, not the response length {response_length}",
            {**d, "segments": total, "responseLength": response_length},
        )
    at = prompt_length
    for i, s in enumerate(out):
        if s["kind"] == "generated" and max_weight_version is not None and s["weightVersion"] > max_weight_version:
            raise DataInputError(
                error_codes.FUTURE_VERSION,
                f"segment {i} has weight version {s['weightVersion']}, from the future (newest is {_js_value(max_weight_version)})",
                {**d, "segment": i, "weightVersion": s["weightVersion"], "newest": max_weight_version},
            )
        if s["kind"] == "observation" and s["length"]:
            window = logprobs[at : at + s["length"]]
            bad = np.flatnonzero(window != 0)
            if bad.size:
                k = at + int(bad[0])
                raise DataInputError(
                    error_codes.OBSERVATION_LOGPROB,
                    f"token {k} is in observation segment {i} but has logprob {_js(float(logprobs[k]))}, not 0",
                    {**d, "segment": i, "token": k},
                )
        at += s["length"]
    return out


def _shapes(prompt_length: int, response_length: int, segments: Optional[Sequence[Segment]]) -> Sequence[Tuple[str, int]]:
    if segments is None:
        return (("generated", response_length),)
    return [(s["kind"], int(s["length"])) for s in segments]


def loss_mask_of(prompt_length: int, response_length: int, segments: Optional[Sequence[Segment]] = None) -> np.ndarray:
    """The per-token loss mask over prompt + response (uint8): 1 for generated tokens, 0 for
    the prompt and observations. No segments: every response token is generated."""
    out = np.zeros(prompt_length + response_length, dtype=np.uint8)
    at = prompt_length
    for kind, length in _shapes(prompt_length, response_length, segments):
        if kind == "generated":
            out[at : at + length] = 1
        at += length
    return out


def turn_boundaries_of(prompt_length: int, response_length: int, segments: Optional[Sequence[Segment]] = None) -> List[int]:
    """Where each segment starts (an index into prompt + response), then the end: segment i is
    tokens [b[i], b[i+1]); b[0] is the prompt length."""
    out = [prompt_length]
    at = prompt_length
    for _, length in _shapes(prompt_length, response_length, segments):
        at += length
        out.append(at)
    return out
