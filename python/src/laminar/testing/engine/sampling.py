"""Token sampling of the reference engine: temperature, top-k, top-p, and seeded draws.

A token is drawn by the Gumbel-max trick, as SGLang's `multinomial_with_seed` does: add Gumbel
noise to the (truncated) log-probabilities and take the argmax. With a `sampling_seed` the noise of
vocabulary column j for the token at absolute sequence position p (its index in prompt + output)
is a pure function of (seed, p, j): a request resent as prompt + the tokens generated so far draws
the same next tokens, which is what laminar's repack relies on. Without a seed the noise comes from
the engine's own generator (`--seed`).

The logprob reported for a token is `log_softmax(logits / temperature)[token]`, before top-k/top-p
truncation (SGLang's default). Greedy decoding (temperature below 1e-6, or top_k = 1) takes the
argmax of the logits and reports `log_softmax(logits)[token]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

GREEDY_TEMPERATURE = 1e-6
"""Below this temperature sampling is greedy (SGLang's _SAMPLING_EPS)."""

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@dataclass(frozen=True)
class SamplingParams:
    """The sampling parameters of one request (SGLang's names; defaults as upstream)."""

    max_new_tokens: Optional[int] = 128
    """None: until the context is full."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    """-1: the whole vocabulary."""
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    ignore_eos: bool = False
    sampling_seed: Optional[int] = None

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def seeded_uniforms(seed: int, position: int, vocab_size: int) -> np.ndarray:
    """Uniforms in (0, 1), one per vocabulary column, that depend only on (seed, position, column)."""
    s = _mix(np.array([seed & _MASK64], dtype=np.uint64) + _GOLDEN)
    p = _mix(s + np.array([position & _MASK64], dtype=np.uint64))
    h = _mix(p + np.arange(vocab_size, dtype=np.uint64))
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def _gumbel(uniforms: np.ndarray) -> np.ndarray:
    return -np.log(-np.log(uniforms))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - np.max(x)
    return shifted - math.log(float(np.sum(np.exp(shifted))))


def _truncate(logprobs: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """-inf outside the top-k tokens and outside the smallest set whose probability reaches top_p."""
    if not 0 < top_k < len(logprobs) and top_p >= 1.0:
        return logprobs
    out = logprobs.copy()
    order = np.argsort(-logprobs, kind="stable")
    if 0 < top_k < len(order):
        out[order[top_k:]] = -np.inf
    if top_p < 1.0:
        probs = np.exp(out[order])
        before = np.cumsum(probs) - probs
        # As SGLang: the cumulative sum after top-k, not renormalised; the first token always stays.
        out[order[before > top_p]] = -np.inf
    return out


def sample(logits: np.ndarray, params: SamplingParams, position: int, rng: np.random.Generator) -> tuple[int, float]:
    """Draws the token at absolute `position` from one row of logits; returns (token, logprob)."""
    logits = logits.astype(np.float64, copy=False)
    if params.greedy:
        token = int(np.argmax(logits))
        return token, float(_log_softmax(logits)[token])
    logprobs = _log_softmax(logits / params.temperature)
    truncated = _truncate(logprobs, params.top_k, params.top_p)
    if params.sampling_seed is not None:
        uniforms = seeded_uniforms(params.sampling_seed, position, len(logits))
    else:
        uniforms = rng.random(len(logits)).clip(1e-300, 1 - 1e-16)
    token = int(np.argmax(truncated + _gumbel(uniforms)))
    return token, float(logprobs[token])
