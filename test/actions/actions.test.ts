/**
 * The ActionClient and ActionWorker in one process on a real nats-server: results by status,
 * typed errors for bad calls, the output cap, timeouts, idempotency, quotas, results that never
 * reach the wrong trajectory.
 */
import { afterAll, describe, expect, it, vi } from 'vitest';
import { Registry } from 'prom-client';
import { headers } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import {
  ActionArgumentError,
  ActionClient,
  ActionWorker,
  actionNames,
  lookupDigits,
  lookupHandler,
  noopHandler,
  truncationMarker,
  type ActionHandler,
  type ActionRequest,
} from '../../src/actions/index.js';
import { encodeResult } from '../../src/actions/wire.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { metricValue, natsFixture } from '../data/helpers.js';

const nats = natsFixture();
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of closers.reverse()) await c();
});

let n = 0;
async function setup(
  tools: Record<string, ActionHandler>,
  worker: { concurrency?: number; maxOutputBytes?: number } = {},
  client: { defaultQuota?: number } = {},
) {
  const pool = `p${++n}`;
  const registry = new Registry();
  const w = await ActionWorker.start({ nc: nats.nc, pool, kind: 'k', tools, ...worker });
  const c = await ActionClient.open({ nc: nats.nc, pool, registry, ...client });
  closers.push(
    () => w.stop(1000),
    () => c.close(),
  );
  return { pool, w, c, registry };
}
const req = (key: string, over: Partial<ActionRequest> = {}): ActionRequest => ({
  kind: 'k',
  tool: 'noop',
  args: { echo: key },
  idempotencyKey: key,
  trajectoryId: 't1',
  timeoutMs: 5000,
  ...over,
});

describe('actions', () => {
  it('runs an action and returns its output with its timings', async () => {
    const { c } = await setup({ noop: noopHandler, lookup: lookupHandler });
    const r = await c.submit(req('a1'));
    expect(r).toMatchObject({ actionId: 'a1', status: 'ok', output: 'a1', truncated: false, deliveries: 1 });
    expect(r.queueMs).toBeGreaterThanOrEqual(0);
    const l = await c.submit(req('a2', { tool: 'lookup', args: { key: 'apple', length: 6 } }));
    expect(l).toMatchObject({ status: 'ok', output: lookupDigits('apple', 6) });
  });

  it('answers a bad call with a typed result: unknown tool, arguments of the wrong type, a handler that throws', async () => {
    const { c } = await setup({
      lookup: lookupHandler,
      boom: () => {
        throw new Error('kaboom');
      },
      strict: () => {
        throw new ActionArgumentError('strict: wants nothing');
      },
    });
    expect(await c.submit(req('b1', { tool: 'nope' }))).toMatchObject({ status: 'bad_call', code: ErrorCodes.ACTION_UNKNOWN_TOOL });
    expect(await c.submit(req('b2', { tool: 'lookup', args: { key: 7 } }))).toMatchObject({ status: 'bad_call', code: ErrorCodes.ACTION_BAD_ARGS });
    expect(await c.submit(req('b3', { tool: 'lookup', args: 'key' }))).toMatchObject({ status: 'bad_call', code: ErrorCodes.ACTION_BAD_ARGS });
    expect(await c.submit(req('b4', { tool: 'lookup', args: { key: 'x', length: 99 } }))).toMatchObject({ status: 'bad_call' });
    expect(await c.submit(req('b5', { tool: 'boom' }))).toMatchObject({ status: 'error', output: 'kaboom', code: ErrorCodes.ACTION_HANDLER_FAILED });
    expect(await c.submit(req('b6', { tool: 'strict' }))).toMatchObject({ status: 'bad_call', output: 'strict: wants nothing' });
  });

  it('rejects a malformed submission with ERR_BAD_ACTION before anything is sent', async () => {
    const { c } = await setup({ noop: noopHandler });
    await expect(c.submit(req('x', { kind: 'a.b' }))).rejects.toMatchObject({ code: ErrorCodes.BAD_ACTION });
    await expect(c.submit(req(' x'))).rejects.toMatchObject({ code: ErrorCodes.BAD_ACTION });
    await expect(c.submit(req('x', { timeoutMs: 0 }))).rejects.toMatchObject({ code: ErrorCodes.BAD_ACTION });
    await expect(c.submit(req('x', { tool: '' }))).rejects.toMatchObject({ code: ErrorCodes.BAD_ACTION });
  });

  it('cuts an output over the cap and ends it with the marker', async () => {
    const { c } = await setup({ big: () => 'x'.repeat(5000) }, { maxOutputBytes: 1000 });
    const r = await c.submit(req('big', { tool: 'big' }));
    expect(r.status).toBe('truncated');
    expect(r.truncated).toBe(true);
    expect(Buffer.byteLength(r.output)).toBeLessThanOrEqual(1000);
    expect(r.output).toMatch(/\[\.\.\. \d+ bytes truncated\]$/);
    expect(r.output.endsWith(truncationMarker(5000 - r.output.indexOf('\n[')))).toBe(true);
  });

  it('stops a tool at its timeout: status timeout, the handler aborted, the slot free again', async () => {
    let aborted = false;
    const { c } = await setup(
      {
        hang: (_args, ctx) =>
          new Promise<string>(() => {
            ctx.signal.addEventListener('abort', () => (aborted = true));
          }),
        noop: noopHandler,
      },
      { concurrency: 1 },
    );
    const r = await c.submit(req('h1', { tool: 'hang', timeoutMs: 300 }));
    expect(r).toMatchObject({ status: 'timeout', code: ErrorCodes.ACTION_TIMEOUT, deliveries: 1 });
    expect(aborted).toBe(true);
    // The one slot was freed by the timeout: the next action runs.
    expect(await c.submit(req('h2'))).toMatchObject({ status: 'ok' });
  });

  it('executes a resubmitted action once and gives every submission its result, in this client and another', async () => {
    let runs = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { c, pool } = await setup({
      once: async () => {
        runs++;
        await gate;
        return `run ${runs}`;
      },
    });
    const first = c.submit(req('same', { tool: 'once' }));
    const again = c.submit(req('same', { tool: 'once' }));
    // A trajectory resumed on another rollout resubmits its pending call with the same key.
    const other = await ActionClient.open({ nc: nats.nc, pool });
    closers.push(() => other.close());
    const resumed = other.submit(req('same', { tool: 'once' }));
    release();
    const results = await Promise.all([first, again, resumed]);
    for (const r of results) expect(r).toMatchObject({ status: 'ok', output: 'run 1' });
    expect(runs).toBe(1);
    // After it finished, within the window: the stored result, no new run.
    const later = await ActionClient.open({ nc: nats.nc, pool });
    closers.push(() => later.close());
    expect(await later.submit(req('same', { tool: 'once' }))).toMatchObject({ output: 'run 1' });
    expect(runs).toBe(1);
  });

  it('refuses a key in use by another trajectory of the same client', async () => {
    const { c } = await setup({ noop: (_a, ctx) => new Promise((r) => setTimeout(() => r(ctx.actionId), 200)) });
    const a = c.submit(req('k1'));
    await expect(c.submit(req('k1', { trajectoryId: 't2' }))).rejects.toMatchObject({ code: ErrorCodes.BAD_ACTION });
    await a;
  });

  it('drops a second result of an action and a result naming another trajectory', async () => {
    const { c, registry, pool } = await setup({ noop: noopHandler });
    const names = actionNames(pool);
    expect(await c.submit(req('d1'))).toMatchObject({ status: 'ok' });
    // A late duplicate of d1's result, and a forged result for a pending action of another trajectory.
    const late = encodeResult({
      id: 'd1',
      traj: 't1',
      kind: 'k',
      tool: 'noop',
      status: 'ok',
      output: 'late',
      truncated: false,
      queueMs: 0,
      execMs: 0,
      deliveries: 2,
      worker: 'w',
      at: Date.now(),
    });
    nats.nc.publish(names.resultSubject(c.id, 'd1'), late);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow = await ActionWorker.start({ nc: nats.nc, pool, kind: 'slow', tools: { noop: () => gate.then(() => 'mine') } });
    closers.push(() => slow.stop(1000));
    const pending = c.submit(req('d2', { kind: 'slow' }));
    const forged = encodeResult({
      id: 'd2',
      traj: 'someone-else',
      kind: 'slow',
      tool: 'noop',
      status: 'ok',
      output: 'forged',
      truncated: false,
      queueMs: 0,
      execMs: 0,
      deliveries: 1,
      worker: 'w',
      at: Date.now(),
    });
    const h = headers();
    h.set('Nats-Msg-Id', 'forged');
    await jetstream(nats.nc).publish(names.resultSubject(c.id, 'd2'), forged, { headers: h });
    // The forged result reached the client and was dropped before the real one was let through.
    await vi.waitFor(async () => expect(await metricValue(registry, 'laminar_action_results_dropped_total', { reason: 'foreign' })).toBe(1), {
      timeout: 10_000,
    });
    release();
    expect(await pending).toMatchObject({ output: 'mine' });
    expect(await metricValue(registry, 'laminar_action_results_dropped_total', { reason: 'duplicate' })).toBe(1);
  });

  it('holds a job to its quota: the next action of the job starts only when one ends', async () => {
    let running = 0;
    let peak = 0;
    const { c } = await setup(
      {
        noop: async () => {
          running++;
          peak = Math.max(peak, running);
          await new Promise((r) => setTimeout(r, 30));
          running--;
          return '';
        },
      },
      { concurrency: 8 },
      { defaultQuota: 2 },
    );
    const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => c.submit(req(`q${i}`, { jobId: 'jobA' }))));
    expect(rs.every((r) => r.status === 'ok')).toBe(true);
    expect(peak).toBe(2);
  });

  it('fails every submission of a key whose action cannot be published, the second one too', async () => {
    const { c } = await setup({ noop: noopHandler });
    // Over the server's max_payload: nats.js refuses the publish, a final failure.
    const huge = req('huge', { args: { echo: 'x'.repeat(2 * 1024 * 1024) } });
    const first = c.submit(huge);
    const second = c.submit(huge);
    await expect(first).rejects.toThrow(/max_payload/);
    // It waited for ever before: it had the first one's result promise, which the failure never settled.
    await expect(second).rejects.toThrow(/max_payload/);
    expect(c.inFlight).toBe(0);
  });

  it('rejects a submission whose arguments msgpack cannot carry, and frees its place', async () => {
    const { c } = await setup({ noop: noopHandler }, {}, { defaultQuota: 1 });
    let submitted: Promise<unknown> | undefined;
    // A rejection, not a throw from submit() itself.
    expect(() => (submitted = c.submit(req('bigint', { args: { n: 10n ** 30n } })))).not.toThrow();
    await expect(submitted).rejects.toThrow(/too large/);
    expect(c.inFlight).toBe(0);
    // Its job's quota (one) is free again.
    expect(await c.submit(req('after-bigint'))).toMatchObject({ status: 'ok' });
  });

  it('gives a submission waiting past its deadline status failed (no worker of its kind)', async () => {
    const { c } = await setup({ noop: noopHandler });
    const r = await c.submit(req('nobody', { kind: 'unserved', deadlineMs: 200 }));
    expect(r).toMatchObject({ status: 'failed', code: ErrorCodes.ACTION_NO_RESULT, deliveries: 0 });
  });
});
