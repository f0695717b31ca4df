"""Request parsing and response shapes of the SGLang HTTP subset (docs/reference/engine-http.md).

Pure functions, no I/O. Two kinds of bad request, as upstream:
- `SchemaError`: the body is not JSON, or a field has the wrong JSON type. Answered 400 with
  upstream's validation body `{"object": "error", "message", "type": "Bad Request", "param": null,
  "code": 400}`, before anything is streamed.
- `InvalidRequest`: well-typed but refused (a value out of range, a prompt too long, an id outside
  the vocabulary). Answered `400 {"error": {"message"}}`, or, for a streamed `/generate`, as one
  `data: {"error": {...}}` event before `data: [DONE]` (status 200), as upstream does.
Unknown top-level fields are ignored (upstream's dataclasses drop them); unknown sampling
parameters are refused, so that a typo does not silently change the sampling.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from .sampling import SamplingParams


class SchemaError(Exception):
    """The body does not parse, or a field has the wrong type."""


class InvalidRequest(Exception):
    """A well-formed request the engine refuses."""


def schema_error_body(message: str) -> dict[str, Any]:
    """Upstream's answer to a request that fails validation (FastAPI's RequestValidationError, made 400)."""
    return {"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}


def error_body(message: str) -> dict[str, Any]:
    """Upstream's `_create_error_response` body."""
    return {"error": {"message": message}}


def parse_json_object(raw: bytes, allow_empty: bool = False) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is `{}` when `allow_empty`."""
    if not raw.strip():
        if allow_empty:
            return {}
        raise SchemaError("request body is empty; a JSON object is expected")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as err:
        raise SchemaError(f"JSON decode error: {err}") from None
    if not isinstance(body, dict):
        raise SchemaError(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def optional_str(body: Mapping[str, Any], key: str, where: str = "") -> Optional[str]:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise SchemaError(f"{where}{key} must be a string or null, got {json.dumps(value)}")
    return value


def optional_bool(body: Mapping[str, Any], key: str, default: bool, where: str = "") -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SchemaError(f"{where}{key} must be a boolean, got {json.dumps(value)}")
    return value


def _optional_int(body: Mapping[str, Any], key: str, where: str) -> Optional[int]:
    value = body.get(key)
    if value is not None and not _is_int(value):
        raise SchemaError(f"{where}{key} must be an integer or null, got {json.dumps(value)}")
    return value


def _optional_number(body: Mapping[str, Any], key: str, where: str) -> Optional[float]:
    value = body.get(key)
    if value is not None and not _is_number(value):
        raise SchemaError(f"{where}{key} must be a number or null, got {json.dumps(value)}")
    return None if value is None else float(value)


def _int_list(value: Any, what: str) -> list[int]:
    # A request's whole context comes through here (every turn of a multi-turn trajectory sends
    # it again): the types are read in C (`map(type, ...)`) and the per-element Python check runs
    # only when something is not exactly an int (JSON gives no other int subclass than bool).
    if isinstance(value, list) and (not value or set(map(type, value)) == {int}):
        return value
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise SchemaError(f"{what} must be a list of integers")
    return value


# Upstream sampling parameters the reference engine knows but does not implement: accepted only at
# their neutral values, refused otherwise (never silently ignored).
_NEUTRAL_SAMPLING = {
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "n": 1,
    "stop": None,
    "stop_regex": None,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "logit_bias": None,
    "custom_params": None,
}
_IGNORED_SAMPLING = {"skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "stream_interval"}
_SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_p", "top_k", "stop_token_ids", "ignore_eos", "sampling_seed"}


def parse_sampling_params(raw: Any) -> SamplingParams:
    """`sampling_params` of a /generate body, checked as upstream's SamplingParams.verify does."""
    if raw is None:
        return SamplingParams()
    if not isinstance(raw, dict):
        raise SchemaError(f"sampling_params must be an object, got {json.dumps(raw)}")
    where = "sampling_params."
    for key, value in raw.items():
        if key in _SAMPLING_KEYS or key in _IGNORED_SAMPLING:
            continue
        if key in _NEUTRAL_SAMPLING:
            if value is not None and value != _NEUTRAL_SAMPLING[key] and value != []:
                raise InvalidRequest(f"{where}{key} is not supported by the reference engine (only its neutral value {json.dumps(_NEUTRAL_SAMPLING[key])})")
            continue
        raise InvalidRequest(f"unknown sampling parameter {key!r}")
    max_new_tokens = _optional_int(raw, "max_new_tokens", where) if "max_new_tokens" in raw else 128
    temperature = _optional_number(raw, "temperature", where)
    top_p = _optional_number(raw, "top_p", where)
    top_k = _optional_int(raw, "top_k", where)
    seed = _optional_int(raw, "sampling_seed", where)
    stop = raw.get("stop_token_ids")
    stop_ids = frozenset() if stop is None else frozenset(_int_list(stop, f"{where}stop_token_ids"))
    params = SamplingParams(
        max_new_tokens=max_new_tokens,
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        top_k=-1 if top_k is None else top_k,
        stop_token_ids=stop_ids,
        ignore_eos=optional_bool(raw, "ignore_eos", False, where),
        sampling_seed=seed,
    )
    if params.temperature < 0:
        raise InvalidRequest(f"temperature must be a non-negative finite number, got {params.temperature}.")
    if not 0.0 < params.top_p <= 1.0:
        raise InvalidRequest(f"top_p must be in (0, 1], got {params.top_p}.")
    if params.top_k < 1 and params.top_k != -1:
        raise InvalidRequest(f"top_k must be -1 (disable) or at least 1, got {params.top_k}.")
    if params.max_new_tokens is not None and params.max_new_tokens < 0:
        raise InvalidRequest(f"max_new_tokens must be at least 0, got {params.max_new_tokens}.")
    return params


@dataclass(frozen=True)
class GenerateRequest:
    """A parsed /generate body."""

    rid: Optional[str]
    input_ids: list[int]
    sampling: SamplingParams
    return_logprob: bool
    stream: bool
    priority: Optional[int] = None
    """SGLang's request priority: with --enable-priority-scheduling, larger values are admitted first."""
    lora_path: Optional[str] = None
    """The name of the LoRA adapter to run with (SGLang's field name; it holds a name, not a path); None: the base model."""


def parse_generate(body: Mapping[str, Any], vocab_size: int) -> GenerateRequest:
    """Checks a /generate body (one prompt given as token ids) against the model's vocabulary."""
    rid = optional_str(body, "rid")
    stream = optional_bool(body, "stream", False)
    return_logprob = optional_bool(body, "return_logprob", False)
    priority = _optional_int(body, "priority", "")
    if isinstance(body.get("lora_path"), list):
        raise InvalidRequest("a list of lora_path (batched input) is not supported by the reference engine: send one prompt per request")
    lora_path = optional_str(body, "lora_path")
    sampling = parse_sampling_params(body.get("sampling_params"))
    input_ids = body.get("input_ids")
    if input_ids is None:
        if body.get("text") is not None or body.get("input_embeds") is not None:
            raise InvalidRequest("the reference engine has no tokenizer (as SGLang with --skip-tokenizer-init): send input_ids")
        raise InvalidRequest("Either text, input_ids or input_embeds should be provided.")
    if isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list):
        raise InvalidRequest("batched input_ids (a list of lists) are not supported by the reference engine: send one prompt per request")
    input_ids = _int_list(input_ids, "input_ids")
    if not input_ids:
        raise InvalidRequest("input_ids is empty")
    # min/max in C first; the offending id is looked for only when there is one.
    bad = None if 0 <= min(input_ids) and max(input_ids) < vocab_size else next(t for t in input_ids if not 0 <= t < vocab_size)
    if bad is not None:
        raise InvalidRequest(f"input_ids holds token id {bad}, outside the vocabulary [0, {vocab_size})")
    if rid is not None and not rid:
        raise InvalidRequest("rid must not be empty")
    return GenerateRequest(
        rid=rid, input_ids=input_ids, sampling=sampling, return_logprob=return_logprob, stream=stream, priority=priority, lora_path=lora_path
    )


def finish_length(length: int) -> dict[str, Any]:
    return {"type": "length", "length": length}


def finish_stop(token: int) -> dict[str, Any]:
    return {"type": "stop", "matched": token}


def finish_abort(message: str, status_code: Optional[int] = None) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": status_code, "err_type": None}


def sse_event(obj: Any) -> bytes:
    """One server-sent event: `data: <json>` and a blank line."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
