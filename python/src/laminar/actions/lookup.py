"""The deterministic lookup tool of the demo's tool task, the same function as
src/actions/executors/lookup.ts: ``lookup_digits(key, length=4)`` is ``length`` decimal digits,
digit i = fnv1a32(utf8(key + "#" + i)) mod 10 (32-bit FNV-1a)."""

from __future__ import annotations

from typing import Any

from .errors import ActionArgumentError

LOOKUP_TOOL = "lookup"
LOOKUP_DEFAULT_LENGTH = 4
LOOKUP_MAX_LENGTH = 32


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def lookup_digits(key: str, length: int = LOOKUP_DEFAULT_LENGTH) -> str:
    return "".join(str(fnv1a32(f"{key}#{i}".encode()) % 10) for i in range(length))


def lookup_handler(args: Any, context: Any = None) -> str:
    """The `lookup` tool as an action handler (sync)."""
    if not isinstance(args, dict):
        raise ActionArgumentError(f"{LOOKUP_TOOL} takes an object of named arguments")
    key = args.get("key")
    if not isinstance(key, str):
        raise ActionArgumentError(f"{LOOKUP_TOOL}: argument key must be a string")
    length = args.get("length", LOOKUP_DEFAULT_LENGTH)
    if not isinstance(length, int) or isinstance(length, bool) or not 1 <= length <= LOOKUP_MAX_LENGTH:
        raise ActionArgumentError(f"{LOOKUP_TOOL}: length must be an integer in 1..{LOOKUP_MAX_LENGTH}")
    return lookup_digits(key, length)
