/**
 * `laminar action-supervisor` as a real process on a real nats-server, starting real `laminar
 * action-worker` processes: it scales a kind to the budget for a queued load and parks them once
 * drained, never holds more workers than the budget, scales up ahead of the queue on a steady
 * arrival, and a worker or the supervisor itself SIGKILLed mid-load loses no action (each
 * completes once, as the submitter sees it); the killed supervisor's workers stop with it.
 */
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { Registry } from 'prom-client';
import { ActionClient, ActionWorker, noopHandler, type ActionRequest } from '../../src/actions/index.js';
import { CLI } from '../../src/services/daemon-process.js';
import { spawnDaemon, type Daemon } from '../../src/services/index.js';
import { natsFixture } from '../data/helpers.js';

const nats = natsFixture();
const daemons: Daemon[] = [];
/** Worker pids of supervisors that were SIGKILLed: killed here if a failed test left them. */
const orphans: number[] = [];
const clients: ActionClient[] = [];
afterEach(async () => {
  for (const d of daemons.splice(0)) await d.kill('SIGKILL');
  for (const pid of orphans.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});
afterAll(async () => {
  for (const c of clients) await c.close();
});

const entries = (d: Daemon): Record<string, unknown>[] =>
  d.logs.flatMap((l) => {
    try {
      return [JSON.parse(l) as Record<string, unknown>];
    } catch {
      return [];
    }
  });

const TAKES = new Set(['action worker started', 'action worker resumed']);
const RELEASES = new Set(['action worker parked', 'action worker exited']);

/** Workers holding the budget over the supervisor's log (started or resumed, not yet parked or exited): now, and at the most. */
function held(d: Daemon): { now: number; most: number } {
  const holding = new Set<number>();
  let most = 0;
  for (const e of entries(d)) {
    if (TAKES.has(e.msg as string)) holding.add(e.pid as number);
    if (RELEASES.has(e.msg as string)) holding.delete(e.pid as number);
    most = Math.max(most, holding.size);
  }
  return { now: holding.size, most };
}

const startedPids = (d: Daemon): number[] => entries(d).flatMap((e) => (e.msg === 'action worker started' ? [e.pid as number] : []));

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function supervisor(pool: string, budgetCores: number, extra: string[] = []): Promise<Daemon> {
  const d = await spawnDaemon(
    `action-supervisor ${pool}`,
    [
      'action-supervisor',
      '--nats',
      nats.server.url,
      '--pool',
      pool,
      '--budget-cores',
      String(budgetCores),
      '--interval',
      '200ms',
      '--metrics-port',
      '-1',
      ...extra,
    ],
    'action supervisor ready',
  );
  daemons.push(d);
  return d;
}

const sleepy = (id: string, sleepMs: number): ActionRequest => ({
  kind: 'k',
  tool: 'noop',
  args: { echo: id, sleepMs },
  idempotencyKey: id,
  trajectoryId: `traj-${id}`,
  timeoutMs: 60_000,
});

async function client(pool: string): Promise<ActionClient> {
  const c = await ActionClient.open({ nc: nats.nc, pool, registry: new Registry() });
  clients.push(c);
  return c;
}

describe('laminar action-supervisor', () => {
  it('scales a queued kind to the core budget, never past it, and parks its workers once drained', async () => {
    const sup = await supervisor('grow', 3, ['--worker', 'k=noop', '--cost', 'k=1', '--default-exec', '500ms']);
    const c = await client('grow');
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => c.submit(sleepy(`g${i}`, 300))));
    expect(results.map((r) => r.output)).toEqual(Array.from({ length: 30 }, (_, i) => `g${i}`));
    expect(results.every((r) => r.status === 'ok')).toBe(true);
    const targets = entries(sup).flatMap((e) => (e.msg === 'elastic targets' ? [(e.targets as Record<string, number>).k!] : []));
    expect(Math.max(...targets)).toBe(3);
    expect(new Set(results.map((r) => r.worker)).size).toBeGreaterThan(1);
    // Drained: every worker parked (its process kept for the next burst), none holding the budget.
    await vi.waitFor(() => expect(held(sup).now).toBe(0), { timeout: 60_000, interval: 50 });
    expect(held(sup).most).toBeLessThanOrEqual(3);
    // A second burst resumes the parked workers instead of starting processes.
    const again = await Promise.all(Array.from({ length: 6 }, (_, i) => c.submit(sleepy(`h${i}`, 300))));
    expect(again.every((r) => r.status === 'ok')).toBe(true);
    expect(entries(sup).some((e) => e.msg === 'action worker resumed')).toBe(true);
    expect(startedPids(sup).length).toBeLessThanOrEqual(3);
    expect(held(sup).most).toBeLessThanOrEqual(3);
    sup.child.kill('SIGTERM');
    expect(await sup.exited).toBe(0);
    for (const pid of startedPids(sup)) expect(alive(pid)).toBe(false);
  });

  it('scales a kind up ahead of its queue on a steady arrival, the queue empty when sampled', async () => {
    // A worker of another host takes every action at once: the queue this supervisor samples
    // stays empty, and only the arrival rate can tell it that the kind has work.
    const elsewhere = await ActionWorker.start({
      nc: nats.nc,
      pool: 'steady',
      kind: 'k',
      tools: { noop: noopHandler },
      concurrency: 16,
      registry: new Registry(),
    });
    const sup = await supervisor('steady', 2, ['--worker', 'k=noop', '--rate-window', '2s', '--log-level', 'debug']);
    const c = await client('steady');
    // An object: the loop reads what the finally block below changes.
    const submitting = { on: true };
    const steady = (async () => {
      for (let i = 0; submitting.on; i++) {
        await c.submit(sleepy(`s${i}`, 0));
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    try {
      await vi.waitFor(
        () =>
          expect(
            entries(sup).some((e) => {
              const k = (e.load as Record<string, { queued: number }> | undefined)?.k;
              return e.msg === 'elastic targets' && k?.queued === 0 && (e.targets as Record<string, number>).k! >= 1;
            }),
          ).toBe(true),
        { timeout: 60_000, interval: 50 },
      );
    } finally {
      submitting.on = false;
      await steady;
      await elsewhere.stop(5000);
    }
    await vi.waitFor(() => expect(entries(sup).some((e) => e.msg === 'action worker started')).toBe(true), { timeout: 60_000, interval: 50 });
  });

  it('loses no action when a worker and then the supervisor are SIGKILLed mid-load, and its workers stop with it', async () => {
    const worker = `${process.execPath} ${CLI} action-worker --nats ${nats.server.url} --pool crash --kind k --executor noop --ack-wait 1s --metrics-port -1 --log-level warn --supervised`;
    const first = await supervisor('crash', 2, ['--command', `k=${worker}`]);
    const c = await client('crash');
    const all = Array.from({ length: 16 }, (_, i) => c.submit(sleepy(`c${i}`, 400)));
    await vi.waitFor(() => expect(startedPids(first).length).toBe(2), { timeout: 60_000, interval: 20 });
    process.kill(startedPids(first)[0]!, 'SIGKILL');
    await vi.waitFor(() => expect(entries(first).some((e) => e.msg === 'action worker exited')).toBe(true), { timeout: 60_000, interval: 20 });
    await first.kill('SIGKILL');
    const pids = startedPids(first);
    orphans.push(...pids);
    // Its workers see their stdin close, finish what they run and exit: none is left serving.
    await vi.waitFor(() => expect(pids.filter(alive)).toEqual([]), { timeout: 60_000, interval: 50 });
    const second = await supervisor('crash', 2, ['--command', `k=${worker}`]);
    const results = await Promise.all(all);
    expect(results.map((r) => [r.output, r.status])).toEqual(Array.from({ length: 16 }, (_, i) => [`c${i}`, 'ok']));
    expect(held(second).most).toBeLessThanOrEqual(2);
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  });

  it('refuses a cost it cannot plan with, by code', async () => {
    const { execFile } = await import('node:child_process');
    const out = await new Promise<{ code: number | null; stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'action-supervisor', '--nats', nats.server.url, '--worker', 'k=noop', '--cost', 'k=-1'], (err, _o, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stderr }),
      ),
    );
    expect(out.code).not.toBe(0);
    expect(out.stderr).toContain('ERR_BAD_ELASTIC_INPUT');
  });
});
