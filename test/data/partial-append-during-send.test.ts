/**
 * Tokens appended while a flush of the same run of tokens is on its way to nats-server (a real
 * one): the engine streams on while the partial pool stores what it had. They must stay in the
 * trajectory's count and reach the log with the next message. Lost there, the turn closed after
 * them was short by as many tokens, and the record was refused at completion with
 * ERR_SEGMENT_LENGTHS (a moved trajectory of the agentic bench: "segment lengths add up to 118,
 * not the response length 121"); a rollout resuming the log re-prefilled a context without them.
 */
import { afterAll, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import { ExperienceWriter, PartialPool, PartialTrajectory, type PartialStart } from '../../src/data/index.js';
import type { TrajectoryHost } from '../../src/data/partial/partial-trajectory.js';
import { natsFixture } from './helpers.js';

const nats = natsFixture();
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of closers.reverse()) await c();
});

const PROMPT = [11, 12, 13];
const start: PartialStart = {
  trajectoryId: 'during-send-1',
  promptId: 'p',
  groupId: 'g',
  sampleIndex: 0,
  groupSize: 1,
  weightVersion: 3,
  promptLength: PROMPT.length,
  promptTokens: new Uint8Array(Int32Array.from(PROMPT).buffer),
};

it('tokens appended while their run is being stored are kept, logged, and covered by the closed turn', async () => {
  const registry = new Registry();
  const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: 'ads', registry });
  const pool = await PartialPool.open({ nc: nats.nc, pool: 'ads', registry, flushTokens: 3, flushMs: 60_000, writer });
  closers.push(() => pool.close());
  // The pool writes the start; the trajectory then goes on through a host whose publish lets the
  // test act at the moment a message is on its way (the real JetStream client does the rest).
  const first = await pool.start('r1', start);
  first.release();
  const state = (await pool.read(start.trajectoryId))!;
  const js = jetstream(nats.nc);
  let onPublish: (() => void) | undefined;
  const gated = Object.create(js) as JetStreamClient;
  gated.publish = (...args: Parameters<JetStreamClient['publish']>) => {
    const ack = js.publish(...args);
    const hook = onPublish;
    onPublish = undefined;
    hook?.();
    return ack;
  };
  const host: TrajectoryHost = {
    js: gated,
    jsm: await jetstreamManager(nats.nc),
    stream: pool.names.stream,
    subject: (id) => pool.names.subject(id),
    flushTokens: 3,
    onAppend: () => undefined,
    onFenced: () => undefined,
    forget: () => undefined,
  };
  const t = new PartialTrajectory(host, state.start, 'r1', state.lastSeq, 0, state.startSeq);

  // The engine streams 3 tokens (a flush starts: flushTokens is 3), then 2 more while that
  // flush's message is on its way.
  const streamedDuringSend = new Promise<void>((resolve) => {
    onPublish = () => {
      t.append([103, 104], [-4, -5]);
      resolve();
    };
  });
  t.append([100, 101, 102], [-1, -2, -3]);
  await streamedDuringSend;
  await t.flush();
  expect(t.tokenCount).toBe(5);

  // The turn ends at a tool call: it covers all 5 tokens, here and in the log.
  await t.closeTurn({ weightVersion: 3, finishReason: 'tool_call' });
  const turn = { kind: 'generated', length: 5, weightVersion: 3, finishReason: 'tool_call' };
  expect(t.segments).toEqual([turn]);
  const logged = (await pool.read(start.trajectoryId))!;
  expect(Array.from(logged.tokens)).toEqual([100, 101, 102, 103, 104]);
  expect(Array.from(logged.logprobs)).toEqual([-1, -2, -3, -4, -5]);
  expect(logged.segments).toEqual([turn]);

  // The record of what the engine generated (as GenerationTask writes it) is taken.
  const result = await pool.complete(t, {
    id: start.trajectoryId,
    promptId: 'p',
    groupId: 'g',
    sampleIndex: 0,
    groupSize: 1,
    weightVersion: 3,
    reward: 1,
    tokens: Int32Array.from([...PROMPT, 100, 101, 102, 103, 104]),
    logprobs: Float32Array.from([0, 0, 0, -1, -2, -3, -4, -5]),
    promptLength: PROMPT.length,
    responseLength: 5,
    createdAt: Date.now(),
    rolloutId: 'r1',
    segments: t.segments,
  });
  expect(result.duplicate).toBe(false);
});
