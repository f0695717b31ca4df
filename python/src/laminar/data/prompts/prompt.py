"""A prompt of the dataset, validated as src/data/prompts/prompt.ts validates it, and the GRPO group
ids of claims (`<promptId>#<epoch>`)."""

from __future__ import annotations

import json
import re
from typing import Any, Optional, Tuple

from ... import error_codes
from ..errors import DataInputError
from ..ids import MAX_ID_BYTES

MAX_PROMPT_BYTES = 1024 * 1024
"""Largest stored prompt (its payload and n as JSON)."""

MAX_GROUP_SIZE = 65536

# JavaScript's \s (what the TypeScript side's /^\s/ matches) and its control-character class.
_JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_LEADING_SPACE = re.compile(f"^[{_JS_WHITESPACE}]")
_CONTROL = re.compile("[\u0000-\u001f\u007f-\u009f]")


def _bad(message: str) -> DataInputError:
    return DataInputError(error_codes.BAD_PROMPT, message)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_prompt(value: Any, default_n: int) -> Tuple[str, Any, int, str]:
    """(id, payload, n, stored JSON) of one prompt ``{"id", "payload", "n"?}``; raises
    DataInputError(ERR_BAD_PROMPT). An integer id becomes its decimal string, as in TypeScript."""
    if not isinstance(value, dict):
        raise _bad("invalid prompt: (root): expected an object")
    raw_id = value.get("id")
    if _is_int(raw_id) or (isinstance(raw_id, float) and raw_id.is_integer()):
        id = str(int(raw_id))
    elif isinstance(raw_id, str) and raw_id != "":
        id = raw_id
    else:
        raise _bad("invalid prompt: id: expected a non-empty string or an integer")
    if "payload" not in value:
        raise _bad("invalid prompt: payload: payload is required")
    n = value.get("n")
    if n is None:
        n = default_n
    elif not _is_int(n) or not 1 <= n <= MAX_GROUP_SIZE:
        raise _bad(f"invalid prompt: n: expected an integer in [1, {MAX_GROUP_SIZE}]")
    if len(id.encode("utf-8")) > MAX_ID_BYTES:
        raise _bad(f"prompt id longer than {MAX_ID_BYTES} bytes")
    # Trajectory ids begin with the prompt id and are message ids: refused here, before generation.
    if _LEADING_SPACE.search(id) or _CONTROL.search(id):
        raise _bad(f"prompt id {json.dumps(id, ensure_ascii=False)} begins with whitespace or holds control characters")
    stored = stored_json(value["payload"], n)
    if len(stored) > MAX_PROMPT_BYTES:
        raise _bad(f"prompt {id} is larger than {MAX_PROMPT_BYTES} bytes")
    return id, value["payload"], n, stored


def stored_json(payload: Any, n: int) -> str:
    """What Redis stores of a prompt, as JSON.stringify writes it: ``{"p":<payload>,"n":<n>}``
    (the id is the hash field). The Lua scripts read ``n`` from its end."""
    return json.dumps({"p": payload, "n": n}, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def group_id_of(prompt_id: str, epoch: int) -> str:
    """GRPO group of a claim: the prompt in an epoch."""
    return f"{prompt_id}#{epoch}"


def parse_group_id(group_id: str) -> Optional[Tuple[str, int]]:
    """(prompt id, epoch) of a group id, or None when it is not one."""
    at = group_id.rfind("#")
    if at <= 0:
        return None
    tail = group_id[at + 1 :]
    if not tail.isdigit() or not tail.isascii():
        return None
    return group_id[:at], int(tail)
