"""The completed-trajectory record: what a rollout writes and the trainer samples.

Validation is src/data/codec/trajectory.ts's, in the same two layers with the same codes and
messages (test/vectors/trajectories.json holds both languages to it):
1. fields and types, as the zod schema checks them: every problem is an issue
   ``{path, message}`` worded as zod words it, all of them in one ERR_BAD_TRAJECTORY;
2. the invariants, first failure wins: ERR_NEGATIVE_LENGTH, ERR_GROUP_MISMATCH,
   ERR_LENGTH_MISMATCH, ERR_FUTURE_VERSION, and the 4 KiB ceiling on ``info``.

A writer accepts a `Trajectory` or a mapping with either the record's own (camelCase) keys,
``{"id", "promptId", "groupId", "sampleIndex", ...}``, or the Python (snake_case) names of the
`Trajectory` fields. ``None`` stands for an absent optional field.
"""

from __future__ import annotations

import re

import math
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from ... import error_codes
from ..errors import DataCapacityError, DataInputError
from ..ids import MAX_ID_BYTES
from . import arrays
from .segments import Segment, validate_segments
from .js_values import MAX_SAFE_INTEGER, is_number, js_double, js_json_size, js_key_order, js_number_string, type_name

MAX_INFO_BYTES = 4096
"""Largest ``info`` (bytes of its JSON): it is kept in the sampler's index."""

InfoValue = Union[str, int, float, bool]


@dataclass(eq=False)
class Trajectory:
    """A completed trajectory: a prompt and one sampled response, with the weight version that
    generated it and its reward.

    ``tokens`` holds the prompt's and the response's token ids (``prompt_length`` +
    ``response_length`` of them) and ``logprobs`` one entry per token; after validation they are
    int32 and float32 numpy arrays. Timestamps are epoch milliseconds (default: now).
    """

    id: str
    prompt_id: str
    group_id: str
    """GRPO group: the n samples of one prompt claim share it."""
    sample_index: int
    """0..group_size-1"""
    group_size: int
    """n, samples per prompt."""
    weight_version: int
    reward: float
    tokens: Any
    logprobs: Any
    prompt_length: int
    response_length: int
    created_at: Optional[float] = None
    completed_at: Optional[float] = None
    rollout_id: Optional[str] = None
    priority: Optional[float] = None
    """Initial priority for the prioritized strategy (default 1)."""
    info: Optional[Dict[str, InfoValue]] = field(default=None)
    """Small user metadata (scores, advantages); kept in the sampler's index, at most 4 KiB of JSON."""
    segments: Optional[List[Segment]] = field(default=None)
    """The response as ordered turns: generated segments and the observations between them
    (segments.py); their lengths add up to ``response_length`` and observation tokens have
    logprob 0. None: one generated segment of the whole response (a single-turn trajectory)."""

    def to_dict(self) -> Dict[str, Any]:
        """The trajectory under the record's own (camelCase) names, absent optionals left out."""
        out: Dict[str, Any] = {}
        for wire, attr, _ in _FIELDS:
            v = getattr(self, attr)
            if v is not None:
                out[wire] = v
        return out


def _count(v: Any) -> Tuple[Any, Optional[str]]:
    """zod's ``z.number().int()``: a safe integer."""
    if not is_number(v):
        return None, f"Invalid input: expected number, received {type_name(v)}"
    if isinstance(v, int):
        n = v
    else:
        x = js_double(v)
        if not math.isfinite(x):
            return None, f"Invalid input: expected number, received {type_name(v)}"
        if not x.is_integer():
            return None, "Invalid input: expected int, received number"
        n = int(x)
    if n > MAX_SAFE_INTEGER:
        return None, f"Too big: expected int to be <={MAX_SAFE_INTEGER}"
    if n < -MAX_SAFE_INTEGER:
        return None, f"Too small: expected int to be >=-{MAX_SAFE_INTEGER}"
    return int(n), None


def _number(v: Any) -> Tuple[Any, Optional[str]]:
    """zod's ``z.number()``: finite."""
    if not is_number(v):
        return None, f"Invalid input: expected number, received {type_name(v)}"
    x = js_double(v)
    if not math.isfinite(x):
        return None, f"Invalid input: expected number, received {type_name(v)}"
    return x, None


def _priority(v: Any) -> Tuple[Any, Optional[str]]:
    x, problem = _number(v)
    if problem is None and x < 0:
        return None, "Too small: expected number to be >=0"
    return x, problem


def _string(v: Any) -> Optional[str]:
    if not isinstance(v, str):
        return f"Invalid input: expected string, received {type_name(v)}"
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return "Invalid input: a string with a lone surrogate"
    return None


# JavaScript's \s (what trim() removes), spelled out: Python's \s is another set. A trajectory id
# is its record's Nats-Msg-Id, and NATS clients trim header values (src/data/codec/trajectory.ts).
_JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_UNSAFE_ID = re.compile(f"^[{_JS_WHITESPACE}]|[{_JS_WHITESPACE}]$|[\u0000-\u001f\u007f-\u009f]")


def _id(v: Any) -> Tuple[Any, Optional[str]]:
    """An id: 1..256 UTF-8 bytes."""
    problem = _string(v)
    if problem is not None:
        return None, problem
    if len(v) < 1:
        return None, "Too small: expected string to have >=1 characters"
    if len(v.encode("utf-8")) > MAX_ID_BYTES:
        return None, f"at most {MAX_ID_BYTES} bytes"
    return str(v), None


def _trajectory_id(v: Any) -> Tuple[Any, Optional[str]]:
    """A trajectory id: an id that a message-id header carries unchanged."""
    value, problem = _id(v)
    if problem is None and _UNSAFE_ID.search(value) is not None:
        return None, "must not begin or end with whitespace or hold control characters"
    return value, problem


def _rollout_id(v: Any) -> Tuple[Any, Optional[str]]:
    problem = _string(v)
    if problem is not None:
        return None, problem
    if len(v) > MAX_ID_BYTES:  # zod counts code points, as len() does
        return None, f"Too big: expected string to have <={MAX_ID_BYTES} characters"
    return str(v), None


# (record name, Trajectory attribute, checker) in the schema's order, which is the issues' order.
_FIELDS: Tuple[Tuple[str, str, str], ...] = (
    ("id", "id", "trajectoryId"),
    ("promptId", "prompt_id", "id"),
    ("groupId", "group_id", "id"),
    ("sampleIndex", "sample_index", "count"),
    ("groupSize", "group_size", "count"),
    ("weightVersion", "weight_version", "count"),
    ("reward", "reward", "number"),
    ("tokens", "tokens", "tokens"),
    ("logprobs", "logprobs", "logprobs"),
    ("promptLength", "prompt_length", "count"),
    ("responseLength", "response_length", "count"),
    ("createdAt", "created_at", "number?"),
    ("completedAt", "completed_at", "number?"),
    ("rolloutId", "rollout_id", "rolloutId?"),
    ("priority", "priority", "priority?"),
    ("info", "info", "info?"),
    ("segments", "segments", "segments?"),
)
_SCALAR_CHECKS: Dict[str, Callable[[Any], Tuple[Any, Optional[str]]]] = {
    "id": _id,
    "trajectoryId": _trajectory_id,
    "count": _count,
    "number": _number,
    "number?": _number,
    "rolloutId?": _rollout_id,
    "priority?": _priority,
}
_SNAKE = {wire: attr for wire, attr, _ in _FIELDS}


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _info(v: Any, path: str, issues: List[Dict[str, str]]) -> Optional[Dict[str, InfoValue]]:
    """zod's ``z.record(z.string(), z.union([z.string(), z.number(), z.boolean()]))``."""
    if not isinstance(v, Mapping):
        issues.append({"path": path, "message": f"Invalid input: expected record, received {type_name(v)}"})
        return None
    out: Dict[str, InfoValue] = {}
    bad = False
    keys = [k for k in v.keys() if isinstance(k, str)]
    if len(keys) != len(v):
        issues.append({"path": path, "message": "Invalid key in record"})
        bad = True
    for k in js_key_order(keys):
        item = v[k]
        if isinstance(item, str) and _string(item) is None:
            out[k] = str(item)
        elif isinstance(item, (bool, np.bool_)):
            out[k] = bool(item)
        elif is_number(item) and math.isfinite(js_double(item)):
            # A JavaScript number: integers beyond 2^53 are doubles there, and are here.
            exact = isinstance(item, (int, np.integer)) and abs(int(item)) <= MAX_SAFE_INTEGER
            out[k] = int(item) if exact else js_double(item)
        else:
            issues.append({"path": f"{path}.{k}", "message": "Invalid input"})
            bad = True
    return None if bad else out


def _reader(input: Any) -> Tuple[Optional[Callable[[str, str], Tuple[Any, str]]], Any]:
    """How to read each field of the input (record or Python names), and the id for details."""
    if isinstance(input, Trajectory):
        return (lambda wire, attr: (getattr(input, attr), attr)), input.id
    if isinstance(input, Mapping):

        def read(wire: str, attr: str) -> Tuple[Any, str]:
            if wire in input:
                if attr != wire and attr in input:
                    return _Twice(wire, attr), wire
                return input[wire], wire
            if attr in input:
                return input[attr], attr
            return _MISSING, wire

        return read, input.get("id", _MISSING)
    return None, _MISSING


@dataclass(frozen=True)
class _Twice:
    wire: str
    attr: str


def _fail(code: str, message: str, details: Dict[str, Any]) -> DataInputError:
    return DataInputError(code, message, details)


def _js(n: Any) -> str:
    """A number as a JavaScript template literal prints it."""
    return str(n) if isinstance(n, int) else js_number_string(js_double(n))


def validate_trajectory(input: Any, *, max_weight_version: Optional[int] = None, now_ms: Optional[float] = None) -> Trajectory:
    """Validates a writer's input and returns a normalised `Trajectory` (int32 tokens, float32
    logprobs, timestamps set); raises `DataInputError` with the TypeScript writer's code,
    message and details otherwise.

    :param max_weight_version: the newest weight version that exists; a trajectory from a
        later one is rejected (ERR_FUTURE_VERSION).
    :param now_ms: the default timestamps (epoch ms); now when absent.
    """
    read, id_for_details = _reader(input)
    issues: List[Dict[str, str]] = []
    values: Dict[str, Any] = {}
    if read is None:
        issues.append({"path": "", "message": f"Invalid input: expected object, received {type_name(input)}"})
    else:
        for wire, attr, check in _FIELDS:
            v, path = read(wire, attr)
            optional = check.endswith("?")
            if isinstance(v, _Twice):
                issues.append({"path": path, "message": f"Invalid input: given twice, as {v.wire} and {v.attr}"})
                continue
            if v is _MISSING or (optional and v is None):
                if not optional:
                    want = "string" if check == "id" else "number"
                    if check in ("tokens", "logprobs"):
                        issues.append({"path": path, "message": "Invalid input"})
                    else:
                        issues.append({"path": path, "message": f"Invalid input: expected {want}, received undefined"})
                values[attr] = None
                continue
            if check == "info?":
                values[attr] = _info(v, path, issues)
                continue
            if check == "segments?":
                # Checked after the lengths (validate_segments), as the TypeScript writer does.
                values[attr] = v
                continue
            if check in ("tokens", "logprobs"):
                converted = arrays.token_ids(v) if check == "tokens" else arrays.logprobs(v)
                if isinstance(converted, arrays.Problem):
                    issues.extend({"path": path + suffix, "message": message} for suffix, message in converted.issues)
                else:
                    values[attr] = converted
                continue
            value, problem = _SCALAR_CHECKS[check](v)
            if problem is not None:
                issues.append({"path": path, "message": problem})
            values[attr] = value
    if issues:
        where = "; ".join(f"{i['path'] or '(root)'}: {i['message']}" for i in issues)
        details: Dict[str, Any] = {"issues": issues}
        if id_for_details is not _MISSING:
            details = {"id": id_for_details, "issues": issues}
        raise _fail(error_codes.BAD_TRAJECTORY, f"invalid trajectory: {where}", details)

    t_id = values["id"]
    d = {"id": t_id}
    for key, attr in (
        ("promptLength", "prompt_length"),
        ("responseLength", "response_length"),
        ("sampleIndex", "sample_index"),
        ("weightVersion", "weight_version"),
    ):
        if values[attr] < 0:
            raise _fail(error_codes.NEGATIVE_LENGTH, f"{key} is negative ({values[attr]})", {**d, "field": key, "value": values[attr]})
    group_size, sample_index = values["group_size"], values["sample_index"]
    if group_size < 1:
        raise _fail(error_codes.NEGATIVE_LENGTH, f"groupSize must be >= 1 (got {group_size})", {**d, "field": "groupSize", "value": group_size})
    if sample_index >= group_size:
        raise _fail(
            error_codes.GROUP_MISMATCH,
            f"sampleIndex {sample_index} is outside the group of {group_size}",
            {**d, "sampleIndex": sample_index, "groupSize": group_size},
        )
    n, m = len(values["tokens"]), len(values["logprobs"])
    if n != m:
        raise _fail(error_codes.LENGTH_MISMATCH, f"{n} tokens but {m} logprobs", {**d, "tokens": n, "logprobs": m})
    pl, rl = values["prompt_length"], values["response_length"]
    if pl + rl != n:
        raise _fail(
            error_codes.LENGTH_MISMATCH,
            f"promptLength {pl} + responseLength {rl} != {n} tokens",
            {**d, "promptLength": pl, "responseLength": rl, "tokens": n},
        )
    wv = values["weight_version"]
    if max_weight_version is not None and wv > max_weight_version:
        raise _fail(
            error_codes.FUTURE_VERSION,
            f"weight version {wv} is from the future (newest is {_js(max_weight_version)})",
            {**d, "weightVersion": wv, "newest": max_weight_version},
        )
    info = values["info"]
    if info is not None and js_json_size(info) > MAX_INFO_BYTES:
        raise _fail(error_codes.BAD_TRAJECTORY, f"info is larger than {MAX_INFO_BYTES} bytes", d)
    segments = values["segments"]
    if segments is not None:
        segments = validate_segments(
            segments, id=t_id, prompt_length=pl, response_length=rl, logprobs=values["logprobs"], max_weight_version=max_weight_version
        )
    now = float(time.time_ns() // 1_000_000) if now_ms is None else float(now_ms)
    return Trajectory(
        id=t_id,
        prompt_id=values["prompt_id"],
        group_id=values["group_id"],
        sample_index=sample_index,
        group_size=group_size,
        weight_version=wv,
        reward=values["reward"],
        tokens=values["tokens"],
        logprobs=values["logprobs"],
        prompt_length=pl,
        response_length=rl,
        created_at=now if values["created_at"] is None else values["created_at"],
        completed_at=now if values["completed_at"] is None else values["completed_at"],
        rollout_id=values["rollout_id"],
        priority=values["priority"],
        info=info,
        segments=segments,
    )


def payload_bytes(t: Trajectory) -> int:
    """Bytes of a validated trajectory's payload: 4 per token id and 4 per logprob."""
    return int(t.tokens.nbytes) + int(t.logprobs.nbytes)


def check_payload_size(t: Trajectory, max_bytes: int) -> None:
    """The writer's ceiling on a validated trajectory's payload (ERR_PAYLOAD_TOO_LARGE)."""
    size = payload_bytes(t)
    if size > max_bytes:
        raise DataCapacityError(
            error_codes.PAYLOAD_TOO_LARGE,
            f"trajectory {t.id} has {size} payload bytes, more than the maximum {max_bytes}",
            {"id": t.id, "bytes": size, "max": max_bytes},
        )


assert [f.name for f in fields(Trajectory)] == [attr for _, attr, _ in _FIELDS], "Trajectory's fields and the schema's order must agree"
