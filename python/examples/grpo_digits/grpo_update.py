"""One GRPO step on a `TrainingBatch`: a few optimiser updates on the clipped loss, as PPO does
with one batch (``updates``), the gradient norm capped. Shared by the trainer and the offline
check, so that what the offline check tunes is what the trainer runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from grpo_loss import grpo_loss, token_logprobs
from training_batch import TrainingBatch


@dataclass(frozen=True)
class UpdateOptions:
    clip: float = 0.2
    """PPO clip range of the importance ratio: [1 - clip, 1 + clip]."""
    updates: int = 4
    """Optimiser updates per batch (PPO epochs). The first sees ratio = policy / behaviour as the
    engines made it; the later ones see the policy after the earlier updates, and the clip holds
    them near the behaviour policy."""
    max_grad_norm: float = 1.0
    kl_coef: float = 0.0
    """Weight of the k3 KL term against the reference (initial) policy; 0 turns it off."""


@dataclass(frozen=True)
class UpdateStats:
    loss: float
    """The loss of the first update (before this step moved the policy)."""
    kl: float
    clip_fraction: float
    """Clipped share of response tokens, mean over the updates."""
    behaviour_kl: float
    """How far the policy was from the behaviour logprobs at the first update."""
    grad_norm: float
    """Gradient norm before capping, mean over the updates."""


def grpo_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainingBatch,
    options: UpdateOptions,
    reference: Optional[torch.nn.Module] = None,
) -> UpdateStats:
    """Runs ``options.updates`` optimiser steps of the GRPO loss on ``batch``. A batch without
    any advantage (every group all-equal) still counts as a step but moves nothing."""
    model.train()
    reference_logprobs = None
    if options.kl_coef:
        if reference is None:
            raise ValueError("kl_coef > 0 needs a reference model")
        with torch.no_grad():
            reference_logprobs = token_logprobs(reference, batch.tokens)
    first = None
    clip_fractions = []
    grad_norms = []
    for _ in range(options.updates):
        logprobs = token_logprobs(model, batch.tokens)
        parts = grpo_loss(
            logprobs, batch.behaviour_logprobs, batch.advantages, batch.mask, clip=options.clip, reference_logprobs=reference_logprobs, kl_coef=options.kl_coef
        )
        first = first or parts
        clip_fractions.append(parts.clip_fraction)
        optimizer.zero_grad(set_to_none=True)
        parts.loss.backward()
        grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), options.max_grad_norm)))
        optimizer.step()
    assert first is not None
    return UpdateStats(
        loss=first.policy_loss + options.kl_coef * first.kl,
        kl=first.kl,
        clip_fraction=sum(clip_fractions) / len(clip_fractions),
        behaviour_kl=first.behaviour_kl,
        grad_norm=sum(grad_norms) / len(grad_norms),
    )
