"""The digits task: a small verifiable task for laminar's demo, tests and benchmarks.

A prompt asks to reverse or repeat a string of decimal digits; the reward says how much of the
answer is right. Everything is token ids over a 16-id character vocabulary (`VOCAB`):

    0 PAD   1 BOS   2 EOS   3 SEP   4..13 the digits '0'..'9'   14 'reverse'   15 'repeat'

- prompt ids: `[BOS, <task>, d1, ..., dn, SEP]`, e.g. "reverse 3141" → `[1, 14, 7, 5, 8, 5, 3]`;
- target ids: the digits' ids in the answer's order, without EOS: reverse 3141 → "1413" →
  `[5, 8, 5, 7]`; repeat 3141 → "3141" → `[7, 5, 8, 5]`;
- the model is asked for `max_new_tokens = len(target) + 1` tokens (room for the closing EOS).

Reward rule (the TypeScript rollout agent computes the same from `payload.target`, so this is its
definition): the response is the generated ids, cut at its first EOS (the EOS and everything
after it are dropped; PAD is not special). With T = len(target) ≥ 1,

    reward = |{ i : 0 <= i < T, i < len(response), response[i] == target[i] }| / T

so a missing position (response shorter than the target, or ended early by EOS) counts wrong, and
tokens beyond T change nothing. The reward is in [0, 1]; 1 means every target position right.

Prompt pool lines (`python -m laminar.testing.digits prompts --count N --seed S --n 8`) are
laminar's prompt-pool JSONL, one prompt per line:

    {"id": "digits-7-0", "payload": {"input_ids": [1, 14, 7, 5, 8, 5, 3], "target": [5, 8, 5, 7],
     "max_new_tokens": 5, "task": "reverse", "digits": "3141"}, "n": 8}
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol, Sequence, TextIO

from .. import error_codes
from ..errors import LaminarError

PAD = 0
BOS = 1
EOS = 2
SEP = 3
DIGIT_BASE = 4
"""The id of the digit '0'; digit d has id DIGIT_BASE + d."""
TASK_IDS = {"reverse": 14, "repeat": 15}
TASKS = tuple(TASK_IDS)
VOCAB_SIZE = 16

VOCAB: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<sep>", *"0123456789", "reverse", "repeat")
"""The text of each id, for display."""

DEFAULT_MIN_DIGITS = 2
DEFAULT_MAX_DIGITS = 6


def encode_digits(digits: str) -> list[int]:
    """The ids of a digit string."""
    if not digits or not digits.isascii() or not digits.isdigit():
        raise LaminarError(error_codes.INVALID_ARG, f"a digit string must be one or more of 0-9, got {digits!r}")
    return [DIGIT_BASE + int(c) for c in digits]


def answer(task: str, digits: str) -> str:
    """The correct answer to a task on a digit string."""
    if task == "reverse":
        return digits[::-1]
    if task == "repeat":
        return digits
    raise LaminarError(error_codes.INVALID_ARG, f"unknown task {task!r}; tasks are {', '.join(TASKS)}")


@dataclass(frozen=True)
class Prompt:
    """One task instance as token ids."""

    task: str
    digits: str
    input_ids: list[int]
    target: list[int]

    @property
    def max_new_tokens(self) -> int:
        return len(self.target) + 1

    def payload(self) -> dict[str, object]:
        """The prompt-pool payload the rollout agent reads (`input_ids`, `target`, `max_new_tokens`)."""
        return {"input_ids": self.input_ids, "target": self.target, "max_new_tokens": self.max_new_tokens, "task": self.task, "digits": self.digits}


def make_prompt(task: str, digits: str) -> Prompt:
    """The prompt for `task` on `digits`, e.g. make_prompt("reverse", "3141")."""
    target = encode_digits(answer(task, digits))
    return Prompt(task=task, digits=digits, input_ids=[BOS, TASK_IDS[task], *encode_digits(digits), SEP], target=target)


def random_prompts(
    count: int, seed: int, min_digits: int = DEFAULT_MIN_DIGITS, max_digits: int = DEFAULT_MAX_DIGITS, tasks: Sequence[str] = TASKS
) -> Iterator[Prompt]:
    """`count` prompts drawn from `random.Random(seed)`: a task, a length in [min_digits, max_digits], the digits."""
    if count < 0:
        raise LaminarError(error_codes.INVALID_ARG, f"count must be >= 0, got {count}")
    if not 1 <= min_digits <= max_digits:
        raise LaminarError(error_codes.INVALID_ARG, f"need 1 <= min_digits <= max_digits, got {min_digits} and {max_digits}")
    unknown = [t for t in tasks if t not in TASK_IDS]
    if unknown or not tasks:
        raise LaminarError(error_codes.INVALID_ARG, f"tasks must be among {', '.join(TASKS)}, got {list(tasks)}")
    rng = random.Random(seed)
    for _ in range(count):
        task = rng.choice(list(tasks))
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(min_digits, max_digits)))
        yield make_prompt(task, digits)


def response_until_eos(response: Sequence[int]) -> list[int]:
    """The response cut at its first EOS (EOS excluded)."""
    out: list[int] = []
    for token in response:
        if token == EOS:
            break
        out.append(int(token))
    return out


def reward(response: Sequence[int], target: Sequence[int]) -> float:
    """The fraction of target positions the response got right (the rule of the module docstring)."""
    if len(target) == 0:
        raise LaminarError(error_codes.INVALID_ARG, "a target has at least one token")
    cut = response_until_eos(response)
    right = sum(1 for i, t in enumerate(target) if i < len(cut) and cut[i] == t)
    return right / len(target)


def decode(ids: Sequence[int]) -> str:
    """A readable rendering of ids ("<bos> reverse 3 1 4 1 <sep>"), for logs."""
    return " ".join(VOCAB[i] if 0 <= i < VOCAB_SIZE else f"<{i}>" for i in ids)


class _HasPayload(Protocol):
    def payload(self) -> dict[str, object]: ...


def write_prompt_lines(out: TextIO, prompts: Iterable[_HasPayload], seed: int, n: int, task: str = "digits") -> int:
    """Writes prompt-pool JSONL lines (ids `<task>-<seed>-<index>`); returns how many."""
    count = 0
    for index, prompt in enumerate(prompts):
        out.write(json.dumps({"id": f"{task}-{seed}-{index}", "payload": prompt.payload(), "n": n}, separators=(",", ":")) + "\n")
        count += 1
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar.testing.digits", description="The digits task: prompt-pool JSONL for laminar.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prompts", help="write N prompts as laminar prompt-pool JSONL lines on stdout")
    p.add_argument("--count", type=int, required=True, help="how many prompts")
    p.add_argument("--seed", type=int, default=0, help="random seed (also part of each prompt id)")
    p.add_argument("--n", type=int, default=8, help="samples per prompt (the group size), written as each line's n")
    p.add_argument("--min-digits", type=int, default=DEFAULT_MIN_DIGITS)
    p.add_argument("--max-digits", type=int, default=DEFAULT_MAX_DIGITS)
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks among reverse,repeat")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n must be >= 1, got {args.n}")
    try:
        prompts = random_prompts(args.count, args.seed, args.min_digits, args.max_digits, [t for t in args.tasks.split(",") if t])
        write_prompt_lines(sys.stdout, prompts, args.seed, args.n)
    except LaminarError as err:
        parser.error(err.message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
