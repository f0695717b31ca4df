/**
 * A relay between its registration and its first heartbeat, on a real nats-server with an
 * in-process manager: it is in the chain at once, and its status says that it has reported
 * nothing yet (`bytes: null`), which the dashboard's row (`reported: false`) and `laminar
 * status` (its sent / received cell) say in the same words. Its first heartbeat fills both in.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import { MemberAgent } from '../../src/control/member-agent.js';
import { SCHEMA_VERSION, decode, encode, registerReplySchema, type Register } from '../../src/control/schema.js';
import { controlNames } from '../../src/control/subjects.js';
import { dashboardState } from '../../src/manager/dashboard/from-status.js';
import { NO_HEARTBEAT_YET } from '../../src/manager/dashboard/model.js';
import { Manager } from '../../src/manager/manager.js';
import { formatStatus } from '../../src/manager/status-table.js';
import { startNatsServer, type NatsServer } from '../../src/services/index.js';
import { natsClient } from '../data/helpers.js';

const JOB = 'before-heartbeat';
/** Longer than any test: the silent relay is never suspected. */
const NEVER_MS = 3_600_000;
/** What a relay's heartbeat says of its delta broadcast (broadcast/delta/): 1 MiB on the wire for 100 MiB of chunks. */
const DELTA = {
  mode: 'on' as const,
  out: { chunks: { same: 0, sparse: 0, full: 0 }, fullBytes: 0, wireBytes: 0 },
  in: { chunks: { same: 90, sparse: 10, full: 0 }, fullBytes: 100 * 2 ** 20, wireBytes: 2 ** 20 },
};

describe('a relay that has registered but not heartbeated yet', () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let manager: Manager;
  const agents: MemberAgent[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ jetstream: true });
    nc = await natsClient(nats.url);
    manager = new Manager({
      nc,
      job: JOB,
      registry: new Registry(),
      leaseMs: 1000,
      // Never suspected here: the silent relay must stay alive for the whole test.
      suspectAfterMs: NEVER_MS,
      deadAfterMs: 2 * NEVER_MS,
      tickMs: 50,
      rollouts: { partials: null, prompts: null, repackIntervalMs: 0 },
    });
    await manager.start();
    await manager.whenLeader();
  });

  afterAll(async () => {
    for (const agent of agents) await agent.close();
    await manager.close();
    await nc.close();
    await nats.stop();
  });

  /** A relay's registration, as a relay sends it, and no heartbeat after it (a MemberAgent sends its first at once). */
  async function registerOnly(id: string, address: string): Promise<void> {
    const request: Register = {
      v: SCHEMA_VERSION,
      t: 'register',
      id,
      kind: 'relay',
      incarnation: 'a1b2c3d4',
      host: `host-${id}`,
      labels: {},
      address,
      socket: null,
      holds: [],
    };
    const reply = await nc.request(controlNames(JOB).register, encode(request), { timeout: 10_000 });
    expect(decode(registerReplySchema, reply.data, 'register reply').t).toBe('registered');
  }

  function relay(id: string, heartbeatMs: number): MemberAgent {
    const agent = new MemberAgent({
      nc,
      job: JOB,
      id,
      kind: 'relay',
      host: `host-${id}`,
      address: '10.0.0.2:13337',
      heartbeatMs,
      state: () => ({ epoch: null, holds: [], receiving: [], downstream: null, bytes: { sent: 0, received: 0 }, delta: DELTA }),
      onPlan: () => undefined,
    });
    agents.push(agent);
    agent.start();
    return agent;
  }

  const row = (id: string): ReturnType<Manager['status']>['chain'][number] | undefined => manager.status().chain.find((r) => r.id === id);

  it('is in the chain with bytes null, shown as "no heartbeat yet" by the dashboard and `laminar status`', async () => {
    await registerOnly('silent', '10.0.0.1:13337');
    await expect.poll(() => row('silent') !== undefined, { timeout: 20_000, message: 'the relay did not join the chain' }).toBe(true);
    expect(row('silent')!.bytes).toBeNull();
    const status = manager.status();
    const state = dashboardState(status, { seq: 1, at: Date.now(), series: { names: [], t: [], values: [] }, events: [] });
    expect(state.relays.find((r) => r.id === 'silent')).toMatchObject({ reported: false, holds: [] });
    expect(formatStatus(status)).toMatch(new RegExp(`silent\\s+10\\.0\\.0\\.1:13337.*${NO_HEARTBEAT_YET}`));
  });

  it('reports its bytes, zeros included, from its first heartbeat on', async () => {
    relay('talker', 100);
    await expect.poll(() => row('talker')?.bytes ?? null, { timeout: 20_000, message: "the relay's first heartbeat was not read" }).not.toBeNull();
    const status = manager.status();
    expect(status.chain.find((r) => r.id === 'talker')!.bytes).toEqual({ sent: 0, received: 0 });
    const state = dashboardState(status, { seq: 1, at: Date.now(), series: { names: [], t: [], values: [] }, events: [] });
    expect(state.relays.find((r) => r.id === 'talker')!.reported).toBe(true);
    expect(formatStatus(status)).toMatch(/talker\s+10\.0\.0\.2:13337.*0 B \/ 0 B/);
    // Its delta broadcast, as the heartbeat said it: `laminar status` shows what its chunks took on the wire.
    expect(status.chain.find((r) => r.id === 'talker')!.delta).toEqual(DELTA);
    expect(formatStatus(status)).toMatch(/talker\s.*\s1\.0% of 100 MiB\s+0 B \/ 0 B/);
    expect(row('silent')!.delta).toBeUndefined();
    // The silent one still says so.
    expect(row('silent')!.bytes).toBeNull();
  });
});
