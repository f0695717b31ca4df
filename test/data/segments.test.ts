/**
 * Trajectory segments (src/data/codec/segments.ts) without servers: the loss mask and turn
 * boundaries of any sequence of turns agree with the tokens the builder laid out, the record
 * header keeps the segments exactly, and a record from before segments (v1) reads as one
 * generated segment. The byte-level format is held to the shared vectors (vectors.test.ts).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { pack } from 'msgpackr';
import {
  fillLossMask,
  lossMaskOf,
  TrajectoryBuilder,
  turnBoundariesOf,
  validateTrajectory,
  type ActionStatus,
  type TrajectorySegment,
} from '../../src/data/index.js';
import { decodeMeta, encodeMeta, metaOf, RECORD_VERSION } from '../../src/data/codec/record-meta.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

type Turn = { kind: 'generated'; tokens: number[]; version: number } | { kind: 'observation'; tokens: number[]; status: ActionStatus };

const turnArb: fc.Arbitrary<Turn> = fc.oneof(
  fc.record({ kind: fc.constant('generated' as const), tokens: fc.array(fc.integer({ min: 0, max: 50_000 }), { maxLength: 12 }), version: fc.nat(20) }),
  fc.record({
    kind: fc.constant('observation' as const),
    tokens: fc.array(fc.integer({ min: 0, max: 50_000 }), { maxLength: 12 }),
    status: fc.constantFrom<ActionStatus>('ok', 'error', 'timeout', 'failed', 'truncated', 'bad_call'),
  }),
);

function build(prompt: number[], turns: Turn[]): ReturnType<typeof validateTrajectory> {
  const b = new TrajectoryBuilder(prompt);
  turns.forEach((t, i) => {
    if (t.kind === 'generated') {
      b.addGenerated(
        t.tokens,
        t.tokens.map((x) => -(x % 7) - 0.5),
        { weightVersion: t.version, finishReason: 'tool_call' },
      );
    } else {
      b.addObservation(t.tokens, { tool: 'lookup', actionId: `a-${i}`, status: t.status, latencyMs: i * 1.5 });
    }
  });
  return validateTrajectory(b.build({ id: 't', promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, reward: 1, weightVersion: 0 }));
}

describe('trajectory segments', () => {
  it('mask and boundaries agree with the tokens of every turn, and the header keeps the segments exactly', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 9 }), { maxLength: 6 }), fc.array(turnArb, { minLength: 1, maxLength: 20 }), (prompt, turns) => {
        const t = build(prompt, turns);
        const mask = lossMaskOf(t);
        const bounds = turnBoundariesOf(t);
        expect(mask.length).toBe(t.tokens.length);
        expect(bounds).toHaveLength(turns.length + 1);
        expect(bounds[0]).toBe(prompt.length);
        expect(bounds.at(-1)).toBe(t.tokens.length);
        for (let i = 0; i < prompt.length; i++) expect(mask[i]).toBe(0);
        turns.forEach((turn, i) => {
          const [a, b] = [bounds[i]!, bounds[i + 1]!];
          expect(Array.from(t.tokens.subarray(a, b))).toEqual(turn.tokens);
          expect(Array.from(mask.subarray(a, b))).toEqual(turn.tokens.map(() => (turn.kind === 'generated' ? 1 : 0)));
          if (turn.kind === 'observation') expect(Array.from(t.logprobs.subarray(a, b)).every((x) => x === 0)).toBe(true);
        });
        // A mask written into a shared buffer at an offset is the same bytes, and touches nothing else.
        const out = new Uint8Array(t.tokens.length + 6).fill(7);
        fillLossMask(out, 3, t);
        expect(Array.from(out.subarray(3, 3 + t.tokens.length))).toEqual(Array.from(mask));
        expect([...out.subarray(0, 3), ...out.subarray(3 + t.tokens.length)]).toEqual([7, 7, 7, 7, 7, 7]);
        const meta = decodeMeta(encodeMeta(metaOf(t, [])));
        expect(meta.v).toBe(RECORD_VERSION);
        expect(meta.segments).toEqual(t.segments);
      }),
      { numRuns: 300 },
    );
  });

  it("a trajectory's weight version defaults to its oldest turn's", () => {
    const t = new TrajectoryBuilder([1])
      .addGenerated([2], [-1], { weightVersion: 7, finishReason: 'tool_call' })
      .addObservation([3], { tool: 'x', actionId: 'a', status: 'ok', latencyMs: 1 })
      .addGenerated([4], [-1], { weightVersion: 5, finishReason: 'stop' });
    const fields = { id: 't', promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, reward: 0 };
    expect(t.build(fields).weightVersion).toBe(5);
    expect(t.build({ ...fields, weightVersion: 6 }).weightVersion).toBe(6);
    expect(t.turns).toBe(2);
    expect(Array.from(t.tokens)).toEqual([1, 2, 3, 4]);
  });

  it('a record from before segments (v1, packed as the old writer did) reads as one generated segment', () => {
    const v1 = {
      v: 1,
      id: 'old',
      promptId: 'p',
      groupId: 'g',
      sampleIndex: 0,
      groupSize: 1,
      weightVersion: 2,
      reward: 1,
      tokenCount: 5,
      promptLength: 2,
      responseLength: 3,
      createdAt: 1,
      completedAt: 2,
      priority: 1,
      bytes: 40,
      chunkSeqs: [],
    };
    const meta = decodeMeta(Buffer.from(pack(v1)).toString('base64'));
    expect(meta.segments).toBeUndefined();
    expect(Array.from(lossMaskOf(meta))).toEqual([0, 0, 1, 1, 1]);
    expect(turnBoundariesOf(meta)).toEqual([2, 5]);
    // A v1 record with segments, or a v2 record without, is not a record (counted as corrupt).
    expect(() => decodeMeta(Buffer.from(pack({ ...v1, segments: [[0, 3, 2, 'stop']] })).toString('base64'))).toThrow();
    expect(() => decodeMeta(Buffer.from(pack({ ...v1, v: 2 })).toString('base64'))).toThrow();
    expect(() => decodeMeta(Buffer.from(pack({ ...v1, v: 3 })).toString('base64'))).toThrow();
  });

  it('a builder with a turn of mismatched logprobs, or no turn and no version, is refused with a code', () => {
    const b = new TrajectoryBuilder([1]);
    expect(() => b.addGenerated([1, 2], [0], { weightVersion: 1, finishReason: 'stop' })).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_APPEND }));
    b.addObservation([5], { tool: 'x', actionId: 'a', status: 'ok', latencyMs: 0 });
    const fields = { id: 't', promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, reward: 0 };
    expect(() => b.build(fields)).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_SEGMENTS }));
    const segments: TrajectorySegment[] = [...b.build({ ...fields, weightVersion: 4 }).segments!];
    expect(segments).toEqual([{ kind: 'observation', length: 1, action: { tool: 'x', actionId: 'a', status: 'ok', latencyMs: 0 } }]);
  });
});
