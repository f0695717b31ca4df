/**
 * Test helpers for rollout agents on reference engines: TinyLM versions published into a relay by
 * the project's Python (`python -m laminar.testing.publish`), and in-process agents on real
 * services.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import type { WeightsVariant } from '../../src/relay/fp8/model-id.js';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, PromptPool, type ClaimOrder } from '../../src/data/index.js';
import { Manager } from '../../src/manager/manager.js';
import type { RolloutCoordinatorOptions } from '../../src/manager/rollouts/coordinator.js';
import { RolloutAgent, SglangClient, targetMatchReward, type EngineClient, type RequestDefaults } from '../../src/rollout-agent/index.js';
import { spawnReferenceEngine, type ReferenceEngine } from '../../src/services/index.js';
import { natsClient } from '../data/helpers.js';
import { spawnRelay, tempShmDir, type RelayProcess } from './relay.js';
import { runPublish } from './tiny-publisher.js';

/** A TinyLM small enough that tests generate hundreds of tokens in well under a second. */
export const TEST_MODEL_CONFIG = { d_model: 32, n_layers: 2, n_heads: 2, max_seq_len: 512 };

/**
 * Publishes TinyLM versions (initialised from seed + version) into the relay at `socket`, with
 * `laminar.testing.publish` (in the test process's one publisher: ./tiny-publisher.ts);
 * `config` is the model's (default TEST_MODEL_CONFIG).
 */
export async function publishTiny(
  socket: string,
  model: string,
  versions: number[],
  options: { configDir?: string; broken?: string; config?: Record<string, number> } = {},
): Promise<void> {
  const args = ['--socket', socket, '--model', model, '--versions', ...versions.map(String)];
  args.push('--config', JSON.stringify(options.config ?? TEST_MODEL_CONFIG));
  if (options.configDir) args.push('--config-dir', options.configDir);
  if (options.broken) args.push('--break', options.broken);
  await runPublish(args);
}

/** Writes the model's config.json (default TEST_MODEL_CONFIG) into `dir` (the relays' --engine-files) without publishing. */
export async function writeTinyConfig(dir: string, config: Record<string, number> = TEST_MODEL_CONFIG): Promise<void> {
  await runPublish(['--config', JSON.stringify(config), '--config-dir', dir]);
}

/** A test file's relay (holding TinyLM's engine files) and one reference engine: see oneEngineFixture(). */
export interface OneEngineWorld {
  relay: RelayProcess;
  engine: ReferenceEngine;
  /** Run at the file's end, last in first, before the engine and the relay stop (agents, clients). */
  closers: Array<() => Promise<unknown>>;
}

/**
 * Starts, for the whole file, a relay whose --engine-files hold TinyLM's config (directory name
 * `tmpPrefix`...) and one reference engine; at the end runs the closers, then stops both. Call it
 * after servicesFixture(), whose servers must outlive the agents the closers close.
 */
export function oneEngineFixture(tmpPrefix: string): OneEngineWorld {
  const world = { closers: [] } as unknown as OneEngineWorld;
  let tmp: ReturnType<typeof tempShmDir> | undefined;
  beforeAll(async () => {
    tmp = tempShmDir(tmpPrefix);
    const configDir = join(tmp.dir, 'engine-files');
    mkdirSync(configDir);
    await writeTinyConfig(configDir);
    [world.relay, world.engine] = await Promise.all([
      spawnRelay(tmp.dir, ['--no-pin', '--engine-files', configDir]),
      spawnReferenceEngine('engine', { kvCapacityTokens: 4096, seed: 1 }),
    ]);
  }, 120_000);
  afterAll(async () => {
    for (const close of world.closers.splice(0).reverse()) await close().catch(() => undefined);
    // Unset when beforeAll failed before starting them.
    const started = world as Partial<OneEngineWorld>;
    await started.engine?.kill('SIGTERM');
    await started.relay?.stop('SIGKILL');
    tmp?.cleanup();
  });
  return world;
}

/** Fixed-length responses (no EOS), seeded per trajectory. */
export const FIXED_LENGTH: RequestDefaults = {
  maxNewTokens: 64,
  temperature: 1,
  topP: 1,
  topK: -1,
  stopTokenIds: [],
  ignoreEos: true,
  seeded: true,
};

export interface TestAgent {
  agent: RolloutAgent;
  registry: Registry;
  nc: NatsConnection;
  close(): Promise<void>;
}

export async function startTestAgent(options: {
  natsUrl: string;
  connect: (url: string) => Promise<NatsConnection>;
  redis: Redis;
  job: string;
  id: string;
  engineUrl: string;
  relaySocket: string;
  model: string;
  batchPrompts?: number;
  defaults?: Partial<RequestDefaults>;
  engine?: EngineClient;
  partialRollout?: boolean;
  /** Continuous mode: trajectories generating at once (0 or absent: batch mode). */
  maxInFlight?: number;
  weights?: WeightsVariant;
  /** Which pending prompt the agent's claims take (absent: the agent's default, fifo). */
  claimOrder?: ClaimOrder;
}): Promise<TestAgent> {
  const nc = await options.connect(options.natsUrl);
  const registry = new Registry();
  const agent = await RolloutAgent.start({
    nc,
    redis: options.redis,
    job: options.job,
    id: options.id,
    model: options.model,
    relaySocket: options.relaySocket,
    ...(options.weights ? { weights: options.weights } : {}),
    engine: options.engine ?? new SglangClient(options.engineUrl),
    defaults: { ...FIXED_LENGTH, ...options.defaults },
    reward: targetMatchReward,
    batchPrompts: options.batchPrompts ?? 4,
    partialRollout: options.partialRollout ?? false,
    ...(options.maxInFlight ? { maxInFlight: options.maxInFlight } : {}),
    ...(options.claimOrder ? { claimOrder: options.claimOrder } : {}),
    heartbeatMs: 200,
    promptPool: options.job,
    partialPool: options.job,
    buffer: options.job,
    registry,
  });
  return {
    agent,
    registry,
    nc,
    close: async () => {
      await agent.close();
      await nc.close();
    },
  };
}

/** A job's prompt pool (loaded with `prompts`), experience writer and partial pool, on a services fixture. */
export async function jobPools(
  fx: { nc: NatsConnection; redis: Redis },
  job: string,
  prompts: { id: string; payload: unknown; n: number }[],
  closers: Array<() => Promise<unknown>>,
): Promise<{ prompts: PromptPool; writer: ExperienceWriter; partials: PartialPool }> {
  const pool = await PromptPool.open({ redis: fx.redis, name: job });
  await pool.load(prompts);
  const writer = await ExperienceWriter.open({ nc: fx.nc, buffer: job, groups: pool });
  const partials = await PartialPool.open({ nc: fx.nc, pool: job, writer });
  closers.push(() => partials.close());
  return { prompts: pool, writer, partials };
}

/**
 * The job's manager, leader, on its own connection, with the fast failure detection the agent
 * tests use (dead after 1.5 s); `orphanWaitMs` is how long a dead rollout's trajectories wait for
 * a rollout of their version; `repack` turns repack on (off by default) with its planner and limits.
 */
export async function jobManager(
  natsUrl: string,
  job: string,
  p: { prompts: PromptPool; partials: PartialPool },
  closers: Array<() => Promise<unknown>>,
  orphanWaitMs = 30_000,
  repack: Pick<RolloutCoordinatorOptions, 'repackIntervalMs' | 'planner' | 'limits'> = {},
): Promise<Manager> {
  const managerNc = await natsClient(natsUrl);
  const m = new Manager({
    nc: managerNc,
    job,
    registry: new Registry(),
    leaseMs: 1000,
    suspectAfterMs: 800,
    deadAfterMs: 1500,
    tickMs: 50,
    rollouts: { partials: p.partials, prompts: p.prompts, repackIntervalMs: 0, orphanWaitMs, startupGraceMs: 0, commandTimeoutMs: 10_000, ...repack },
  });
  await m.start();
  await m.whenLeader(10_000);
  closers.push(async () => {
    await m.close();
    await managerNc.close();
  });
  return m;
}
