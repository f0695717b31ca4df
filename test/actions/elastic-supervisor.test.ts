/**
 * `laminar action-supervisor` as a real process on a real nats-server, starting real `laminar
 * action-worker` processes: it scales a kind to the budget for a queued load and back to zero,
 * never holds more workers than the budget, and a worker or the supervisor itself SIGKILLed
 * mid-load loses no action (each completes once, as the submitter sees it).
 */
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { Registry } from 'prom-client';
import { ActionClient, type ActionRequest } from '../../src/actions/index.js';
import { CLI } from '../../src/services/daemon-process.js';
import { spawnDaemon, type Daemon } from '../../src/services/index.js';
import { natsFixture } from '../data/helpers.js';

const nats = natsFixture();
const daemons: Daemon[] = [];
/** Worker pids of supervisors that were SIGKILLed (their workers outlive them). */
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

/** Workers the supervisor held (started, not yet exited) at the most, over its log. */
function mostHeld(d: Daemon): number {
  let held = 0;
  let most = 0;
  for (const e of entries(d)) {
    if (e.msg === 'action worker started') most = Math.max(most, ++held);
    if (e.msg === 'action worker exited') held--;
  }
  return most;
}

const startedPids = (d: Daemon): number[] => entries(d).flatMap((e) => (e.msg === 'action worker started' ? [e.pid as number] : []));

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
  it('scales a queued kind to the core budget, never past it, and back to zero once drained', async () => {
    const sup = await supervisor('grow', 3, ['--worker', 'k=noop', '--cost', 'k=1', '--default-exec', '500ms']);
    const c = await client('grow');
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => c.submit(sleepy(`g${i}`, 300))));
    expect(results.map((r) => r.output)).toEqual(Array.from({ length: 30 }, (_, i) => `g${i}`));
    expect(results.every((r) => r.status === 'ok')).toBe(true);
    const targets = entries(sup).flatMap((e) => (e.msg === 'elastic targets' ? [(e.targets as Record<string, number>).k!] : []));
    expect(Math.max(...targets)).toBe(3);
    expect(new Set(results.map((r) => r.worker)).size).toBeGreaterThan(1);
    await vi.waitFor(() => expect(entries(sup).filter((e) => e.msg === 'action worker exited')).toHaveLength(startedPids(sup).length), {
      timeout: 60_000,
      interval: 50,
    });
    expect(mostHeld(sup)).toBeLessThanOrEqual(3);
    sup.child.kill('SIGTERM');
    expect(await sup.exited).toBe(0);
  });

  it('loses no action when a worker and then the supervisor are SIGKILLed mid-load', async () => {
    const worker = `${process.execPath} ${CLI} action-worker --nats ${nats.server.url} --pool crash --kind k --executor noop --ack-wait 1s --metrics-port -1 --log-level warn`;
    const first = await supervisor('crash', 2, ['--command', `k=${worker}`]);
    const c = await client('crash');
    const all = Array.from({ length: 16 }, (_, i) => c.submit(sleepy(`c${i}`, 400)));
    await vi.waitFor(() => expect(startedPids(first).length).toBe(2), { timeout: 60_000, interval: 20 });
    process.kill(startedPids(first)[0]!, 'SIGKILL');
    await vi.waitFor(() => expect(entries(first).some((e) => e.msg === 'action worker exited')).toBe(true), { timeout: 60_000, interval: 20 });
    orphans.push(...startedPids(first));
    await first.kill('SIGKILL');
    const second = await supervisor('crash', 2, ['--command', `k=${worker}`]);
    const results = await Promise.all(all);
    expect(results.map((r) => [r.output, r.status])).toEqual(Array.from({ length: 16 }, (_, i) => [`c${i}`, 'ok']));
    expect(mostHeld(second)).toBeLessThanOrEqual(2);
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
