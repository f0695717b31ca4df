"""What one GRPO step trains on, as tensors: built from a sampled `laminar.data.Batch` (the
trainer) or from lists of sequences (the offline check), in the layout of grpo_loss.py.

A sampler batch lives in a shared-memory file that goes back to the service at ``release()``:
`TrainingBatch.from_sampler_batch` copies what the step needs out of it (a few KiB for the digits
task), so the batch can be released before the step runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from grpo_loss import group_advantages, pad_sequences, shift_behaviour_logprobs


@dataclass(frozen=True)
class TrainingBatch:
    """B sequences of whole GRPO groups, padded; ``[B, L - 1]`` tensors per predicted token."""

    tokens: torch.Tensor
    """``[B, L]`` int64: prompt + response ids, right-padded."""
    mask: torch.Tensor
    """``[B, L - 1]``: 1 where the predicted token is a response token the model generated
    (a multi-turn response's observations are 0: masked out of the loss)."""
    behaviour_logprobs: torch.Tensor
    """``[B, L - 1]``: the logprob the generating engine gave each token (entry t: token t + 1)."""
    advantages: torch.Tensor
    """``[B]``: group-normalised rewards (grpo_loss.group_advantages)."""
    rewards: np.ndarray
    group_ids: list[str]
    weight_versions: np.ndarray
    """The version that generated each sequence."""
    completed_at: np.ndarray
    """When each sequence completed, epoch ms (0 where unknown)."""

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def groups(self) -> int:
        return len(set(self.group_ids))

    @property
    def response_tokens(self) -> int:
        return int(self.mask.sum())

    @classmethod
    def build(
        cls,
        sequences: Sequence[np.ndarray],
        logprobs: Sequence[np.ndarray],
        prompt_lengths: Sequence[int],
        rewards: Sequence[float],
        group_ids: Sequence[str],
        weight_versions: Sequence[int],
        completed_at: Sequence[float] | None = None,
        loss_masks: Sequence[np.ndarray] | None = None,
    ) -> "TrainingBatch":
        """From one entry per sequence: its ids (prompt + response), its stored logprobs (one per
        id), its prompt length, reward, group id and generating version."""
        if not len(sequences) == len(logprobs) == len(prompt_lengths) == len(rewards) == len(group_ids) == len(weight_versions):
            raise ValueError("one entry per sequence in every argument")
        for b, (seq, lp) in enumerate(zip(sequences, logprobs)):
            if len(seq) != len(lp):
                raise ValueError(f"sequence {b}: {len(seq)} tokens but {len(lp)} logprobs")
        tokens, mask = pad_sequences(sequences, prompt_lengths, loss_masks=loss_masks)
        behaviour = shift_behaviour_logprobs(logprobs, tokens.shape[1])
        advantages = torch.as_tensor(group_advantages(rewards, group_ids), dtype=torch.float32)
        done = np.zeros(len(sequences)) if completed_at is None else np.asarray(completed_at, dtype=np.float64)
        return cls(
            tokens=tokens,
            mask=mask,
            behaviour_logprobs=behaviour,
            advantages=advantages,
            rewards=np.asarray(rewards, dtype=np.float64),
            group_ids=list(group_ids),
            weight_versions=np.asarray(weight_versions, dtype=np.int64),
            completed_at=done,
        )

    @classmethod
    def from_sampler_batch(cls, batch: Any) -> "TrainingBatch":
        """From a `laminar.data.Batch` (copies; the batch may be released afterwards). Each
        record's tokens are its prompt and response, ``prompt_lengths`` says where the response
        starts, and ``logprobs`` are the engine's, one per token."""
        count = len(batch)
        sequences = [np.array(batch.item(i).tokens, dtype=np.int64) for i in range(count)]
        logprobs = [np.array(batch.item(i).logprobs, dtype=np.float32) for i in range(count)]
        # Per token: 1 generated, 0 prompt and observation (tool results of multi-turn records).
        loss_masks = [np.array(batch.item(i).loss_mask, dtype=np.uint8) for i in range(count)]
        return cls.build(
            sequences=sequences,
            logprobs=logprobs,
            prompt_lengths=[int(p) for p in batch.prompt_lengths],
            rewards=np.array(batch.rewards, dtype=np.float64),
            group_ids=list(batch.group_ids),
            weight_versions=np.array(batch.weight_versions, dtype=np.int64),
            completed_at=np.array(batch.completed_at, dtype=np.float64),
            loss_masks=loss_masks,
        )
