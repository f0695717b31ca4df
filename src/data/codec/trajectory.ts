/**
 * The completed-trajectory record: what a rollout writes and the trainer samples. Validation
 * has two layers: a zod schema for fields and types (ERR_BAD_TRAJECTORY, with the zod issues
 * in `details`), then the invariants with their own codes (lengths, versions).
 */
import { z } from 'zod';
import { DataCapacityError, DataInputError } from '../errors.js';
import { CONTROL_CHARACTERS, EDGE_WHITESPACE, MAX_ID_BYTES } from '../ids.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { validateSegments, type TrajectorySegment } from './segments.js';

export interface Trajectory {
  id: string;
  promptId: string;
  /** GRPO group: the n samples of one prompt claim share it. */
  groupId: string;
  /** 0..groupSize-1 */
  sampleIndex: number;
  /** n, samples per prompt. */
  groupSize: number;
  /** Weight version the trajectory was generated with. */
  weightVersion: number;
  reward: number;
  /** Prompt + response token ids; `logprobs` has one entry per token. */
  tokens: Int32Array;
  logprobs: Float32Array;
  promptLength: number;
  responseLength: number;
  /** Epoch milliseconds. */
  createdAt: number;
  completedAt: number;
  rolloutId?: string;
  /** Initial priority for the prioritized strategy (default 1). */
  priority?: number;
  /** Small user metadata (advantages, scores); kept in the sampler index, so keep it small. */
  info?: Record<string, string | number | boolean>;
  /**
   * The response as ordered turns: generated segments and the observations between them
   * (segments.ts). Their lengths add up to responseLength; observation tokens have logprob 0.
   * Absent: one generated segment of the whole response (a single-turn trajectory).
   */
  segments?: TrajectorySegment[];
}

/** What a writer accepts: arrays may be plain number arrays; timestamps default to now. */
export type TrajectoryInput = Omit<Trajectory, 'tokens' | 'logprobs' | 'createdAt' | 'completedAt' | 'segments'> & {
  segments?: readonly TrajectorySegment[];
  tokens: Int32Array | readonly number[];
  logprobs: Float32Array | readonly number[];
  createdAt?: number;
  completedAt?: number;
};

const id = z
  .string()
  .min(1)
  .refine((s) => Buffer.byteLength(s) <= MAX_ID_BYTES, `at most ${MAX_ID_BYTES} bytes`);
// A message id (ids.ts says why); checked only within the byte limit, so that an id breaks one
// rule at most (one issue, as the Python client reports it).
const trajectoryId = id.refine(
  (s) => Buffer.byteLength(s) > MAX_ID_BYTES || !(EDGE_WHITESPACE.test(s) || CONTROL_CHARACTERS.test(s)),
  'must not begin or end with whitespace or hold control characters',
);
// zod 4: z.number() rejects NaN and ±Infinity, and .int() accepts only safe integers.
const count = z.number().int();
// Token ids are stored as int32: a number outside that range would wrap in Int32Array.from.
const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;
const tokenIds = z
  .array(z.number().int())
  .refine((a) => a.every((x) => x >= INT32_MIN && x <= INT32_MAX), `token ids must be int32 (${INT32_MIN}..${INT32_MAX})`);
const MAX_INFO_BYTES = 4096;

const schema = z.object({
  id: trajectoryId,
  promptId: id,
  groupId: id,
  sampleIndex: count,
  groupSize: count,
  weightVersion: count,
  reward: z.number(),
  tokens: z.union([z.instanceof(Int32Array), tokenIds]),
  logprobs: z.union([z.instanceof(Float32Array), z.array(z.number())]),
  promptLength: count,
  responseLength: count,
  createdAt: z.number().optional(),
  completedAt: z.number().optional(),
  rolloutId: z.string().max(MAX_ID_BYTES).optional(),
  priority: z.number().nonnegative().optional(),
  info: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).optional(),
  // Checked after the lengths by validateSegments, whose messages the Python writer mirrors.
  segments: z.unknown().optional(),
});

export interface ValidationContext {
  /** The newest weight version that exists; a trajectory from a later one is rejected. */
  maxWeightVersion?: number | undefined;
}

function fail(code: string, message: string, details: Record<string, unknown>): never {
  throw new DataInputError(code, message, details);
}

/** Validates a writer's input and returns a normalised Trajectory (typed arrays, timestamps). */
export function validateTrajectory(input: unknown, ctx: ValidationContext = {}): Trajectory {
  const parsed = schema.safeParse(input);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));
    const where = issues.map((i) => `${i.path || '(root)'}: ${i.message}`).join('; ');
    fail(ErrorCodes.BAD_TRAJECTORY, `invalid trajectory: ${where}`, { id: (input as { id?: unknown } | null)?.id, issues });
  }
  const t = parsed.data;
  const d = { id: t.id };
  for (const key of ['promptLength', 'responseLength', 'sampleIndex', 'weightVersion'] as const) {
    if (t[key] < 0) fail(ErrorCodes.NEGATIVE_LENGTH, `${key} is negative (${t[key]})`, { ...d, field: key, value: t[key] });
  }
  if (t.groupSize < 1) fail(ErrorCodes.NEGATIVE_LENGTH, `groupSize must be >= 1 (got ${t.groupSize})`, { ...d, field: 'groupSize', value: t.groupSize });
  if (t.sampleIndex >= t.groupSize) {
    fail(ErrorCodes.GROUP_MISMATCH, `sampleIndex ${t.sampleIndex} is outside the group of ${t.groupSize}`, {
      ...d,
      sampleIndex: t.sampleIndex,
      groupSize: t.groupSize,
    });
  }
  if (t.tokens.length !== t.logprobs.length) {
    fail(ErrorCodes.LENGTH_MISMATCH, `${t.tokens.length} tokens but ${t.logprobs.length} logprobs`, {
      ...d,
      tokens: t.tokens.length,
      logprobs: t.logprobs.length,
    });
  }
  if (t.promptLength + t.responseLength !== t.tokens.length) {
    fail(ErrorCodes.LENGTH_MISMATCH, `promptLength ${t.promptLength} + responseLength ${t.responseLength} != ${t.tokens.length} tokens`, {
      ...d,
      promptLength: t.promptLength,
      responseLength: t.responseLength,
      tokens: t.tokens.length,
    });
  }
  if (ctx.maxWeightVersion !== undefined && t.weightVersion > ctx.maxWeightVersion) {
    fail(ErrorCodes.FUTURE_VERSION, `weight version ${t.weightVersion} is from the future (newest is ${ctx.maxWeightVersion})`, {
      ...d,
      weightVersion: t.weightVersion,
      newest: ctx.maxWeightVersion,
    });
  }
  if (t.info !== undefined && Buffer.byteLength(JSON.stringify(t.info)) > MAX_INFO_BYTES) {
    fail(ErrorCodes.BAD_TRAJECTORY, `info is larger than ${MAX_INFO_BYTES} bytes`, d);
  }
  const logprobs = t.logprobs instanceof Float32Array ? t.logprobs : Float32Array.from(t.logprobs);
  const { segments: rawSegments, ...fields } = t;
  const segments =
    rawSegments === undefined
      ? undefined
      : validateSegments(rawSegments, {
          id: t.id,
          promptLength: t.promptLength,
          responseLength: t.responseLength,
          logprobs,
          maxWeightVersion: ctx.maxWeightVersion,
        });
  const now = Date.now();
  const out: Trajectory = {
    ...fields,
    tokens: t.tokens instanceof Int32Array ? t.tokens : Int32Array.from(t.tokens),
    logprobs,
    createdAt: t.createdAt ?? now,
    completedAt: t.completedAt ?? now,
  };
  if (segments !== undefined) out.segments = segments;
  return out;
}

/** The writer's ceiling on a validated trajectory's payload (token and logprob bytes). */
export function checkPayloadSize(t: Trajectory, maxBytes: number): void {
  const bytes = t.tokens.byteLength + t.logprobs.byteLength;
  if (bytes > maxBytes) {
    throw new DataCapacityError(ErrorCodes.PAYLOAD_TOO_LARGE, `trajectory ${t.id} has ${bytes} payload bytes, more than the maximum ${maxBytes}`, {
      details: { id: t.id, bytes, max: maxBytes },
    });
  }
}
