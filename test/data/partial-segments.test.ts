/**
 * Multi-turn trajectories in the partial-response pool (a real nats-server): the log records
 * turns, the wait for a tool call and observations as they happen, so that a rollout resuming
 * the trajectory elsewhere rebuilds its context exactly, observations included, and writes the
 * record with its segments; the listing shows a trajectory waiting at a tool call.
 */
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import {
  ExperienceSampler,
  ExperienceWriter,
  lossMaskOf,
  partialNames,
  PartialPool,
  TrajectoryBuilder,
  type PartialStart,
  type TrajectorySegment,
} from '../../src/data/index.js';
import { jetstreamManager } from '@nats-io/jetstream';
import { natsFixture } from './helpers.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const nats = natsFixture();
let registry: Registry;
let k = 0;
let name: string;
const closers: Array<() => Promise<void>> = [];

afterAll(async () => {
  for (const c of closers.reverse()) await c();
});
beforeEach(() => {
  registry = new Registry();
  name = `ps${++k}`;
});

async function pool(writer?: ExperienceWriter): Promise<PartialPool> {
  const p = await PartialPool.open({ nc: nats.nc, pool: name, registry, flushTokens: 3, flushMs: 60_000, writer });
  closers.push(() => p.close());
  return p;
}

const PROMPT = [11, 12, 13];
const start = (id: string): PartialStart => ({
  trajectoryId: id,
  promptId: 'p',
  groupId: 'g',
  sampleIndex: 0,
  groupSize: 1,
  weightVersion: 3,
  promptLength: PROMPT.length,
  promptTokens: new Uint8Array(Int32Array.from(PROMPT).buffer),
});
const lookup = (id: string) => ({ tool: 'lookup', actionId: id, status: 'ok' as const, latencyMs: 42 });

describe('PartialPool with segments', () => {
  it('a trajectory resumed while waiting at a tool call rebuilds its context exactly and completes with its segments', async () => {
    const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: name, registry });
    const p = await pool(writer);
    const t = await p.start('r1', start('mt-1'));
    // Turn 1 (calls a tool), its observation, turn 2 (calls again), then waiting: none of it awaited
    // in between, as a rollout does it; the log keeps the call order.
    t.append([100, 101], [-0.5, -0.25]);
    t.append([102, 103], [-1, -2]); // 4 >= flushTokens: a flush starts under the calls below
    void t.closeTurn({ weightVersion: 3, finishReason: 'tool_call' });
    void t.waitForAction({ actionId: 'act-1', tool: 'lookup' });
    void t.appendObservation([900, 901, 902], lookup('act-1'));
    t.append([104], [-3]);
    void t.closeTurn({ weightVersion: 4, finishReason: 'tool_call' });
    await t.waitForAction({ actionId: 'act-2', tool: 'lookup' });
    expect(t.tokenCount).toBe(8);

    // The listing (headers only) shows it waiting, and for what.
    const [summary] = await p.list('r1');
    expect(summary).toMatchObject({ trajectoryId: 'mt-1', state: 'waiting', tokens: 8, waitingFor: { actionId: 'act-2', tool: 'lookup' } });

    // r1 dies while the tool runs; r2 takes the trajectory over.
    const taken = await p.takeOver('mt-1', 'r2', { from: 'r1' });
    if (taken.status !== 'taken') throw new Error('not taken');
    const { state } = taken;
    const expected: TrajectorySegment[] = [
      { kind: 'generated', length: 4, weightVersion: 3, finishReason: 'tool_call' },
      { kind: 'observation', length: 3, action: lookup('act-1') },
      { kind: 'generated', length: 1, weightVersion: 4, finishReason: 'tool_call' },
    ];
    expect(Array.from(state.tokens)).toEqual([100, 101, 102, 103, 900, 901, 902, 104]);
    expect(Array.from(state.logprobs)).toEqual([-0.5, -0.25, -1, -2, 0, 0, 0, -3]);
    expect(state.segments).toEqual(expected);
    expect(state.waiting).toEqual({ actionId: 'act-2', tool: 'lookup' });
    const r2 = taken.trajectory;
    expect(r2.segments).toEqual(expected);
    expect(r2.waitingFor).toEqual({ actionId: 'act-2', tool: 'lookup' });

    // The context r2 re-prefills: the prompt, then everything so far.
    const resumed = TrajectoryBuilder.resume(new Int32Array(new Uint8Array(state.start.promptTokens!).buffer), state);
    expect(Array.from(resumed.tokens)).toEqual([...PROMPT, 100, 101, 102, 103, 900, 901, 902, 104]);

    // The action's result arrives at r2; the model answers; the trajectory completes.
    await r2.appendObservation([903], { ...lookup('act-2'), status: 'timeout' });
    r2.append([105, 106], [-4, -5]);
    await r2.closeTurn({ weightVersion: 5, finishReason: 'stop' });
    resumed.addObservation([903], { ...lookup('act-2'), status: 'timeout' });
    resumed.addGenerated([105, 106], [-4, -5], { weightVersion: 5, finishReason: 'stop' });
    expect(resumed.segments).toEqual(r2.segments);
    const reread = (await p.read('mt-1'))!;
    expect(reread.segments).toEqual(r2.segments);
    expect(reread.waiting).toBeUndefined();

    await p.complete(r2, resumed.build({ id: 'mt-1', promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, reward: 1 }));
    const sampler = await ExperienceSampler.open({ nc: nats.nc, buffer: name, batchSize: 1, registry, prefetch: false });
    closers.push(() => sampler.close());
    const batch = await sampler.sample({ timeoutMs: 10_000 });
    const [item] = batch.items;
    expect(item!.weightVersion).toBe(3);
    expect(item!.segments).toEqual(r2.segments);
    expect(Array.from(lossMaskOf(item!))).toEqual([0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1]);
    batch.release();
  });

  it('a single-turn log reads with no closed segments, and its tokens as the open turn', async () => {
    const p = await pool();
    const t = await p.start('r1', start('st-1'));
    t.append([1, 2, 3, 4], [-1, -1, -1, -1]);
    await t.flush();
    const s = (await p.read('st-1'))!;
    expect(s.segments).toEqual([]);
    expect(s.waiting).toBeUndefined();
    expect(Array.from(s.tokens)).toEqual([1, 2, 3, 4]);
    expect((await p.list('r1'))[0]).not.toHaveProperty('waitingFor');
  });

  it('turn calls out of order or malformed are refused with a code, and a taken-over owner is fenced', async () => {
    const p = await pool();
    const t = await p.start('r1', start('bad-1'));
    t.append([1, 2], [-1, -1]);
    expect(() => t.appendObservation([5], lookup('a'))).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_SEGMENTS }));
    expect(() => t.waitForAction({ actionId: 'a', tool: 'lookup' })).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_SEGMENTS }));
    expect(() => t.closeTurn({ weightVersion: -1, finishReason: 'stop' })).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_SEGMENTS }));
    await t.closeTurn({ weightVersion: 3, finishReason: 'tool_call' });
    expect(() => t.appendObservation([5], { ...lookup('a'), status: 'done' as 'ok' })).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_SEGMENTS }));
    // Nothing refused reached the log.
    expect((await p.read('bad-1'))!.segments).toEqual([{ kind: 'generated', length: 2, weightVersion: 3, finishReason: 'tool_call' }]);

    await p.takeOver('bad-1', 'r2');
    await expect(t.appendObservation([5], lookup('a'))).rejects.toMatchObject({ code: ErrorCodes.NOT_OWNER });
    expect(() => t.closeTurn({ weightVersion: 3, finishReason: 'stop' })).toThrow(expect.objectContaining({ code: ErrorCodes.NOT_OWNER }));
  });

  it("a turn's buffered tokens go with its close: one append a turn", async () => {
    const p = await pool();
    const t = await p.start('r1', start('mt-one'));
    const names = partialNames(name);
    const jsm = await jetstreamManager(nats.nc);
    const appended = async (): Promise<number> =>
      (await jsm.streams.info(names.stream, { subjects_filter: names.subject('mt-one') })).state.subjects?.[names.subject('mt-one')] ?? 0;
    expect(await appended()).toBe(1);
    // Under flushTokens (3): buffered until the turn closes.
    t.append([100, 101], [-0.5, -0.25]);
    await t.closeTurn({ weightVersion: 3, finishReason: 'tool_call' });
    expect(await appended()).toBe(2);
    await t.waitForAction({ actionId: 'act-1', tool: 'lookup' });
    await t.appendObservation([900], lookup('act-1'));
    t.append([102], [-1]);
    await t.closeTurn({ weightVersion: 3, finishReason: 'stop' });
    expect(await appended()).toBe(5);
    const read = await p.read('mt-one');
    expect(read?.segments).toEqual([
      { kind: 'generated', length: 2, weightVersion: 3, finishReason: 'tool_call' },
      { kind: 'observation', length: 1, action: lookup('act-1') },
      { kind: 'generated', length: 1, weightVersion: 3, finishReason: 'stop' },
    ]);
    expect(Array.from(read!.tokens)).toEqual([100, 101, 900, 102]);
    expect(Array.from(read!.logprobs)).toEqual([-0.5, -0.25, 0, -1]);
  });
});
