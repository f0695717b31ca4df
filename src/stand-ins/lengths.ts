/**
 * Seeded randomness for the simulated rollout engine: a small PRNG, and the prompt and output
 * length distributions of RL rollouts.
 *
 * Output lengths are long-tailed (paper §2.1, Figure 2: on AIME the 99th percentile is about ten
 * times the median), which is what strands a rollout on a few long trajectories. A log-normal
 * reproduces that with one parameter: p99 / median = exp(sigma * z_0.99), z_0.99 = 2.3263.
 * Everything here is a pure function of the rng (or, for outputLengthOf, of the trajectory id),
 * so a seed replays a whole simulation.
 */
import { createHash } from 'node:crypto';
import { ErrorCodes, InvalidInputError } from '../common/errors.js';
import { seededRandom } from '../common/random.js';

/** The standard normal's 99th percentile. */
export const Z_99 = 2.3263;

/**
 * mulberry32: 32 bits of state, fast, and good enough for workload shapes (not for
 * cryptography). Returns floats in [0, 1). The same seed always gives the same sequence.
 */
export function makeRng(seed: number): () => number {
  if (!Number.isFinite(seed)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `rng seed must be a finite number, got ${seed}`);
  return seededRandom(seed);
}

/**
 * One standard normal draw (Box-Muller). Always takes exactly two rng draws and keeps no spare,
 * so a caller's rng consumption does not depend on what was sampled before.
 */
export function sampleNormal(rng: () => number): number {
  const u1 = 1 - rng(); // (0, 1]: log(0) would be -Infinity
  const u2 = rng();
  return Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
}

export interface OutputLengthOptions {
  /** Median output length in tokens. */
  median: number;
  /** p99 / median of the untruncated distribution; 10 as in the paper's Figure 2. */
  p99OverMedian?: number;
  /** Upper clamp (the generation limit, max_tokens); the clamped mass piles up at max. */
  max: number;
}

/** An output length in tokens: log-normal with the given median and p99/median, rounded, clamped to [1, max]. */
export function sampleOutputLength(rng: () => number, options: OutputLengthOptions): number {
  const { median, max } = options;
  const ratio = options.p99OverMedian ?? 10;
  checkPositive('median', median);
  checkPositive('max', max);
  if (!(ratio >= 1) || !Number.isFinite(ratio)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `p99OverMedian must be a finite number >= 1, got ${ratio}`);
  }
  const sigma = Math.log(ratio) / Z_99;
  return clampLength(median * Math.exp(sigma * sampleNormal(rng)), max);
}

/**
 * A 32-bit seed from a text (a trajectory id, a payload): the first four bytes of its SHA-1, so
 * the same text seeds the same draws in every process, whichever rollout draws them.
 */
export function seedOf(text: string): number {
  return createHash('sha1').update(text).digest().readUInt32LE(0);
}

/**
 * The output length a trajectory always gets, drawn from its id alone: a trajectory resumed on
 * another rollout (repack, failover) keeps the length it would have had where it started.
 */
export function outputLengthOf(trajectoryId: string, options: OutputLengthOptions): number {
  return sampleOutputLength(makeRng(seedOf(trajectoryId)), options);
}

export interface PromptLengthOptions {
  /** Median prompt length in tokens. */
  median: number;
  /** Log-space spread; prompts of one task vary little compared with outputs (p99 ≈ 1.8 × median at 0.25). */
  sigma?: number;
  /** Upper clamp; unbounded unless given. */
  max?: number;
}

/** A prompt length in tokens: log-normal with a small spread, rounded, clamped to [1, max]. */
export function samplePromptLength(rng: () => number, options: PromptLengthOptions): number {
  const { median } = options;
  const sigma = options.sigma ?? 0.25;
  const max = options.max ?? Number.MAX_SAFE_INTEGER;
  checkPositive('median', median);
  checkPositive('max', max);
  if (!(sigma >= 0) || !Number.isFinite(sigma)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `sigma must be a finite number >= 0, got ${sigma}`);
  }
  return clampLength(median * Math.exp(sigma * sampleNormal(rng)), max);
}

/** A length in whole tokens, at least 1 and at most `max`. */
export function clampLength(x: number, max: number): number {
  return Math.min(Math.floor(max), Math.max(1, Math.round(x)));
}

function checkPositive(name: string, value: number): void {
  if (!(value >= 1) || !Number.isFinite(value)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${name} must be a finite number >= 1, got ${value}`);
  }
}
