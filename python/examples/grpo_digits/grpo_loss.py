"""The GRPO objective, pure: group-normalised advantages, the logprobs a policy gives to the
response tokens of packed sequences, and the clipped surrogate loss against behaviour logprobs.

No I/O here: the trainer (trainer.py) and the offline check (offline_check.py) both call these, and
python/tests/test_grpo_trainer.py tests them on hand-made numbers.

Layout shared by the functions: a batch of B sequences (prompt + response tokens) right-padded to
L tokens is a ``[B, L]`` int64 tensor; everything per predicted token is ``[B, L - 1]``, position
``t`` standing for token ``t + 1`` predicted from tokens ``0..t``. ``mask[b, t]`` is 1 where token
``t + 1`` of sequence ``b`` is a response token (the only ones the loss sees), 0 elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import torch

#: Added to a group's standard deviation before dividing: a group whose rewards differ by
#: ~1e-6 does not blow up into huge advantages.
ADVANTAGE_EPS = 1e-6
#: |log ratio| is capped before exp(): a trajectory many versions old whose tokens the policy now
#: finds far likelier or unlikelier gives a large but finite ratio (the clip then decides).
MAX_LOG_RATIO = 20.0


def group_advantages(rewards: Sequence[float], group_ids: Sequence[str], eps: float = ADVANTAGE_EPS) -> np.ndarray:
    """GRPO's advantage of each sample: ``(r - mean(group)) / (std(group) + eps)``, the mean and
    the (unbiased, as verl computes it) standard deviation over the samples of its group in this
    batch. A group whose rewards are all equal (every sample right, or every one wrong), and a
    group of one sample, gives exactly 0: it says nothing about which response is better.
    Returns float64, one per sample, in the input's order."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or len(group_ids) != r.size:
        raise ValueError(f"rewards ({r.shape}) and group_ids ({len(group_ids)}) must be one entry per sample")
    members: Dict[str, list] = {}
    for i, g in enumerate(group_ids):
        members.setdefault(g, []).append(i)
    out = np.zeros_like(r)
    for idx in members.values():
        values = r[idx]
        if len(idx) < 2 or values.max() == values.min():
            continue  # no contrast inside the group: zero, not 0/eps noise
        out[idx] = (values - values.mean()) / (values.std(ddof=1) + eps)
    return out


def pad_sequences(
    sequences: Sequence[np.ndarray], prompt_lengths: Sequence[int], pad_id: int = 0, loss_masks: Optional[Sequence[np.ndarray]] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packs sequences (prompt + response token ids) into ``tokens [B, L]`` (right-padded with
    ``pad_id``, L at least 2) and the response mask ``[B, L - 1]`` of the module's layout. A
    response token with nothing before it (prompt length 0) cannot be predicted and is left out;
    a sequence without response tokens has an all-zero mask row (it still counts in its group's
    advantages). ``loss_masks`` (one per sequence, per token: 1 generated, 0 prompt and
    observation, as the sampler gives them) leaves a multi-turn response's observations out of
    the loss: the model did not generate them."""
    if len(sequences) != len(prompt_lengths) or not sequences:
        raise ValueError("one prompt length per sequence, at least one sequence")
    width = max(2, max(len(s) for s in sequences))
    tokens = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width - 1), dtype=torch.float32)
    for b, (seq, p) in enumerate(zip(sequences, prompt_lengths)):
        if not 0 <= p <= len(seq):
            raise ValueError(f"sequence {b}: prompt length {p} outside 0..{len(seq)}")
        tokens[b, : len(seq)] = torch.as_tensor(np.asarray(seq, dtype=np.int64))
        mask[b, max(p, 1) - 1 : len(seq) - 1] = 1.0
        if loss_masks is not None:
            if len(loss_masks[b]) != len(seq):
                raise ValueError(f"sequence {b}: {len(seq)} tokens but a loss mask of {len(loss_masks[b])}")
            # Entry t predicts token t + 1: it counts when that token was generated.
            mask[b, : len(seq) - 1] *= torch.as_tensor(np.asarray(loss_masks[b][1:], dtype=np.float32))
    return tokens, mask


def shift_behaviour_logprobs(logprobs: Sequence[np.ndarray], width: int) -> torch.Tensor:
    """The stored per-token logprobs (one per token, as a record holds them) in the module's
    ``[B, width - 1]`` layout: entry ``t`` is the logprob of token ``t + 1``. Prompt positions
    carry whatever the engine stored there (usually 0); the mask leaves them out."""
    out = torch.zeros((len(logprobs), max(width - 1, 0)), dtype=torch.float32)
    for b, lp in enumerate(logprobs):
        n = len(lp)
        if n > 1:
            out[b, : n - 1] = torch.as_tensor(np.asarray(lp[1:], dtype=np.float32))
    return out


def token_logprobs(policy: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """``[B, L - 1]``: log p(token t + 1 | tokens 0..t) under ``policy`` (a module mapping
    ``[B, T]`` ids to ``[B, T, V]`` logits, causal), at temperature 1 as the engine samples."""
    logits = policy(tokens[:, :-1]).float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)


@dataclass(frozen=True)
class LossParts:
    """The loss to step on and what it is made of (floats, for the metrics)."""

    loss: torch.Tensor
    policy_loss: float
    kl: float
    """Mean k3 estimate of KL(policy || reference) over response tokens (0 without a reference)."""
    clip_fraction: float
    """Share of response tokens whose ratio the clip cut."""
    ratio_mean: float
    behaviour_kl: float
    """Mean (behaviour logprob - policy logprob) over response tokens: how far the policy has
    moved from the engines that generated the batch (grows with staleness)."""


def grpo_loss(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
    reference_logprobs: Optional[torch.Tensor] = None,
    kl_coef: float = 0.0,
) -> LossParts:
    """The GRPO loss with a PPO-style clipped importance ratio, averaged over every response
    token of the batch (the token-mean of verl and DAPO; with equal lengths it is GRPO's
    per-sequence mean).

    ``ratio = exp(logprobs - behaviour_logprobs)``: the behaviour logprobs are those the engine
    stored when it sampled the tokens, possibly several versions ago (asynchronous training), so
    the ratio corrects for the policy having moved since, and the clip to ``[1 - clip, 1 + clip]``
    keeps a step from following a stale trajectory too far. Per token the objective is
    ``min(ratio * A, clip(ratio) * A)`` with ``A`` the sample's advantage; the loss is its
    negative. With ``kl_coef > 0`` and ``reference_logprobs`` (a frozen reference policy's), the
    k3 estimator ``exp(ref - lp) - (ref - lp) - 1`` times ``kl_coef`` is added.

    Shapes: ``[B, T]`` for the logprobs and the mask, ``[B]`` for the advantages.
    """
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    if kl_coef and reference_logprobs is None:
        raise ValueError("kl_coef > 0 needs reference_logprobs")
    mask = mask.to(logprobs.dtype)
    tokens = mask.sum().clamp(min=1.0)
    log_ratio = (logprobs - behaviour_logprobs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv
    per_token = -torch.minimum(unclipped, clipped)
    policy_loss = (per_token * mask).sum() / tokens
    loss = policy_loss
    kl_value = 0.0
    if reference_logprobs is not None and kl_coef:
        delta = reference_logprobs - logprobs
        kl = ((torch.exp(delta) - delta - 1.0) * mask).sum() / tokens
        loss = loss + kl_coef * kl
        kl_value = float(kl.detach())
    with torch.no_grad():
        cut = ((clipped < unclipped).to(mask.dtype) * mask).sum() / tokens
        ratio_mean = (ratio * mask).sum() / tokens
        behaviour_kl = (-log_ratio * mask).sum() / tokens
    return LossParts(
        loss=loss,
        policy_loss=float(policy_loss.detach()),
        kl=kl_value,
        clip_fraction=float(cut),
        ratio_mean=float(ratio_mean),
        behaviour_kl=float(behaviour_kl),
    )
