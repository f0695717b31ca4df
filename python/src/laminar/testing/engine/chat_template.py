"""The reference engine's tokenizer and chat template, over the task vocabularies.

Real engines turn chat messages into token ids with the model's chat template (vLLM's
`/tokenize` takes `messages`; SGLang and vLLM both apply the template of the model's tokenizer).
The rollout agent needs exactly one piece of this for multi-turn episodes: the ids of a tool's
observation in the tool role, to append after a tool call. The reference engine's template:

    user       content ids, then <sep>       (with add_special_tokens: <bos> first)
    assistant  content ids, then <eos>
    tool       <tool> content ids </tool>    (the lookup task's vocabulary only)

`add_generation_prompt` adds nothing (the model answers right after `<sep>` or `</tool>`).
A vocabulary is chosen by the model's `vocab_size`: 16 is the digits task's, 22 the lookup task's
(a superset: the same first 16 ids).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ..digits import BOS, EOS, SEP, VOCAB, VOCAB_SIZE
from ..tools import TOOL, TOOL_END, TOOLS_VOCAB
from ..tools import VOCAB_SIZE as TOOLS_VOCAB_SIZE
from .protocol import InvalidRequest, SchemaError

ROLES = ("user", "assistant", "tool")


def vocabulary_of(vocab_size: int) -> Optional[tuple[str, ...]]:
    """The words of a model's ids, or None when the engine knows no vocabulary of that size."""
    if vocab_size == VOCAB_SIZE:
        return VOCAB
    if vocab_size == TOOLS_VOCAB_SIZE:
        return TOOLS_VOCAB
    return None


def tokenize_text(text: str, add_special_tokens: bool, vocab: tuple[str, ...]) -> list[int]:
    """Whitespace-separated words of `vocab`, or runs of its one-character words (digits)."""
    ids = [BOS] if add_special_tokens else []
    for word in text.split():
        if word in vocab:
            ids.append(vocab.index(word))
            continue
        for char in word:
            if char not in vocab:
                raise InvalidRequest(f"{char!r} is not in the vocabulary")
            ids.append(vocab.index(char))
    return ids


def parse_messages(raw: Any) -> list[dict[str, str]]:
    """`messages` of a /tokenize body: a non-empty list of `{"role", "content"}` with string content."""
    if not isinstance(raw, list) or not raw:
        raise SchemaError("messages must be a non-empty list of {role, content} objects")
    out: list[dict[str, str]] = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise SchemaError(f"messages[{i}] must be an object with string role and content, got {json.dumps(m)}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def chat_template_ids(messages: list[dict[str, str]], vocab: tuple[str, ...], add_special_tokens: bool, add_generation_prompt: bool) -> list[int]:
    """The ids of `messages` through the template of the module docstring."""
    del add_generation_prompt  # the template's generation prompt is empty
    ids = [BOS] if add_special_tokens else []
    for i, m in enumerate(messages):
        role, content = m["role"], tokenize_text(m["content"], False, vocab)
        if role == "user":
            ids += [*content, SEP]
        elif role == "assistant":
            ids += [*content, EOS]
        elif role == "tool":
            if vocab is not TOOLS_VOCAB:
                raise InvalidRequest("this model's vocabulary has no tool role (the lookup task's has: vocab_size 22)")
            ids += [TOOL, *content, TOOL_END]
        else:
            raise InvalidRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
    return ids
