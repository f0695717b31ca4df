"""The reference engine's sampling (laminar.testing.engine.sampling), without a server: seeded noise
depends on (seed, position, column) only, truncation keeps what top-k/top-p say, the reported
logprob is the temperature-scaled log-softmax."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laminar.testing.engine.sampling import SamplingParams, sample, seeded_uniforms

LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0], dtype=np.float32)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - np.max(x) - math.log(np.sum(np.exp(x - np.max(x))))


def test_seeded_uniforms_depend_on_seed_position_and_column_only() -> None:
    a = seeded_uniforms(7, 12, 16)
    assert np.array_equal(a, seeded_uniforms(7, 12, 16))
    assert np.array_equal(a[:6], seeded_uniforms(7, 12, 6))  # a column's value does not depend on the vocabulary size
    assert not np.array_equal(a, seeded_uniforms(8, 12, 16))
    assert not np.array_equal(a, seeded_uniforms(7, 13, 16))
    assert len(set(a.tolist())) == 16 and ((0 < a) & (a < 1)).all()
    assert np.array_equal(seeded_uniforms(-1, 3, 4), seeded_uniforms((1 << 64) - 1, 3, 4))


def test_seeded_draws_repeat_and_follow_the_distribution() -> None:
    rng = np.random.default_rng(0)
    params = SamplingParams(temperature=1.0, sampling_seed=99)
    assert sample(LOGITS, params, 5, rng) == sample(LOGITS, params, 5, np.random.default_rng(1))
    draws = [sample(LOGITS, SamplingParams(sampling_seed=s), 5, rng)[0] for s in range(4000)]
    freq = np.bincount(draws, minlength=len(LOGITS)) / len(draws)
    assert freq == pytest.approx(np.exp(log_softmax(LOGITS)), abs=0.03)


def test_logprob_is_the_temperature_scaled_log_softmax() -> None:
    rng = np.random.default_rng(0)
    token, logprob = sample(LOGITS, SamplingParams(temperature=0.5, sampling_seed=1), 3, rng)
    assert logprob == pytest.approx(log_softmax(LOGITS / 0.5)[token])
    token, logprob = sample(LOGITS, SamplingParams(temperature=0.0), 3, rng)
    assert token == 0 and logprob == pytest.approx(log_softmax(LOGITS)[0])
    assert sample(LOGITS, SamplingParams(top_k=1, temperature=2.0), 3, rng)[0] == 0


@pytest.mark.parametrize(
    "params, allowed",
    [(SamplingParams(top_k=2), {0, 1}), (SamplingParams(top_p=0.6), {0, 1}), (SamplingParams(top_p=0.5), {0}), (SamplingParams(top_p=0.1), {0})],
)
def test_truncation_keeps_only_what_top_k_and_top_p_allow(params: SamplingParams, allowed: set[int]) -> None:
    rng = np.random.default_rng(0)
    drawn = {sample(LOGITS, params, 1, rng)[0] for _ in range(500)}
    assert drawn == allowed
