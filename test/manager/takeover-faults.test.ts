/**
 * Taking the job over when it goes wrong, on a real nats-server: a manager whose takeover cannot
 * read the control bucket (the server refuses it: its user may not create the consumer that lists
 * the bucket's keys) hands the lease back instead of holding it while leading nothing, so that a
 * standby, or the same manager once the fault is gone, actually leads (subscribed: it answers
 * status and registrations; ticking: a registered relay gets into a published plan). Lease rounds
 * never overlap, even when NATS does not answer for longer than a round's period.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { MemberAgent } from '../../src/control/member-agent.js';
import type { PlanRecord } from '../../src/control/schema.js';
import { controlNames } from '../../src/control/subjects.js';
import { Manager, type ManagerStatus } from '../../src/manager/manager.js';
import { startNatsServer } from '../../src/services/index.js';
import { metricValue, natsClient } from '../data/helpers.js';
import { startPermissionedNats, type PermissionedNats } from '../helpers/nats-permissions.js';

/** What the restricted user may not publish: creating a consumer on the job's control bucket (kv.keys, kv.watch). */
function consumerCreate(job: string): string[] {
  const stream = `KV_${controlNames(job).bucket}`;
  return [`$JS.API.CONSUMER.CREATE.${stream}`, `$JS.API.CONSUMER.CREATE.${stream}.>`];
}

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => undefined);
});

interface Started {
  manager: Manager;
  registry: Registry;
  logs: { level: number; msg: string }[];
}

async function startManager(nc: NatsConnection, job: string, id: string, leaseMs = 900): Promise<Started> {
  const registry = new Registry();
  const logs: Started['logs'] = [];
  const manager = new Manager({
    nc,
    job,
    id,
    registry,
    logger: pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line) as Started['logs'][number]) }),
    leaseMs,
    tickMs: 50,
    rollouts: { partials: null, prompts: null, repackIntervalMs: 0 },
  });
  await manager.start();
  cleanup.push(() => manager.close());
  return { manager, registry, logs };
}

/** A relay member that records the plans it is sent. */
function relay(nc: NatsConnection, job: string, id: string): { plans: PlanRecord[] } {
  const plans: PlanRecord[] = [];
  const agent = new MemberAgent({
    nc,
    job,
    id,
    kind: 'relay',
    host: 'h1',
    address: '10.0.0.1:13337',
    heartbeatMs: 100,
    state: () => ({ epoch: null, holds: [], receiving: [], downstream: null }),
    onPlan: (plan) => plans.push(plan),
  });
  agent.start();
  cleanup.push(() => agent.close());
  return { plans };
}

async function askStatus(nc: NatsConnection, job: string): Promise<ManagerStatus | null> {
  try {
    return JSON.parse(new TextDecoder().decode((await nc.request(controlNames(job).status, '', { timeout: 500 })).data)) as ManagerStatus;
  } catch {
    return null;
  }
}

/** `id` leads `job`: it answers status as leader, and a relay that registers gets into a plan it published. */
async function expectLeading(nc: NatsConnection, job: string, id: string, relayId: string): Promise<void> {
  await expect.poll(async () => (await askStatus(nc, job))?.manager, { timeout: 15_000, message: `${id} does not answer status` }).toBe(id);
  expect((await askStatus(nc, job))?.leader).toBe(true);
  const { plans } = relay(nc, job, relayId);
  await expect
    .poll(() => plans.some((p) => p.manager === id && p.relays.some((r) => r.id === relayId)), { timeout: 15_000, message: `no plan of ${id} with ${relayId}` })
    .toBe(true);
}

describe('manager takeover faults (real nats-server)', () => {
  let nats: PermissionedNats;
  let admin: NatsConnection;

  beforeAll(async () => {
    nats = await startPermissionedNats([...consumerCreate('t1'), ...consumerCreate('t2')]);
    admin = await nats.connect('admin');
  });
  afterAll(async () => {
    await admin.close();
    await nats.stop();
  });

  it('a manager whose takeover fails hands the lease back, and a standby leads the job', async () => {
    const job = 't1';
    const first = await startManager(await nats.connect('admin'), job, 'm0');
    await first.manager.whenLeader(10_000);
    const restrictedNc = await nats.connect('restricted');
    cleanup.push(() => restrictedNc.close());
    const broken = await startManager(restrictedNc, job, 'm-broken');
    expect(broken.manager.isLeader).toBe(false);
    // The leader goes away: the standby that cannot read the bucket wins the lease and fails to take over.
    await first.manager.close();
    await expect
      .poll(() => metricValue(broken.registry, 'laminar_manager_takeovers_total', { result: 'failed' }), { timeout: 10_000, message: 'no failed takeover' })
      .toBeGreaterThanOrEqual(1);
    expect(broken.manager.isLeader).toBe(false);
    expect(broken.logs.some((l) => l.level === 50 && l.msg === 'taking the job over failed: handing the lease back')).toBe(true);
    // A healthy standby comes: it gets the lease (the broken one sits out after each failure) and leads.
    const healthy = await startManager(await nats.connect('admin'), job, 'm-healthy');
    await healthy.manager.whenLeader(15_000);
    await expectLeading(admin, job, 'm-healthy', 'r1');
    expect(broken.manager.isLeader).toBe(false);
    expect(await metricValue(healthy.registry, 'laminar_manager_takeovers_total', { result: 'done' })).toBe(1);
    expect(await metricValue(broken.registry, 'laminar_manager_leader')).toBe(0);
  }, 60_000);

  it('a lone manager whose first takeover fails takes the job over once the fault is gone', async () => {
    const job = 't2';
    const restrictedNc = await nats.connect('restricted');
    cleanup.push(() => restrictedNc.close());
    // Alone: it wins the lease in its first round, inside start(), and the takeover fails there.
    const lone = await startManager(restrictedNc, job, 'm-lone');
    await expect
      .poll(() => metricValue(lone.registry, 'laminar_manager_takeovers_total', { result: 'failed' }), { timeout: 10_000, message: 'no failed takeover' })
      .toBeGreaterThanOrEqual(1);
    expect(lone.manager.isLeader).toBe(false);
    expect(await askStatus(admin, job)).toBeNull();
    // The operator fixes the permissions: the manager takes the job over at its next try.
    await nats.deny(consumerCreate('t1'));
    await lone.manager.whenLeader(15_000);
    await expectLeading(admin, job, 'm-lone', 'r1');
    expect(await metricValue(lone.registry, 'laminar_manager_takeovers_total', { result: 'done' })).toBe(1);
  }, 60_000);
});

describe('lease rounds', () => {
  it('never overlap: while NATS does not answer, one round waits for its reply and no other starts', async () => {
    const nats = await startNatsServer({ jetstream: true });
    cleanup.push(() => nats.stop());
    const nc = await natsClient(nats.url);
    cleanup.push(() => nc.close());
    // A round every 100 ms; a KV read that gets no answer fails after the JetStream timeout (seconds).
    const { manager, logs } = await startManager(nc, 'rounds', 'm-rounds', 300);
    await manager.whenLeader(10_000);
    const pid = nats.pid!;
    const sent = nc.stats().outMsgs;
    process.kill(pid, 'SIGSTOP');
    cleanup.push(() => Promise.resolve(process.kill(pid, 'SIGCONT')));
    // The round under way when the server stopped ends when its read times out.
    await expect.poll(() => logs.some((l) => l.msg === 'lease round failed'), { timeout: 30_000, interval: 50 }).toBe(true);
    const during = nc.stats().outMsgs - sent;
    process.kill(pid, 'SIGCONT');
    // One request of that round (an overlapping round would have sent one every 100 ms meanwhile);
    // at most one more from the round started right after the failure.
    expect(during).toBeGreaterThanOrEqual(1);
    expect(during).toBeLessThanOrEqual(2);
    // The manager rides it out: still the leader once NATS answers again.
    await expect.poll(async () => (await askStatus(nc, 'rounds'))?.leader, { timeout: 15_000 }).toBe(true);
  }, 60_000);
});
