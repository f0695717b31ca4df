/**
 * The simulated trainer's options: defaults, and one parse into a frozen object. The CLI
 * (src/cli/sim-trainer.ts) hands its flags over as strings; code may give numbers. Every bad
 * value is a SimTrainerOptionError (code ERR_INVALID_ARG, `details.option` names the flag), or
 * ERR_BAD_MODEL_ID for a model id the relays would refuse, before anything is connected.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { parseBytes, parseDuration } from '../../common/units.js';
import { NAMED_STRATEGIES, bufferNames, strategyByName, type SamplingStrategy } from '../../data/index.js';
import { validateModelId } from '../../relay/client/index.js';

export const SIM_TRAINER_STRATEGIES = NAMED_STRATEGIES;
export type SimTrainerStrategy = (typeof SIM_TRAINER_STRATEGIES)[number];

export const SIM_TRAINER_DEFAULTS = Object.freeze({
  model: 'sim/policy',
  size: 64 * 1024 * 1024,
  tensors: 8,
  batchSize: 64,
  strategy: 'fifo',
  trainTimeMs: 2000,
  timeScale: 1,
  startVersion: 0,
  /** The sampler's and writer's default buffer (bufferNames()). */
  buffer: 'default',
  replicas: 1,
});

/** Synthetic weights are BF16: 2 bytes an element. */
export const SIM_WEIGHT_ELEMENT_BYTES = 2;
/** Each tensor carries the version number in its first 4 bytes (little-endian u32). */
export const SIM_WEIGHT_STAMP_BYTES = 4;

export interface SimTrainerOptionsInput {
  /** Model id the versions are published under. Default 'sim/policy'. */
  model?: string;
  /** Bytes of one weight version ("64MiB", "1.5GB", or a number). Default 64 MiB. */
  size?: string | number;
  /** Tensors the version is split into. Default 8. */
  tensors?: string | number;
  /** Trajectories per batch (with 'groups', a sum of whole group sizes). Default 64. */
  batchSize?: string | number;
  /** fifo (default), groups (whole GRPO groups, oldest first) or uniform. */
  strategy?: string;
  /** Drop trajectories more than this many versions behind the trainer (wraps the strategy). */
  maxStaleness?: string | number;
  /** Simulated time one training step takes ("2s", "500ms", or ms). Default 2 s. */
  trainTime?: string | number;
  /** Simulated seconds per wall-clock second (10: a 2 s step takes 200 ms). Default 1. */
  timeScale?: string | number;
  /** Stop after this many training steps (0: publish the initial version only). */
  steps?: string | number;
  /** Stop after this much wall-clock time ("10m", or ms); the step in hand is finished. */
  duration?: string | number;
  /** Weight version the trainer starts at (published first unless initialPublish is false). Default 0. */
  startVersion?: string | number;
  /** Publish the start version before the first step, so that rollouts have weights. Default true. */
  initialPublish?: boolean;
  /** Experience buffer name, as writers use it (stream LAMINAR_EXP_<name>). Default 'default'. */
  buffer?: string;
  /** Replicas of the buffer's stream when the sampler creates it. Default 1. */
  replicas?: string | number;
  /** Seed of the sampler's random source (uniform). */
  seed?: string | number;
  /** Assemble the next batch while the current one trains. Default true. */
  prefetch?: boolean;
}

export interface SimTrainerConfig {
  model: string;
  sizeBytes: number;
  tensors: number;
  batchSize: number;
  strategy: SimTrainerStrategy;
  maxStaleness: number | null;
  trainTimeMs: number;
  timeScale: number;
  /** Wall-clock milliseconds a step's training takes: trainTimeMs / timeScale. */
  trainWallMs: number;
  steps: number | null;
  durationMs: number | null;
  startVersion: number;
  initialPublish: boolean;
  buffer: string;
  replicas: number;
  seed: number | null;
  prefetch: boolean;
}

/** A bad option value: code ERR_INVALID_ARG, `details` = { option, value }. */
export class SimTrainerOptionError extends InvalidInputError {
  constructor(option: string, message: string, value?: unknown) {
    super(ErrorCodes.INVALID_ARG, `--${option}: ${message}`, { option, value });
  }
}

function flagOf(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

function int(key: string, value: string | number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = typeof value === 'number' ? value : value.trim() === '' ? Number.NaN : Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new SimTrainerOptionError(flagOf(key), `must be an integer in [${min}, ${max}], got ${JSON.stringify(value)}`, value);
  }
  return n;
}

function positive(key: string, value: string | number): number {
  const n = typeof value === 'number' ? value : value.trim() === '' ? Number.NaN : Number(value.trim().replace(/x$/i, ''));
  if (!Number.isFinite(n) || n <= 0) throw new SimTrainerOptionError(flagOf(key), `must be a number > 0, got ${JSON.stringify(value)}`, value);
  return n;
}

/** parseDuration/parseBytes, with the flag named in the error and the result range-checked. */
function duration(key: string, value: string | number, min: number): number {
  let ms: number;
  try {
    ms = parseDuration(value);
  } catch (err) {
    throw new SimTrainerOptionError(flagOf(key), (err as Error).message, value);
  }
  if (!Number.isFinite(ms) || ms < min)
    throw new SimTrainerOptionError(flagOf(key), `must be a duration ${min > 0 ? '> 0' : '>= 0'}, got ${JSON.stringify(value)}`, value);
  return ms;
}

function bytes(key: string, value: string | number): number {
  try {
    return parseBytes(value);
  } catch (err) {
    throw new SimTrainerOptionError(flagOf(key), (err as Error).message, value);
  }
}

export function parseSimTrainerOptions(input: SimTrainerOptionsInput = {}): Readonly<SimTrainerConfig> {
  const d = SIM_TRAINER_DEFAULTS;
  const model = validateModelId(input.model ?? d.model);
  const strategy = input.strategy ?? d.strategy;
  if (!(SIM_TRAINER_STRATEGIES as readonly string[]).includes(strategy)) {
    throw new SimTrainerOptionError('strategy', `must be one of ${SIM_TRAINER_STRATEGIES.join(', ')}, got ${JSON.stringify(strategy)}`, strategy);
  }
  const tensors = int('tensors', input.tensors ?? d.tensors, 1, 1_000_000);
  const sizeBytes = bytes('size', input.size ?? d.size);
  if (sizeBytes % SIM_WEIGHT_ELEMENT_BYTES !== 0) {
    throw new SimTrainerOptionError('size', `must be a whole number of BF16 elements (an even byte count), got ${sizeBytes}`, input.size);
  }
  const perTensor = Math.floor(sizeBytes / SIM_WEIGHT_ELEMENT_BYTES / tensors) * SIM_WEIGHT_ELEMENT_BYTES;
  if (perTensor < SIM_WEIGHT_STAMP_BYTES) {
    throw new SimTrainerOptionError(
      'size',
      `${sizeBytes} bytes cannot be split into ${tensors} tensors of at least ${SIM_WEIGHT_STAMP_BYTES} bytes`,
      input.size,
    );
  }
  const buffer = input.buffer ?? d.buffer;
  try {
    bufferNames(buffer);
  } catch (err) {
    throw new SimTrainerOptionError('buffer', (err as Error).message, buffer);
  }
  // The default is in ms already; a value given is a duration with its unit (a bare number is refused).
  const trainTimeMs = input.trainTime === undefined ? d.trainTimeMs : duration('trainTime', input.trainTime, 0);
  const timeScale = positive('timeScale', input.timeScale ?? d.timeScale);
  return Object.freeze({
    model,
    sizeBytes,
    tensors,
    batchSize: int('batchSize', input.batchSize ?? d.batchSize, 1, 1_000_000),
    strategy: strategy as SimTrainerStrategy,
    maxStaleness: input.maxStaleness === undefined ? null : int('maxStaleness', input.maxStaleness, 0),
    trainTimeMs,
    timeScale,
    trainWallMs: trainTimeMs / timeScale,
    steps: input.steps === undefined ? null : int('steps', input.steps, 0),
    durationMs: input.duration === undefined ? null : duration('duration', input.duration, 1),
    startVersion: int('startVersion', input.startVersion ?? d.startVersion, 0),
    initialPublish: input.initialPublish ?? true,
    buffer,
    replicas: int('replicas', input.replicas ?? d.replicas, 1, 5),
    seed: input.seed === undefined ? null : int('seed', input.seed, 0, 2 ** 32 - 1),
    prefetch: input.prefetch ?? true,
  });
}

/** The sampling strategy of a config: fifo / whole groups / uniform, staleness-bounded with maxStaleness. */
export function strategyOf(config: Pick<SimTrainerConfig, 'strategy' | 'maxStaleness'>): SamplingStrategy {
  return strategyByName(config.strategy, config.maxStaleness);
}
