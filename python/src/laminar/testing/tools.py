"""The lookup task: a digits task whose answer must be fetched with a tool call and copied.

A prompt names a key (a short digit string); the answer is the value a `lookup` tool returns for
it, which the model cannot compute (digits of a hash, see `lookup_value`). The model
learns to call the tool, read its observation and copy it. The vocabulary is the digits task's
16 ids (`laminar.testing.digits.VOCAB`) followed by six ids of the tool protocol, a token-level
Hermes layout (`<tool_call> name args </tool_call>`; the observation comes back in the tool role
as `<tool> content </tool>`, the reference engine's chat template):

    16 <tool_call>   17 </tool_call>   18 <tool>   19 </tool>   20 lookup   21 error

- prompt ids: `[BOS, lookup, k1, ..., kn, SEP]`;
- the ideal episode: turn 1 generates the call `[<tool_call>, lookup, k1, ..., kn, </tool_call>]`
  (generation stops at `</tool_call>`), the rollout agent executes the action and appends the
  observation `[<tool>, v1, ..., v4, </tool>]` (masked out of the loss), turn 2 generates
  `[v1, ..., v4, EOS]` (a value has 4 digits whatever the key's length);
- a call the tool refuses (a malformed call, an unknown key) is answered `[<tool>, error, </tool>]`.

Reward rule (the TypeScript `tool-match` reward of the rollout agent computes the same; this is
its definition). With the response's generated turns g1, g2, ... (observations excluded), each cut
at its first EOS, the call target C = `payload.call` and the answer target T = `payload.target`:

    call   = |{ i < |C| : i < |g1| and g1[i] == C[i] }| / |C|
    answer = |{ i < |T| : i < |g2| and g2[i] == T[i] }| / |T|     (0 without a second turn)
    reward = (call + answer) / 2

so the call earns half the reward position by position (a random model gets a gradient from the
first token on), and the answer the other half once the model calls; 1 means a perfect episode.

Prompt pool lines: `python -m laminar.testing.tools prompts --count N --seed S --n 8`.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from typing import Iterator, Sequence, TextIO

from .. import error_codes
from ..actions.lookup import lookup_digits
from ..errors import LaminarError
from . import digits
from .digits import BOS, EOS, SEP, VOCAB, encode_digits, response_until_eos

TOOL_CALL = 16
TOOL_CALL_END = 17
TOOL = 18
TOOL_END = 19
LOOKUP = 20
ERROR = 21
VOCAB_SIZE = 22

TOOLS_VOCAB: tuple[str, ...] = (*VOCAB, "<tool_call>", "</tool_call>", "<tool>", "</tool>", "lookup", "error")
"""The text of each id: the digits vocabulary, then the tool protocol's."""

TOOL_NAMES = {"lookup": LOOKUP}
"""Tool name → its id (the token after `<tool_call>`)."""

STOP_TOKEN_IDS = (EOS, TOOL_CALL_END)
"""A turn ends at EOS (the answer) or at `</tool_call>` (a call, executed before the next turn)."""

MAX_TURNS = 3
DEFAULT_KEY_DIGITS = 3
VALUE_DIGITS = 4
"""Digits of a looked-up value (the lookup tool's default length)."""


def lookup_value(key: str, length: int = VALUE_DIGITS) -> str:
    """The `lookup` tool's answer (`laminar.actions.lookup_digits`, the same function as the action
    workers' src/actions/executors/lookup.ts): digit i is FNV-1a-32(utf8(key + "#" + i)) mod 10.
    The model cannot compute it from the key."""
    encode_digits(key)  # refuses a key that is not digits
    return lookup_digits(key, length)


def call_ids(tool: str, key: str) -> list[int]:
    """The ids of a call: `[<tool_call>, <the tool's id>, key digits..., </tool_call>]`."""
    if tool not in TOOL_NAMES:
        raise LaminarError(error_codes.INVALID_ARG, f"unknown tool {tool!r}; tools are {', '.join(TOOL_NAMES)}")
    return [TOOL_CALL, TOOL_NAMES[tool], *encode_digits(key), TOOL_CALL_END]


def observation_ids(content: str) -> list[int]:
    """The tool role of the reference engine's chat template: `[<tool>, ..., </tool>]`, where the
    content is a digit string or the word `error` (a failed or refused call)."""
    inner = [ERROR] if content == "error" else encode_digits(content)
    return [TOOL, *inner, TOOL_END]


@dataclass(frozen=True)
class Prompt:
    key: str
    input_ids: list[int]
    call: list[int]
    target: list[int]

    @property
    def max_new_tokens(self) -> int:
        """Generated tokens over all turns: the call, the answer and its EOS."""
        return len(self.call) + len(self.target) + 1

    def payload(self) -> dict[str, object]:
        """The prompt-pool payload the rollout agent reads."""
        return {
            "input_ids": self.input_ids,
            "call": self.call,
            "target": self.target,
            "max_new_tokens": self.max_new_tokens,
            "max_turns": MAX_TURNS,
            "stop_token_ids": list(STOP_TOKEN_IDS),
            "task": "lookup",
            "key": self.key,
        }


def make_prompt(key: str) -> Prompt:
    return Prompt(key=key, input_ids=[BOS, LOOKUP, *encode_digits(key), SEP], call=call_ids("lookup", key), target=encode_digits(lookup_value(key)))


def random_prompts(count: int, seed: int, digits: int = DEFAULT_KEY_DIGITS) -> Iterator[Prompt]:
    """`count` prompts with random `digits`-digit keys drawn from `random.Random(seed)`."""
    if count < 0:
        raise LaminarError(error_codes.INVALID_ARG, f"count must be >= 0, got {count}")
    if digits < 1:
        raise LaminarError(error_codes.INVALID_ARG, f"digits must be >= 1, got {digits}")
    rng = random.Random(seed)
    for _ in range(count):
        yield make_prompt("".join(rng.choice("0123456789") for _ in range(digits)))


def _matched(turn: Sequence[int], target: Sequence[int]) -> float:
    cut = response_until_eos(turn)
    return sum(1 for i, t in enumerate(target) if i < len(cut) and cut[i] == t) / len(target)


def reward(generated_turns: Sequence[Sequence[int]], call: Sequence[int], target: Sequence[int]) -> float:
    """The rule of the module docstring, from the generated turns in order (observations left out)."""
    if len(call) == 0 or len(target) == 0:
        raise LaminarError(error_codes.INVALID_ARG, "the call and the answer target have at least one token each")
    first = _matched(generated_turns[0], call) if generated_turns else 0.0
    second = _matched(generated_turns[1], target) if len(generated_turns) > 1 else 0.0
    return (first + second) / 2


def decode(ids: Sequence[int]) -> str:
    """A readable rendering of ids, for logs."""
    return " ".join(TOOLS_VOCAB[i] if 0 <= i < VOCAB_SIZE else f"<{i}>" for i in ids)


def write_prompt_lines(out: TextIO, prompts: Iterator[Prompt], seed: int, n: int) -> int:
    """Writes prompt-pool JSONL lines (ids `lookup-<seed>-<index>`); returns how many."""
    return digits.write_prompt_lines(out, prompts, seed, n, task="lookup")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar.testing.tools", description="The lookup task: prompt-pool JSONL for laminar.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prompts", help="write N prompts as laminar prompt-pool JSONL lines on stdout")
    p.add_argument("--count", type=int, required=True, help="how many prompts")
    p.add_argument("--seed", type=int, default=0, help="random seed (also part of each prompt id)")
    p.add_argument("--n", type=int, default=8, help="samples per prompt (the group size)")
    p.add_argument("--digits", type=int, default=DEFAULT_KEY_DIGITS, help="digits of each key (and of its value)")
    v = sub.add_parser("lookup", help="print the lookup tool's value of a key")
    v.add_argument("key")
    args = parser.parse_args(argv)
    try:
        if args.command == "lookup":
            print(lookup_value(args.key))
            return 0
        if args.n < 1:
            parser.error(f"--n must be >= 1, got {args.n}")
        write_prompt_lines(sys.stdout, random_prompts(args.count, args.seed, args.digits), args.seed, args.n)
    except LaminarError as err:
        parser.error(err.message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
