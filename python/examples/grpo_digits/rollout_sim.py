"""Groups of responses sampled from a TinyLM on digits prompts, in process, the way the reference
engine generates them (KV cache, temperature 1, stop at EOS or max_new_tokens), with the logprob of
every sampled token and the digits task's reward. What offline_check.py trains on instead of the
experience buffer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from laminar.testing import KVCache, TinyLM
from laminar.testing.digits import EOS, Prompt, reward


@dataclass(frozen=True)
class Sample:
    """One response: the record a rollout would write (tokens = prompt + response)."""

    tokens: np.ndarray
    logprobs: np.ndarray
    """One per token; 0 on the prompt's tokens, as engines store none for them."""
    prompt_length: int
    reward: float
    group_id: str


@torch.no_grad()
def sample_groups(model: TinyLM, prompts: Sequence[Prompt], group_size: int, generator: torch.Generator, group_prefix: str = "g") -> list[Sample]:
    """``group_size`` responses to each prompt, sampled together in one KV cache. Group ids are
    ``<group_prefix><index of the prompt>``."""
    model.eval()
    jobs = [(g, p) for g, p in enumerate(prompts) for _ in range(group_size)]
    cache = KVCache(model.config, len(jobs))
    last_logits = torch.stack([model.prefill(torch.tensor(p.input_ids), cache, slot) for slot, (_, p) in enumerate(jobs)])
    positions = torch.tensor([len(p.input_ids) for _, p in jobs])
    budgets = [p.max_new_tokens for _, p in jobs]
    out_tokens: list[list[int]] = [[] for _ in jobs]
    out_logprobs: list[list[float]] = [[] for _ in jobs]
    live = [i for i in range(len(jobs)) if budgets[i] > 0]
    logits = last_logits
    while live:
        logp = torch.log_softmax(logits.float(), dim=-1)
        drawn = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        chosen = logp.gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
        still = []
        for row, i in enumerate(live):
            token = int(drawn[row])
            out_tokens[i].append(token)
            out_logprobs[i].append(float(chosen[row]))
            if token != EOS and len(out_tokens[i]) < budgets[i]:
                still.append((row, i))
        if not still:
            break
        rows = torch.tensor([row for row, _ in still])
        live = [i for _, i in still]
        slots = torch.tensor(live)
        pos = positions[slots]
        logits = model.decode(drawn[rows], slots, pos, cache)
        positions[slots] = pos + 1
    samples = []
    for i, (g, p) in enumerate(jobs):
        prompt = np.asarray(p.input_ids, dtype=np.int64)
        samples.append(
            Sample(
                tokens=np.concatenate([prompt, np.asarray(out_tokens[i], dtype=np.int64)]),
                logprobs=np.concatenate([np.zeros(len(prompt), dtype=np.float32), np.asarray(out_logprobs[i], dtype=np.float32)]),
                prompt_length=len(prompt),
                reward=reward(out_tokens[i], p.target),
                group_id=f"{group_prefix}{g}",
            )
        )
    return samples
