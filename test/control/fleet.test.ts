/**
 * The manager with a fleet of members on a real nats-server: the fleet gauges are read at scrape
 * time (a member that is gone drops out), only members that act on the chain plan follow it
 * (a KV watch is a consumer on the server), and a few hundred members ride out a nats-server
 * restart without anyone being declared dead. `npm run bench -- control` measures the same at a
 * thousand-GPU scale.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import { MemberAgent } from '../../src/control/member-agent.js';
import { controlNames } from '../../src/control/subjects.js';
import { Manager } from '../../src/manager/manager.js';
import { startNatsServer, type NatsServer } from '../../src/services/index.js';
import { metricValue, natsClient } from '../data/helpers.js';
import { CLI } from '../helpers/relay.js';

let nats: NatsServer;

beforeAll(async () => {
  nats = await startNatsServer({ jetstream: true });
});
afterAll(async () => {
  await nats.stop();
});

interface Fleet {
  manager: Manager;
  registry: Registry;
  agents: Map<string, MemberAgent>;
  stop(): Promise<void>;
}

async function fleet(job: string, relays: number, rollouts: number, options: { deadAfterMs?: number; connections?: number } = {}): Promise<Fleet> {
  const connections: NatsConnection[] = [];
  const managerNc = await natsClient(nats.url);
  connections.push(managerNc);
  const registry = new Registry();
  const deadAfterMs = options.deadAfterMs ?? 6000;
  const manager = new Manager({
    nc: managerNc,
    job,
    registry,
    leaseMs: 1000,
    suspectAfterMs: deadAfterMs / 2,
    deadAfterMs,
    tickMs: 50,
    rollouts: { partials: null, prompts: null, repackIntervalMs: 0 },
  });
  await manager.start();
  await manager.whenLeader();
  // Members share a few connections (a test process does not need one per member).
  for (let i = 0; i < (options.connections ?? 4); i++) connections.push(await natsClient(nats.url));
  const agents = new Map<string, MemberAgent>();
  const total = relays + rollouts;
  for (let i = 0; i < total; i++) {
    const nc = connections[1 + (i % (connections.length - 1))]!;
    const relay = i < relays;
    const id = relay ? `relay-${i}` : `rollout-${i - relays}`;
    const agent = new MemberAgent({
      nc,
      job,
      id,
      kind: relay ? 'relay' : 'rollout',
      host: `host-${relay ? i : Math.floor((i - relays) / 8)}`,
      address: relay ? `10.0.0.${i + 1}:13337` : null,
      heartbeatMs: 200,
      state: () => ({ epoch: null, holds: relay ? [{ model: 'm', version: 1 }] : [], receiving: [], downstream: null }),
      ...(relay
        ? { onPlan: () => undefined }
        : {
            rolloutLoad: () => ({
              state: 'generating' as const,
              model: 'm',
              weightVersion: 1,
              kvUsed: 0.25 + (i % 4) / 10,
              kvPrev: 0.9,
              running: 8,
              waiting: 0,
              owned: 8,
              tokensPerSecond: 100,
            }),
          }),
    });
    agents.set(id, agent);
    agent.start();
  }
  return {
    manager,
    registry,
    agents,
    stop: async () => {
      for (const a of agents.values()) await a.close();
      await manager.close();
      await Promise.all(connections.map((c) => c.close()));
    },
  };
}

function alive(manager: Manager): number {
  return manager.status().members.filter((m) => m.health === 'alive').length;
}

describe('manager and a fleet of members', () => {
  it('reads the fleet gauges at scrape time: a rollout that died leaves them', async () => {
    const f = await fleet('gauges', 3, 4, { deadAfterMs: 800 });
    try {
      await expect
        .poll(() => alive(f.manager) === 7 && f.manager.status().rollouts.every((r) => 'kvUsed' in r), { timeout: 10_000, message: 'the fleet did not join' })
        .toBe(true);
      expect(await metricValue(f.registry, 'laminar_manager_members', { kind: 'relay', state: 'alive' })).toBe(3);
      expect(await metricValue(f.registry, 'laminar_manager_members', { kind: 'rollout', state: 'alive' })).toBe(4);
      expect(await metricValue(f.registry, 'laminar_manager_rollout_kv_used', { rollout: 'rollout-2' })).toBeCloseTo(0.25 + ((3 + 2) % 4) / 10);
      expect(await metricValue(f.registry, 'laminar_manager_rollout_weight_version', { rollout: 'rollout-2' })).toBe(1);
      expect(await metricValue(f.registry, 'laminar_manager_relay_progress', { relay: 'relay-1', model: 'm' })).toBe(1);

      await f.agents.get('rollout-2')!.close();
      await expect
        .poll(() => f.manager.status().members.some((m) => m.id === 'rollout-2' && m.health === 'dead'), {
          timeout: 10_000,
          message: 'the silent rollout was not declared dead',
        })
        .toBe(true);
      expect(await metricValue(f.registry, 'laminar_manager_members', { kind: 'rollout', state: 'dead' })).toBe(1);
      expect(await metricValue(f.registry, 'laminar_manager_members', { kind: 'rollout', state: 'alive' })).toBe(3);
      const kv = (await f.registry.getSingleMetric('laminar_manager_rollout_kv_used')!.get()).values;
      expect(kv.map((v) => v.labels.rollout).sort()).toEqual(['rollout-0', 'rollout-1', 'rollout-3']);
    } finally {
      await f.stop();
    }
  });

  it('`laminar status` filters the fleet by kind and health, summarises it, and refuses a bad filter before connecting', async () => {
    const f = await fleet('cli', 3, 6, { deadAfterMs: 800 });
    const laminar = async (...args: string[]): Promise<string> =>
      (await promisify(execFile)(process.execPath, [CLI, 'status', '--nats', nats.url, '--job', 'cli', ...args], { encoding: 'utf8' })).stdout;
    try {
      await expect
        .poll(() => alive(f.manager) === 9 && f.manager.status().rollouts.every((r) => 'kvUsed' in r), { timeout: 10_000, message: 'the fleet did not join' })
        .toBe(true);
      await f.agents.get('rollout-4')!.close();
      await expect
        .poll(() => f.manager.status().members.some((m) => m.id === 'rollout-4' && m.health === 'dead'), {
          timeout: 10_000,
          message: 'the silent rollout was not declared dead',
        })
        .toBe(true);

      const summary = JSON.parse(await laminar('--summary', '--json')) as { members: Record<string, Record<string, number>>; chain: { relays: number } };
      expect(summary.members.relay).toEqual({ alive: 3, suspected: 0, dead: 0 });
      expect(summary.members.rollout).toEqual({ alive: 5, suspected: 0, dead: 1 });
      expect(summary.chain.relays).toBe(3);
      expect(await laminar('--summary')).toMatch(/rollout\s+5\s+0\s+1/);

      const dead = JSON.parse(await laminar('--kind', 'rollout', '--health', 'dead', '--json')) as {
        chain: unknown[];
        members: { id: string }[];
        rollouts: { id: string }[];
      };
      expect(dead.chain).toEqual([]);
      expect(dead.members.map((m) => m.id)).toEqual(['rollout-4']);
      expect(dead.rollouts.map((r) => r.id)).toEqual(['rollout-4']);
      const table = await laminar('--kind', 'relay');
      expect(table).toMatch(/relay-2\s+10\.0\.0\.3:13337/);
      expect(table).not.toContain('rollout-');

      // A typo fails at once with its code, without waiting on any server.
      const refused = await promisify(execFile)(process.execPath, [CLI, 'status', '--nats', 'nats://127.0.0.1:1', '--kind', 'relays'], {
        encoding: 'utf8',
      }).catch((err: unknown) => err);
      expect(refused).toMatchObject({
        code: 1,
        stderr: expect.stringContaining('ERR_INVALID_ARG: --kind: "relays" is not one of relay, rollout, trainer') as unknown,
      });
    } finally {
      await f.stop();
    }
  });

  it('has only the members that act on the plan follow it (one KV consumer each)', async () => {
    const f = await fleet('watchers', 3, 12);
    try {
      await expect
        .poll(() => alive(f.manager) === 15 && f.manager.status().chain.length === 3, { timeout: 10_000, message: 'the fleet did not join' })
        .toBe(true);
      const probe = await natsClient(nats.url);
      const jsm = await jetstreamManager(probe);
      const stream = `KV_${controlNames('watchers').bucket}`;
      // Each relay watches the plan; the rollouts, which never use it, do not (15 watchers if they did).
      const planWatchers = async (): Promise<number> =>
        (await jsm.consumers.list(stream).next()).filter((c) => c.config.filter_subject === `$KV.${controlNames('watchers').bucket}.plan`).length;
      await expect.poll(async () => (await planWatchers()) === 3, { timeout: 5000, message: 'three plan watchers' }).toBe(true);
      await new Promise((r) => setTimeout(r, 1000));
      expect(await planWatchers()).toBe(3);
      await probe.close();
    } finally {
      await f.stop();
    }
  });

  it('declares nobody dead when 20 relays and 200 rollouts ride out a nats-server restart', async () => {
    const f = await fleet('restart', 20, 200, { connections: 8 });
    try {
      await expect
        .poll(() => alive(f.manager) === 220 && f.manager.status().chain.length === 20, { timeout: 30_000, message: 'the fleet did not join' })
        .toBe(true);
      const epoch = f.manager.status().epoch;
      await nats.restart({ kill: true });
      // Back: every member registered again and heard from since the restart.
      await expect
        .poll(
          () => [...f.agents.values()].every((a) => a.isRegistered) && f.manager.status().members.every((m) => m.health === 'alive' && m.heardMsAgo < 1000),
          { timeout: 30_000, message: 'the fleet did not come back' },
        )
        .toBe(true);
      // A death would come within dead-after (6 s) of the silence.
      await new Promise((r) => setTimeout(r, 7000));
      expect(await metricValue(f.registry, 'laminar_manager_deaths_total', { kind: 'relay', cause: 'heartbeat' })).toBe(0);
      expect(await metricValue(f.registry, 'laminar_manager_deaths_total', { kind: 'rollout', cause: 'heartbeat' })).toBe(0);
      expect(alive(f.manager)).toBe(220);
      // The chain was not rebuilt for a restart nobody died in.
      expect(f.manager.status().epoch).toBe(epoch);
    } finally {
      await f.stop();
    }
  });
});
