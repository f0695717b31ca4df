/**
 * A rollout agent's engine session on real processes (a reference engine, a relay started after
 * the agent, nats-server, redis-server): the version watch that could not reach the relay at the
 * session's start is tried again until it can, and a session that fails (a throw in its serve
 * loop) closes its rollout client, so no rollout is left heartbeating beside the next session's.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { PromptPool } from '../../src/data/index.js';
import { watchRetryMs } from '../../src/rollout-agent/agent.js';
import { spawnReferenceEngine, type ReferenceEngine } from '../../src/services/index.js';
import { natsClient, servicesFixture } from '../data/helpers.js';
import { publishTiny, startTestAgent, writeTinyConfig, type TestAgent } from '../helpers/agents.js';
import { spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const fx = servicesFixture();
const JOB = 'session';
const MODEL = 'session/tiny';
let tmp: ReturnType<typeof tempShmDir>;
let engine: ReferenceEngine;
let relay: RelayProcess | null = null;
let agent: TestAgent | null = null;

beforeAll(async () => {
  tmp = tempShmDir('laminar-agent-session-');
  engine = await spawnReferenceEngine('engine session', { kvCapacityTokens: 4096, seed: 5 });
  await PromptPool.open({ redis: fx.redis, name: JOB });
}, 120_000);
afterAll(async () => {
  await agent?.close();
  // Unset when beforeAll failed before starting them.
  await (engine as ReferenceEngine | undefined)?.kill('SIGTERM');
  await relay?.stop('SIGKILL');
  (tmp as typeof tmp | undefined)?.cleanup();
});

describe('rollout agent: engine sessions', () => {
  it('backs off the version watch from 250 ms to 5 s', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 50].map(watchRetryMs)).toEqual([250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
  });

  it('watches a relay that was not up when the session started, once it is', async () => {
    const configDir = join(tmp.dir, 'engine-files');
    mkdirSync(configDir);
    await writeTinyConfig(configDir);
    agent = await startTestAgent({
      natsUrl: fx.nats.url,
      connect: natsClient,
      redis: fx.redis,
      job: JOB,
      id: 'ag-s',
      engineUrl: engine.url,
      relaySocket: join(tmp.dir, 'relay.sock'),
      model: MODEL,
    });
    // The session is open (engine up) with no relay to watch.
    await expect.poll(() => agent!.agent.sessionCount, { timeout: 30_000 }).toBe(1);
    expect(agent.agent.status().watching).toBe(false);

    relay = await spawnRelay(tmp.dir, ['--no-pin', '--engine-files', configDir]);
    await publishTiny(relay.socketPath, MODEL, [0]);
    // Before the fix the watch was tried once, at the session's start, and never again.
    await expect.poll(() => agent!.agent.status().watching, { timeout: 30_000, message: 'the version watch never reached the relay' }).toBe(true);
    await expect.poll(() => agent!.agent.client?.version, { timeout: 30_000 }).toBe(0);
  }, 120_000);

  it('closes the rollout client of a session whose serve loop throws, then serves a new session', async () => {
    const a = agent!.agent;
    const first = a.client!;
    // A bug in the loop: the next weight refresh throws (the real one runs again after it).
    const loop = a as unknown as { refreshWeights: (...args: unknown[]) => Promise<boolean> };
    vi.spyOn(loop, 'refreshWeights').mockRejectedValueOnce(new Error('a bug in the serve loop'));
    // A newer version wakes the loop (the watch), which refreshes the weights: the throw.
    await publishTiny(relay!.socketPath, MODEL, [1]);
    await expect.poll(() => a.sessionCount, { timeout: 30_000, message: 'no new session after the throw' }).toBe(2);
    // Before the fix the first session's client was never closed: it went on heartbeating.
    expect(first.isClosed).toBe(true);
    expect(a.client).not.toBe(first);
    await expect.poll(() => a.client?.version, { timeout: 30_000 }).toBe(1);
    expect(a.client!.isClosed).toBe(false);
  }, 120_000);
});
