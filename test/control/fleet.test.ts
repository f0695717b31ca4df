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
import { pino } from 'pino';
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

/**
 * Dead-after for the tests that watch a member die: 10 heartbeats (suspected after 5). On a loaded
 * 2-core machine this process or nats-server can be held for a few hundred ms, and a heartbeat
 * read after the manager's next tick looks missed: with 800 ms (suspected after 400, two
 * heartbeats) a live member could be suspected or declared dead when the exact counts below were
 * read. Besides, the counts are polled until they hold rather than read once: a member suspected
 * for a moment is heard again, and one declared dead joins again.
 */
const SHORT_DEAD_AFTER_MS = 2000;

async function fleet(
  job: string,
  relays: number,
  rollouts: number,
  options: { deadAfterMs?: number; connections?: number; onRegistered?: (id: string) => void } = {},
): Promise<Fleet> {
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
  // Each agent logs "registered with the manager" when the manager answered its registration.
  const onRegistered = options.onRegistered;
  const logger = onRegistered
    ? pino(
        { level: 'info' },
        {
          write: (line: string) => {
            const entry = JSON.parse(line) as { member?: string; msg?: string };
            if (entry.msg === 'registered with the manager' && entry.member) onRegistered(entry.member);
          },
        },
      )
    : undefined;
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
      ...(logger ? { logger: logger.child({ member: id }) } : {}),
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
    const f = await fleet('gauges', 3, 4, { deadAfterMs: SHORT_DEAD_AFTER_MS });
    /** The fleet gauges as a scrape reads them. */
    const gauges = async (): Promise<Record<string, unknown>> => ({
      relaysAlive: await metricValue(f.registry, 'laminar_manager_members', { kind: 'relay', state: 'alive' }),
      rolloutsAlive: await metricValue(f.registry, 'laminar_manager_members', { kind: 'rollout', state: 'alive' }),
      rolloutsDead: await metricValue(f.registry, 'laminar_manager_members', { kind: 'rollout', state: 'dead' }),
      kvUsedOf: (await f.registry.getSingleMetric('laminar_manager_rollout_kv_used')!.get()).values.map((v) => v.labels.rollout).sort(),
    });
    try {
      await expect
        .poll(() => alive(f.manager) === 7 && f.manager.status().rollouts.every((r) => 'kvUsed' in r), { timeout: 10_000, message: 'the fleet did not join' })
        .toBe(true);
      // Polled: on a loaded machine a live member may be suspected for a moment (and heard again).
      await expect
        .poll(gauges, { timeout: 10_000 })
        .toEqual({ relaysAlive: 3, rolloutsAlive: 4, rolloutsDead: 0, kvUsedOf: ['rollout-0', 'rollout-1', 'rollout-2', 'rollout-3'] });
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
      // The dead rollout left the gauges; the others are (again, if a moment of load made one suspected) alive.
      await expect
        .poll(gauges, { timeout: 10_000 })
        .toEqual({ relaysAlive: 3, rolloutsAlive: 3, rolloutsDead: 1, kvUsedOf: ['rollout-0', 'rollout-1', 'rollout-3'] });
    } finally {
      await f.stop();
    }
  });

  it('`laminar status` filters the fleet by kind and health, summarises it, and refuses a bad filter before connecting', async () => {
    const f = await fleet('cli', 3, 6, { deadAfterMs: SHORT_DEAD_AFTER_MS });
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

      // Polled: on a loaded machine a live member may be suspected for a moment (and heard again).
      await expect
        .poll(async () => JSON.parse(await laminar('--summary', '--json')) as unknown, { timeout: 20_000 })
        .toMatchObject({ members: { relay: { alive: 3, suspected: 0, dead: 0 }, rollout: { alive: 5, suspected: 0, dead: 1 } }, chain: { relays: 3 } });
      // The table says the same (the dead rollout stays dead: only the counts of the living can move).
      await expect.poll(() => laminar('--summary'), { timeout: 20_000 }).toMatch(/rollout\s+5\s+0\s+1/);

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
    // Who registered (the manager answered) since the restart began: after a restart, every
    // member must have registered again (its connection says "reconnect"), and the manager, which
    // answers, has then heard it.
    let restarting = false;
    const registeredAgain = new Set<string>();
    const f = await fleet('restart', 20, 200, { connections: 8, onRegistered: (id) => restarting && registeredAgain.add(id) });
    try {
      await expect
        .poll(() => alive(f.manager) === 220 && f.manager.status().chain.length === 20, { timeout: 30_000, message: 'the fleet did not join' })
        .toBe(true);
      const epoch = f.manager.status().epoch;
      restarting = true;
      await nats.restart({ kill: true });
      // Back: every member registered again after the restart. A verdict caused by the restart
      // (the silence while nats-server was away) comes before that or never: each member's silence
      // ended when the manager answered it. So the counts are read now, without waiting longer.
      await expect.poll(() => registeredAgain.size, { timeout: 60_000, message: 'the fleet did not register again' }).toBe(220);
      expect(await metricValue(f.registry, 'laminar_manager_deaths_total', { kind: 'relay', cause: 'heartbeat' })).toBe(0);
      expect(await metricValue(f.registry, 'laminar_manager_deaths_total', { kind: 'rollout', cause: 'heartbeat' })).toBe(0);
      expect(
        f.manager
          .status()
          .members.filter((m) => m.health === 'dead')
          .map((m) => m.id),
      ).toEqual([]);
      // Heard again by heartbeat too, not only by registration (a suspicion under load clears with the next one).
      await expect
        .poll(() => alive(f.manager) === 220 && [...f.agents.values()].every((a) => a.isRegistered), { timeout: 30_000, message: 'the fleet is not all alive' })
        .toBe(true);
      // The chain was not rebuilt for a restart nobody died in.
      expect(f.manager.status().epoch).toBe(epoch);
      expect(await metricValue(f.registry, 'laminar_manager_deaths_total', { kind: 'relay', cause: 'heartbeat' })).toBe(0);
      expect(await metricValue(f.registry, 'laminar_manager_deaths_total', { kind: 'rollout', cause: 'heartbeat' })).toBe(0);
    } finally {
      await f.stop();
    }
  });
});
