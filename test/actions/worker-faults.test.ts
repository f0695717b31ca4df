/**
 * Action workers as real `laminar action-worker` processes on a real nats-server: killed and
 * frozen mid-action (redelivered, the result delivered once), run out of deliveries (a typed
 * failed result), a garbage message on the queue, workers joining and leaving while actions flow.
 */
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { Registry } from 'prom-client';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ActionClient, actionNames, lookupDigits, readActionsStatus, type ActionRequest, type ActionsStatus } from '../../src/actions/index.js';
import { CLI } from '../../src/services/daemon-process.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { spawnDaemon, type Daemon } from '../../src/services/index.js';
import { metricValue, natsFixture } from '../data/helpers.js';

const run = promisify(execFile);
const nats = natsFixture();
const daemons: Daemon[] = [];
const clients: ActionClient[] = [];
afterEach(async () => {
  for (const d of daemons.splice(0)) {
    d.child.kill('SIGCONT');
    await d.kill('SIGKILL');
  }
});
afterAll(async () => {
  for (const c of clients) await c.close();
});

async function worker(pool: string, id: string, extra: string[] = [], executor = 'noop', kind = 'k'): Promise<Daemon> {
  const d = await spawnDaemon(
    `action-worker ${id}`,
    [
      'action-worker',
      '--nats',
      nats.server.url,
      '--pool',
      pool,
      '--kind',
      kind,
      '--executor',
      executor,
      '--id',
      id,
      '--metrics-port',
      '-1',
      '--log-level',
      'debug',
      ...extra,
    ],
    'action worker ready',
  );
  daemons.push(d);
  return d;
}

/** Resolves once `d` logged that it started `actionId` (its delivery number). */
async function started(d: Daemon, actionId: string): Promise<number> {
  let delivery = 0;
  await vi.waitFor(
    () => {
      const line = d.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((e) => e.msg === 'action started' && e.actionId === actionId);
      expect(line).toBeDefined();
      delivery = line!.delivery as number;
    },
    { timeout: 30_000, interval: 20 },
  );
  return delivery;
}

async function client(pool: string, registry = new Registry()): Promise<ActionClient> {
  const c = await ActionClient.open({ nc: nats.nc, pool, registry });
  clients.push(c);
  return c;
}

const sleepy = (id: string, sleepMs: number, over: Partial<ActionRequest> = {}): ActionRequest => ({
  kind: 'k',
  tool: 'noop',
  args: { echo: id, sleepMs },
  idempotencyKey: id,
  trajectoryId: `traj-${id}`,
  timeoutMs: 30_000,
  ...over,
});

/** Messages the results stream holds for an action. */
async function storedResults(pool: string, actionId: string): Promise<number> {
  const names = actionNames(pool);
  const info = await (await jetstreamManager(nats.nc)).streams.info(names.resultStream, { subjects_filter: names.actionResults(actionId) });
  return Object.values(info.state.subjects ?? {}).reduce((s, n) => s + n, 0);
}

describe('action workers as processes', () => {
  it('redelivers the action of a worker SIGKILLed mid-action to another: one result, delivery 2', async () => {
    const registry = new Registry();
    const workers = [await worker('kill', 'wa', ['--ack-wait', '1s']), await worker('kill', 'wb', ['--ack-wait', '1s'])];
    const c = await client('kill', registry);
    const pending = c.submit(sleepy('x1', 4000));
    const first = await Promise.race(workers.map(async (w) => (await started(w, 'x1'), w)));
    const other = workers.find((w) => w !== first)!;
    await first.kill('SIGKILL');
    const r = await pending;
    expect(r).toMatchObject({ status: 'ok', output: 'x1', deliveries: 2, worker: other === workers[0] ? 'wa' : 'wb' });
    expect(await started(other, 'x1')).toBe(2);
    expect(await storedResults('kill', 'x1')).toBe(1);
    expect(await metricValue(registry, 'laminar_action_results_total', { kind: 'k', status: 'ok' })).toBe(1);
  });

  it('takes the action from a frozen worker; the late result it sends when it thaws is dropped', async () => {
    const registry = new Registry();
    const a = await worker('freeze', 'fa', ['--ack-wait', '1s']);
    const c = await client('freeze', registry);
    const pending = c.submit(sleepy('y1', 1500));
    await started(a, 'y1');
    a.child.kill('SIGSTOP');
    const b = await worker('freeze', 'fb', ['--ack-wait', '1s']);
    const r = await pending;
    expect(r).toMatchObject({ status: 'ok', deliveries: 2, worker: 'fb' });
    await started(b, 'y1');
    // Thawed, the first worker finishes too: its result reaches the client and is dropped there
    // (the results stream already dropped it by id).
    a.child.kill('SIGCONT');
    await vi.waitFor(async () => expect(await metricValue(registry, 'laminar_action_results_dropped_total', { reason: 'duplicate' })).toBe(1), {
      timeout: 30_000,
    });
    expect(await storedResults('freeze', 'y1')).toBe(1);
    expect(await metricValue(registry, 'laminar_action_results_total', { kind: 'k', status: 'ok' })).toBe(1);
  });

  it('fails an action after its maximum deliveries, each worker killed, with a typed failed result', async () => {
    const flags = ['--ack-wait', '1s', '--max-deliveries', '2'];
    const c = await client('maxdel');
    const pending = c.submit(sleepy('z1', 60_000));
    for (const [i, id] of ['m1', 'm2'].entries()) {
      const w = await worker('maxdel', id, flags);
      expect(await started(w, 'z1')).toBe(i + 1);
      await w.kill('SIGKILL');
    }
    const last = await worker('maxdel', 'm3', flags);
    const r = await pending;
    expect(r).toMatchObject({ status: 'failed', code: ErrorCodes.ACTION_MAX_DELIVERIES, deliveries: 3, worker: 'm3', execMs: 0 });
    // It was not run a third time.
    expect(last.logs.some((l) => l.includes('"action started"'))).toBe(false);
  });

  it('answers a lookup with wrong arguments with a typed bad call, and drops a garbage message without stopping', async () => {
    await worker('bad', 'lk', [], 'lookup', 'lookup');
    const c = await client('bad');
    // Garbage on the kind's queue: not an action.
    await jetstream(nats.nc).publish(actionNames('bad').queueSubject('lookup'), new TextEncoder().encode('not msgpack at all'));
    const bad = await c.submit({
      kind: 'lookup',
      tool: 'lookup',
      args: { key: ['not', 'a', 'string'] },
      idempotencyKey: 'l1',
      trajectoryId: 't',
      timeoutMs: 5000,
    });
    expect(bad).toMatchObject({ status: 'bad_call', code: ErrorCodes.ACTION_BAD_ARGS });
    const good = await c.submit({ kind: 'lookup', tool: 'lookup', args: { key: 'k-42' }, idempotencyKey: 'l2', trajectoryId: 't', timeoutMs: 5000 });
    expect(good).toMatchObject({ status: 'ok', output: lookupDigits('k-42') });
  });

  it('spreads actions over workers that join and leave while they flow: each completes once', { timeout: 120_000 }, async () => {
    const registry = new Registry();
    const c = await client('elastic', registry);
    // Queued before any worker exists.
    const all = Array.from({ length: 40 }, (_, i) => c.submit(sleepy(`e${i}`, 300)));
    const w1 = await worker('elastic', 'j1', ['--concurrency', '2']);
    await started(w1, 'e0');
    await worker('elastic', 'j2', ['--concurrency', '2']);
    await vi.waitFor(async () => expect((await readActionsStatus(nats.nc, 'elastic')).kinds[0]?.workers.length).toBe(2), { timeout: 15_000 });
    // j1 leaves cleanly (SIGTERM: it finishes what it runs); j3 joins.
    await w1.kill('SIGTERM');
    await worker('elastic', 'j3', ['--concurrency', '2']);
    // More work once j3 is in: queued at once, it goes to whichever of j2 and j3 has a free slot.
    all.push(...Array.from({ length: 20 }, (_, i) => c.submit(sleepy(`e${40 + i}`, 300))));
    const results = await Promise.all(all);
    expect(results.map((r) => r.output)).toEqual(Array.from({ length: 60 }, (_, i) => `e${i}`));
    expect(results.every((r) => r.status === 'ok')).toBe(true);
    const by = new Set(results.map((r) => r.worker));
    expect([...by].sort()).toEqual(['j1', 'j2', 'j3']);
    expect(await metricValue(registry, 'laminar_action_results_dropped_total', { reason: 'duplicate' })).toBe(0);
    const status = await readActionsStatus(nats.nc, 'elastic');
    expect(status.kinds[0]).toMatchObject({ kind: 'k', waiting: 0, results: 60 });
    expect(status.kinds[0]!.workers.map((w) => w.id).sort()).toEqual(['j2', 'j3']);
    // The CLI shows the same; a pool nobody used is empty (and is not created by looking).
    const cli = async (pool: string): Promise<ActionsStatus> =>
      JSON.parse((await run(process.execPath, [CLI, 'actions', '--nats', nats.server.url, '--pool', pool, '--json'])).stdout) as ActionsStatus;
    expect((await cli('elastic')).kinds[0]).toMatchObject({ kind: 'k', results: 60, workers: expect.any(Array) as unknown });
    expect(await cli('unused')).toEqual({ pool: 'unused', recent: 0, kinds: [] });
    await expect((await jetstreamManager(nats.nc)).streams.info(actionNames('unused').stream)).rejects.toThrow(/not found/);
  });
});
