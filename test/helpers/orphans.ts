/**
 * Orphaned trajectories for the coordinator's tests: a dead rollout's partial logs, a live
 * rollout that takes every repack-in it is sent and answers done, and the coordinator itself.
 */
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { SCHEMA_VERSION, commandSchema, decode, encode } from '../../src/control/schema.js';
import type { Redis } from 'ioredis';
import { PartialPool, PromptPool, type PartialStart } from '../../src/data/index.js';
import { RolloutCoordinator, type RolloutCoordinatorOptions } from '../../src/manager/rollouts/coordinator.js';
import { RolloutCoordinatorMetrics } from '../../src/manager/rollouts/metrics.js';

/** What the coordinator logs at warn and above, one parsed line each. */
export type LogLine = { msg: string } & Record<string, unknown>;

/**
 * A rollout coordinator leading since just now, for the orphan tests: members answer on
 * `test.member.<id>`, no periodic repack, no startup grace; its metrics in `registry`, its
 * warnings and errors in `logs`. `options` sets the rest (the pools, the failover's timings).
 */
export function orphanCoordinator(
  nc: NatsConnection,
  options: Pick<RolloutCoordinatorOptions, 'partials' | 'prompts'> & Partial<RolloutCoordinatorOptions>,
): { coordinator: RolloutCoordinator; registry: Registry; logs: LogLine[] } {
  const registry = new Registry();
  const logs: LogLine[] = [];
  const coordinator = new RolloutCoordinator({
    nc,
    memberSubject: (id) => `test.member.${id}`,
    model: 'm',
    repackIntervalMs: 0,
    startupGraceMs: 0,
    metrics: new RolloutCoordinatorMetrics(registry),
    log: pino({ level: 'warn' }, { write: (line: string) => void logs.push(JSON.parse(line) as LogLine) }),
    ...options,
  });
  coordinator.reset(Date.now() - 1);
  return { coordinator, registry, logs };
}

/** Starts trajectories g0/0 .. g<n-1>/0 of weight version 2 under `owner`, then lets them go. */
export async function startOrphans(pool: PartialPool, owner: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const t = await pool.start(owner, { trajectoryId: `g${i}/0`, promptId: `p${i}`, groupId: `g${i}`, sampleIndex: 0, groupSize: 1, weightVersion: 2 });
    t.release();
  }
}

/** Answers every repack-in on `subject` with done, taking all; the trajectories of each command go to `received`. */
export function takeRepackIns(nc: NatsConnection, subject: string, received: string[][]): Subscription {
  return nc.subscribe(subject, {
    callback: (_err, msg) => {
      const command = decode(commandSchema, msg.data, 'command');
      if (command.t !== 'repack-in') return;
      received.push(command.trajectories);
      msg.respond(encode({ v: SCHEMA_VERSION, t: 'done', moved: [], taken: command.trajectories.length, completed: 0, lost: 0 }));
    },
  });
}

/**
 * A prompt pool `name` holding one prompt p0 (one sample), claimed by the dead rollout `ro-dead`,
 * which started its sample p0#0/0 (weight version 2) in the partial pool `name` and is gone.
 */
export async function claimedOrphan(redis: Redis, nc: NatsConnection, name: string): Promise<{ pool: PromptPool; partials: PartialPool; start: PartialStart }> {
  const pool = await PromptPool.open({ redis, name, defaultGroupSize: 1 });
  await pool.load([{ id: 'p0', payload: 'question' }]);
  const [claim] = await pool.claim('ro-dead', 1);
  if (claim?.groupId !== 'p0#0') throw new Error(`the dead rollout claimed ${claim?.groupId}, not p0#0`);
  const partials = await PartialPool.open({ nc, pool: name });
  const start = { trajectoryId: 'p0#0/0', promptId: 'p0', groupId: 'p0#0', sampleIndex: 0, groupSize: 1, weightVersion: 2 };
  (await partials.start('ro-dead', start)).release();
  return { pool, partials, start };
}
