/**
 * A multi-turn trajectory's response as ordered segments: the turns the model generated and the
 * observations the environment returned between them (tool results). `tokens` and `logprobs`
 * of a trajectory stay flat, one entry per token; the segments say which response tokens are
 * which, so that a trainer masks observations out of the loss and finds the turn boundaries.
 *
 * Observation tokens carry logprob 0 (they were not sampled). A trajectory without segments is
 * one generated segment of its whole response: every record written before segments existed.
 *
 * The checks here are hand-written rather than a zod schema so that the Python writer
 * (laminar/data/codec/segments.py) gives the same message for the same mistake, word for word.
 */
import { pack } from 'msgpackr';
import { DataCapacityError, DataInputError } from '../errors.js';
import { MAX_ID_BYTES } from '../ids.js';
import { ErrorCodes } from '../../common/error-codes.js';

/** What became of an action (a tool call): B's action service reports one of these. */
export type ActionStatus = 'ok' | 'error' | 'timeout' | 'failed' | 'truncated' | 'bad_call';
export const ACTION_STATUSES: readonly ActionStatus[] = ['ok', 'error', 'timeout', 'failed', 'truncated', 'bad_call'];

/** The action an observation answers. */
export interface ObservationAction {
  tool: string;
  actionId: string;
  status: ActionStatus;
  /** From submission to result, milliseconds. */
  latencyMs: number;
}

export interface GeneratedSegment {
  kind: 'generated';
  length: number;
  /** The weight version that generated this turn. */
  weightVersion: number;
  /** Why the engine stopped ('stop', 'length', 'tool_call', ...). */
  finishReason: string;
}

export interface ObservationSegment {
  kind: 'observation';
  length: number;
  action: ObservationAction;
}

export type TrajectorySegment = GeneratedSegment | ObservationSegment;

/** A record holds at most this many segments. */
export const MAX_SEGMENTS = 256;
/** ...and at most this many bytes of them in its header (msgpack of the wire form, below). */
export const MAX_SEGMENT_BYTES = 4096;
export const MAX_TOOL_BYTES = 64;
export const MAX_FINISH_REASON_BYTES = 64;

/**
 * The wire form in a record's metadata: a tuple per segment, as small as msgpack makes it
 * (a record's header is also the sampler's index entry).
 *   [0, length, weightVersion, finishReason]
 *   [1, length, tool, actionId, status, latencyMs]
 */
export type WireSegment = [0, number, number, string] | [1, number, string, string, ActionStatus, number];

export function segmentsToWire(segments: readonly TrajectorySegment[]): WireSegment[] {
  return segments.map((s) =>
    s.kind === 'generated'
      ? [0, s.length, s.weightVersion, s.finishReason]
      : [1, s.length, s.action.tool, s.action.actionId, s.action.status, s.action.latencyMs],
  );
}

export function segmentsFromWire(wire: readonly WireSegment[]): TrajectorySegment[] {
  return wire.map((w) =>
    w[0] === 0
      ? { kind: 'generated', length: w[1], weightVersion: w[2], finishReason: w[3] }
      : { kind: 'observation', length: w[1], action: { tool: w[2], actionId: w[3], status: w[4], latencyMs: w[5] } },
  );
}

/** Where the mask and boundaries need only kind and length. */
type Shape = { readonly kind: TrajectorySegment['kind']; readonly length: number };
interface TokenLayout {
  promptLength: number;
  responseLength: number;
  segments?: readonly Shape[] | undefined;
}

/** The segments of a trajectory, the implicit single generated one included when it has none. */
function shapesOf(t: TokenLayout): readonly Shape[] {
  return t.segments ?? [{ kind: 'generated', length: t.responseLength }];
}

/**
 * Writes a trajectory's loss mask (1: a generated token, trained on; 0: prompt and observation
 * tokens) into `out` from `offset`: one fill per segment, not a loop per token.
 */
export function fillLossMask(out: Uint8Array, offset: number, t: TokenLayout): void {
  let at = offset + t.promptLength;
  out.fill(0, offset, at);
  for (const s of shapesOf(t)) {
    out.fill(s.kind === 'generated' ? 1 : 0, at, at + s.length);
    at += s.length;
  }
}

/** The per-token loss mask over prompt + response (prompt and observations 0, generated 1). */
export function lossMaskOf(t: TokenLayout): Uint8Array {
  const out = new Uint8Array(t.promptLength + t.responseLength);
  fillLossMask(out, 0, t);
  return out;
}

/**
 * The turn boundaries: the token index (into prompt + response) where each segment starts,
 * then the end. Segment i is tokens [b[i], b[i+1]); b[0] is the prompt length.
 */
export function turnBoundariesOf(t: TokenLayout): number[] {
  const out = [t.promptLength];
  let at = t.promptLength;
  for (const s of shapesOf(t)) out.push((at += s.length));
  return out;
}

// ---- validation -------------------------------------------------------------------------------

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const utf8Bytes = (s: string): number => Buffer.byteLength(s);
// A lone surrogate has no UTF-8 form: the record could not carry it unchanged.
const LONE_SURROGATE = /\p{Surrogate}/u;
const wellFormed = (s: string): boolean => !LONE_SURROGATE.test(s);

function boundedString(v: unknown, max: number): string | undefined {
  if (typeof v !== 'string') return 'expected a string';
  if (!wellFormed(v)) return 'a string with a lone surrogate';
  if (v.length === 0) return 'expected a non-empty string';
  if (utf8Bytes(v) > max) return `at most ${max} bytes`;
  return undefined;
}

/** The first thing wrong with one segment, as [path under it, message]; undefined when none. */
function segmentProblem(v: unknown): [string, string] | undefined {
  if (!isObject(v)) return ['', 'expected an object'];
  if (v.kind !== 'generated' && v.kind !== 'observation') return ['kind', 'expected "generated" or "observation"'];
  if (!isCount(v.length)) return ['length', 'expected an integer >= 0'];
  if (v.kind === 'generated') {
    if (!isCount(v.weightVersion)) return ['weightVersion', 'expected an integer >= 0'];
    const fr = boundedString(v.finishReason, MAX_FINISH_REASON_BYTES);
    return fr === undefined ? undefined : ['finishReason', fr];
  }
  const a = v.action;
  if (!isObject(a)) return ['action', 'expected an object'];
  const tool = boundedString(a.tool, MAX_TOOL_BYTES);
  if (tool !== undefined) return ['action.tool', tool];
  const actionId = boundedString(a.actionId, MAX_ID_BYTES);
  if (actionId !== undefined) return ['action.actionId', actionId];
  if (typeof a.status !== 'string' || !(ACTION_STATUSES as readonly string[]).includes(a.status)) {
    return ['action.status', `expected one of ${ACTION_STATUSES.join(', ')}`];
  }
  if (typeof a.latencyMs !== 'number' || !Number.isFinite(a.latencyMs) || a.latencyMs < 0) return ['action.latencyMs', 'expected a finite number >= 0'];
  return undefined;
}

/** One segment with only its own fields, in a fixed order (what the record keeps). */
function normalised(v: Record<string, unknown>): TrajectorySegment {
  if (v.kind === 'generated') {
    return { kind: 'generated', length: v.length as number, weightVersion: v.weightVersion as number, finishReason: v.finishReason as string };
  }
  const a = v.action as Record<string, unknown>;
  return {
    kind: 'observation',
    length: v.length as number,
    action: { tool: a.tool as string, actionId: a.actionId as string, status: a.status as ActionStatus, latencyMs: a.latencyMs as number },
  };
}

export interface SegmentContext {
  id: string;
  promptLength: number;
  responseLength: number;
  logprobs: Float32Array;
  maxWeightVersion?: number | undefined;
}

/**
 * Checks a trajectory's `segments` (already known to be present) against its lengths and
 * logprobs; returns them normalised. Throws ERR_BAD_SEGMENTS (shape), ERR_TOO_MANY_SEGMENTS,
 * ERR_SEGMENT_LENGTHS, ERR_FUTURE_VERSION (a turn from an unpublished version) or
 * ERR_OBSERVATION_LOGPROB, in that order of checks.
 */
export function validateSegments(input: unknown, ctx: SegmentContext): TrajectorySegment[] {
  const d = { id: ctx.id };
  if (!Array.isArray(input)) throw new DataInputError(ErrorCodes.BAD_SEGMENTS, 'invalid segments: expected an array', { ...d, path: 'segments' });
  if (input.length > MAX_SEGMENTS) {
    throw new DataCapacityError(ErrorCodes.TOO_MANY_SEGMENTS, `${input.length} segments, more than the maximum ${MAX_SEGMENTS}`, {
      details: { ...d, segments: input.length, max: MAX_SEGMENTS },
    });
  }
  const out: TrajectorySegment[] = [];
  for (let i = 0; i < input.length; i++) {
    const problem = segmentProblem(input[i]);
    if (problem) {
      const path = problem[0] === '' ? `segments.${i}` : `segments.${i}.${problem[0]}`;
      throw new DataInputError(ErrorCodes.BAD_SEGMENTS, `invalid segments: ${path}: ${problem[1]}`, { ...d, path });
    }
    out.push(normalised(input[i] as Record<string, unknown>));
  }
  const bytes = pack(segmentsToWire(out)).byteLength;
  if (bytes > MAX_SEGMENT_BYTES) {
    throw new DataCapacityError(ErrorCodes.TOO_MANY_SEGMENTS, `the segments take ${bytes} bytes, more than the maximum ${MAX_SEGMENT_BYTES}`, {
      details: { ...d, bytes, max: MAX_SEGMENT_BYTES },
    });
  }
  let sum = 0;
  for (const s of out) sum += s.length;
  if (sum !== ctx.responseLength) {
    throw new DataInputError(ErrorCodes.SEGMENT_LENGTHS, `segment lengths add up to ${sum}, not the response length ${ctx.responseLength}`, {
      ...d,
      segments: sum,
      responseLength: ctx.responseLength,
    });
  }
  let at = ctx.promptLength;
  for (let i = 0; i < out.length; i++) {
    const s = out[i]!;
    if (s.kind === 'generated' && ctx.maxWeightVersion !== undefined && s.weightVersion > ctx.maxWeightVersion) {
      throw new DataInputError(
        ErrorCodes.FUTURE_VERSION,
        `segment ${i} has weight version ${s.weightVersion}, from the future (newest is ${ctx.maxWeightVersion})`,
        { ...d, segment: i, weightVersion: s.weightVersion, newest: ctx.maxWeightVersion },
      );
    }
    if (s.kind === 'observation') {
      for (let k = at; k < at + s.length; k++) {
        if (ctx.logprobs[k] !== 0) {
          throw new DataInputError(ErrorCodes.OBSERVATION_LOGPROB, `token ${k} is in observation segment ${i} but has logprob ${ctx.logprobs[k]}, not 0`, {
            ...d,
            segment: i,
            token: k,
          });
        }
      }
    }
    at += s.length;
  }
  return out;
}
