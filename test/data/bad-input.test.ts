import { beforeEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import { ExperienceSampler, ExperienceWriter, wholeGroups, type GroupRegistry, type TrajectoryInput, type TrajectorySegment } from '../../src/data/index.js';
import { metricValue, natsFixture, trajectory } from './helpers.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const nats = natsFixture();
let registry: Registry;
let w: ExperienceWriter;
let k = 0;
const groups: GroupRegistry = { groupSize: (g) => Promise.resolve(g === 'known' ? 2 : undefined) };

beforeEach(async () => {
  registry = new Registry();
  w = await ExperienceWriter.open({ nc: nats.nc, buffer: `bad${++k}`, registry, maxWeightVersion: () => 10, maxTrajectoryBytes: 64 * 1024 });
});

const gen = (length: number, weightVersion = 0): TrajectorySegment => ({ kind: 'generated', length, weightVersion, finishReason: 'stop' });
const obs = (length: number): TrajectorySegment => ({ kind: 'observation', length, action: { tool: 't', actionId: 'a', status: 'ok', latencyMs: 1 } });
const rejected = (code: string): Promise<number> => metricValue(registry, 'laminar_data_rejections_total', { component: 'writer', code });

describe('writer rejects bad trajectories with typed, counted errors', () => {
  const cases: Array<[string, unknown, string, RegExp]> = [
    [
      'missing fields',
      (() => {
        const t: Partial<TrajectoryInput> = trajectory();
        delete t.reward;
        delete t.groupId;
        return t;
      })(),
      ErrorCodes.BAD_TRAJECTORY,
      /reward.*|groupId/,
    ],
    ['wrong types', { ...trajectory(), weightVersion: '3', tokens: 'abc' }, ErrorCodes.BAD_TRAJECTORY, /weightVersion/],
    ['a non-integer token', { ...trajectory(), tokens: [1.5, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] }, ErrorCodes.BAD_TRAJECTORY, /tokens/],
    ['a NaN reward', { ...trajectory(), reward: Number.NaN }, ErrorCodes.BAD_TRAJECTORY, /reward/],
    ['token/logprob length mismatch', { ...trajectory(), logprobs: new Float32Array(11) }, ErrorCodes.LENGTH_MISMATCH, /12 tokens but 11 logprobs/],
    ['lengths that do not add up', { ...trajectory(), promptLength: 5 }, ErrorCodes.LENGTH_MISMATCH, /promptLength 5 \+ responseLength 8 != 12/],
    ['a negative length', { ...trajectory(), promptLength: -4, responseLength: 16 }, ErrorCodes.NEGATIVE_LENGTH, /promptLength is negative/],
    ['a weight version from the future', trajectory({ weightVersion: 11 }), ErrorCodes.FUTURE_VERSION, /version 11 is from the future \(newest is 10\)/],
    ['a sample index outside its group', trajectory({ sampleIndex: 2, groupSize: 2 }), ErrorCodes.GROUP_MISMATCH, /outside the group/],
    ['not an object at all', 42, ErrorCodes.BAD_TRAJECTORY, /invalid trajectory/],
    // Multi-turn segments (src/data/codec/segments.ts).
    ['a segment of an unknown kind', trajectory({ segments: [{ kind: 'tool', length: 8 } as never] }), ErrorCodes.BAD_SEGMENTS, /segments\.0\.kind/],
    ['segments that do not add up', trajectory({ segments: [gen(3)] }), ErrorCodes.SEGMENT_LENGTHS, /add up to 3, not the response length 8/],
    ['an observation token with a logprob', trajectory({ segments: [gen(4), obs(4)] }), ErrorCodes.OBSERVATION_LOGPROB, /token 8 is in observation segment 1/],
    ['a turn from the future', trajectory({ segments: [gen(8, 11)] }), ErrorCodes.FUTURE_VERSION, /segment 0 has weight version 11/],
    ['257 segments', trajectory({ segments: Array.from({ length: 257 }, () => gen(0)) }), ErrorCodes.TOO_MANY_SEGMENTS, /257 segments/],
  ];
  for (const [what, input, code, message] of cases) {
    it(what, async () => {
      await expect(w.write(input)).rejects.toMatchObject({ code, message: expect.stringMatching(message) as unknown });
      expect(await rejected(code)).toBe(1);
    });
  }

  it('a payload over the configured maximum', async () => {
    await expect(w.write(trajectory({}, 9000))).rejects.toMatchObject({ code: ErrorCodes.PAYLOAD_TOO_LARGE, details: { bytes: 72000, max: 65536 } });
    expect(await rejected(ErrorCodes.PAYLOAD_TOO_LARGE)).toBe(1);
  });

  it('an unknown group id, and a group size that does not match', async () => {
    const gw = await ExperienceWriter.open({ nc: nats.nc, buffer: `bad${k}`, registry, groups });
    await expect(gw.write(trajectory({ groupId: 'ghost', groupSize: 2 }))).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_GROUP });
    await expect(gw.write(trajectory({ groupId: 'known', groupSize: 3 }))).rejects.toMatchObject({ code: ErrorCodes.GROUP_MISMATCH });
    await expect(gw.write(trajectory({ groupId: 'known', groupSize: 2 }))).resolves.toMatchObject({ duplicate: false });
    expect(await rejected(ErrorCodes.UNKNOWN_GROUP)).toBe(1);
  });

  it('nothing rejected reaches the stream', async () => {
    await w.write(trajectory({ weightVersion: 99 })).catch(() => undefined);
    const jsm = await jetstreamManager(nats.nc);
    expect((await jsm.streams.info(`LAMINAR_EXP_bad${k}`)).state.messages).toBe(0);
  });
});

describe('sampler rejects impossible requests at once', () => {
  it('a batch larger than the capacity fails at open, not a hang', async () => {
    await expect(ExperienceSampler.open({ nc: nats.nc, buffer: `bad${k}`, batchSize: 11, eviction: { maxItems: 10 }, registry })).rejects.toMatchObject({
      code: ErrorCodes.BATCH_IMPOSSIBLE,
      message: expect.stringMatching(/larger than the buffer's capacity of 10/) as unknown,
    });
    await expect(ExperienceSampler.open({ nc: nats.nc, buffer: `bad${k}`, batchSize: 0, registry })).rejects.toMatchObject({
      code: ErrorCodes.BAD_DATA_OPTIONS,
    });
    await expect(ExperienceSampler.open({ nc: nats.nc, buffer: `bad${k}`, batchSize: 1, orphanChunkAgeMs: -1, registry })).rejects.toMatchObject({
      code: ErrorCodes.BAD_DATA_OPTIONS,
    });
    await expect(
      ExperienceSampler.open({ nc: nats.nc, buffer: `bad${k}`, batchSize: 2, rateLimit: { minSizeToSample: 50 }, eviction: { maxItems: 10 }, registry }),
    ).rejects.toMatchObject({
      code: ErrorCodes.BATCH_IMPOSSIBLE,
    });
  });

  it('whole groups that cannot add up to the batch size fail even while waiting', async () => {
    const s = await ExperienceSampler.open({ nc: nats.nc, buffer: `bad${k}`, batchSize: 6, strategy: wholeGroups(), registry });
    const waiting = s.sample({ timeoutMs: 10_000 });
    await w.write(trajectory({ id: 'g0', groupId: 'G', sampleIndex: 0, groupSize: 4 }));
    await expect(waiting).rejects.toMatchObject({ code: ErrorCodes.BATCH_IMPOSSIBLE, message: expect.stringMatching(/whole groups of sizes 4/) as unknown });
    expect(await metricValue(registry, 'laminar_data_rejections_total', { component: 'sampler', code: ErrorCodes.BATCH_IMPOSSIBLE })).toBe(1);
    await s.close();
  });

  it('a corrupt record in the stream is skipped and counted, not fatal', async () => {
    const jsm = await jetstreamManager(nats.nc);
    const h = headers();
    h.set('Laminar-Meta', 'bm90IG1zZ3BhY2s=');
    await jsm.jetstream().publish(`laminar.exp.bad${k}.t.junk`, new Uint8Array(8), { headers: h });
    await jsm.jetstream().publish(`laminar.exp.bad${k}.t.nohdr`, new Uint8Array(8));
    await w.write(trajectory({ id: 'fine' }));
    const s = await ExperienceSampler.open({ nc: nats.nc, buffer: `bad${k}`, batchSize: 1, registry });
    expect((await s.sample({ timeoutMs: 5000 })).items[0]!.id).toBe('fine');
    expect(s.stats().corrupt).toBe(2);
    expect(await metricValue(registry, 'laminar_data_rejections_total', { component: 'sampler', code: ErrorCodes.CORRUPT_RECORD })).toBe(2);
    await s.close();
  });
});
