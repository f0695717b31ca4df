/**
 * The dashboard's actions panel, from a real `laminar manager` process on a real nats-server:
 * an action worker of kind `lookup` (the TS SDK) joins the pool, a client submits actions, and
 * two trajectories are written to the buffer the manager follows, one of three turns (two tool
 * calls answered by observations) and one single-turn. The manager's `/events` state then shows
 * the kind's row as `laminar actions` reads it (the worker and its slots, the results by status,
 * queue wait and execution times) and the turns per trajectory of the last minute ([0, 1, 0, 1]);
 * a headless Chromium page draws the same (the row's cells, the histogram's bars). Every wait ends
 * on the state or the page's DOM; the deadlines only bound a failing test.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { Browser } from 'playwright-core';
import { ActionClient, ActionWorker, lookupHandler, type ActionResult } from '../../src/actions/index.js';
import { ExperienceWriter, type TrajectorySegment } from '../../src/data/index.js';
import { applyDelta, type DashboardDelta, type DashboardState } from '../../src/manager/dashboard/model.js';
import { spawnDaemon, startNatsServer, type Daemon, type NatsServer } from '../../src/services/index.js';
import { launchChromium, pageWithErrors, type PageDocument } from '../helpers/browser.js';
import { SseClient } from '../helpers/sse.js';

declare const document: PageDocument;

const JOB = 'dashboard-actions';
const ACTIONS = 12;
const DEADLINE_MS = 60_000;

describe("the dashboard's actions panel", () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let manager: Daemon;
  let worker: ActionWorker;
  let client: ActionClient;
  let writer: ExperienceWriter;
  let browser: Browser | undefined;
  let port: number;
  const pages: SseClient[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ jetstream: true });
    nc = await connect({ servers: nats.url });
    const argv = ['manager', '--nats', nats.url, '--job', JOB, '--id', 'm1', '--lease', '1s', '--http-port', '0', '--dashboard-interval', '200ms'];
    manager = await spawnDaemon('manager', argv, 'manager started');
    port = manager.ready.httpPort as number;
    worker = await ActionWorker.start({ nc, kind: 'lookup', tools: { lookup: lookupHandler }, concurrency: 3 });
    client = await ActionClient.open({ nc });
    writer = await ExperienceWriter.open({ nc });
  }, 120_000);

  afterAll(async () => {
    for (const page of pages) page.close();
    await browser?.close();
    await (worker as ActionWorker | undefined)?.stop(1000);
    await (client as ActionClient | undefined)?.close();
    await (manager as Daemon | undefined)?.kill('SIGKILL').catch(() => undefined);
    await (nc as NatsConnection | undefined)?.close();
    await (nats as NatsServer | undefined)?.stop();
  });

  /** Applies the page's deltas until `holds` is true of its state. */
  async function applyUntil(page: SseClient, state: DashboardState, holds: (s: DashboardState) => boolean): Promise<DashboardState> {
    while (!holds(state)) state = applyDelta(state, await page.nextJson<DashboardDelta>('delta'));
    return state;
  }

  it('shows the kind as `laminar actions` reads it and the turns per trajectory, in the state and on the page', async () => {
    const page = await SseClient.open(port);
    pages.push(page);
    let state = await page.nextJson<DashboardState>('snapshot');
    // Leading and following the buffer: a panel, no kind yet, no trajectory completed.
    state = await applyUntil(page, state, (s) => s.actions !== null && s.actions.kinds !== null && s.actions.turns !== null);
    expect(state.actions).toMatchObject({ pool: 'default', error: null, windowS: 60, maxTurns: 64 });

    const results: ActionResult[] = await Promise.all(
      Array.from({ length: ACTIONS }, (_, i) =>
        client.submit({
          kind: 'lookup',
          tool: 'lookup',
          args: { key: `k${i}`, length: 4 },
          idempotencyKey: `a${i}`,
          trajectoryId: 'ta',
          timeoutMs: 20_000,
        }),
      ),
    );
    expect(results.every((r) => r.status === 'ok')).toBe(true);
    const prompt = [1, 2, 3];
    const turn = (length: number, finishReason = 'tool_call'): TrajectorySegment => ({ kind: 'generated', length, weightVersion: 0, finishReason });
    const observation = (actionId: string): TrajectorySegment => ({
      kind: 'observation',
      length: 1,
      action: { tool: 'lookup', actionId, status: 'ok', latencyMs: 3 },
    });
    const segments = [turn(2), observation('a0'), turn(2), observation('a1'), turn(2, 'stop')];
    /** A trajectory of these segments; `recorded` false: written without them (a single-turn record). */
    const trajectory = (id: string, s: TrajectorySegment[], recorded = true) => ({
      id,
      promptId: `p-${id}`,
      groupId: `g-${id}`,
      sampleIndex: 0,
      groupSize: 1,
      weightVersion: 0,
      reward: 1,
      tokens: [...prompt, ...s.flatMap((g) => Array.from({ length: g.length }, (_, i) => 10 + i))],
      // Observation tokens carry logprob 0 (they are not the model's).
      logprobs: [...prompt.map(() => 0), ...s.flatMap((g) => Array.from({ length: g.length }, () => (g.kind === 'generated' ? -0.5 : 0)))],
      promptLength: prompt.length,
      responseLength: s.reduce((n, g) => n + g.length, 0),
      ...(recorded ? { segments: s } : {}),
    });
    await writer.write(trajectory('multi', segments));
    await writer.write(trajectory('single', [turn(5, 'stop')], false));

    state = await applyUntil(
      page,
      state,
      (s) => (s.actions?.kinds?.find((k) => k.kind === 'lookup')?.results ?? 0) >= ACTIONS && (s.actions?.turns?.reduce((a, b) => a + b, 0) ?? 0) >= 2,
    );
    const row = state.actions!.kinds!.find((k) => k.kind === 'lookup')!;
    expect(row).toMatchObject({ kind: 'lookup', waiting: 0, running: 0, workers: 1, slots: 3, busy: 0, results: ACTIONS, byStatus: { ok: ACTIONS } });
    expect(row.queueMsP50).not.toBeNull();
    expect(row.execMsP99).toBeGreaterThanOrEqual(row.execMsP50!);
    expect(state.actions!.turns).toEqual([0, 1, 0, 1]);

    // The page draws the same panel.
    browser = await launchChromium();
    const { page: tab, errors } = await pageWithErrors(browser);
    await tab.goto(`http://127.0.0.1:${port}/`);
    await tab.waitForFunction((n) => document.querySelector('#action-kinds tr[data-kind=lookup] td[data-field=results]')?.textContent === `ok ${n}`, ACTIONS, {
      timeout: DEADLINE_MS,
    });
    await tab.waitForFunction(() => document.getElementById('hist-turns')?.dataset.total === '2', null, { timeout: DEADLINE_MS });
    const drawn = await tab.evaluate(() => ({
      workers: document.querySelector('#action-kinds tr[data-kind=lookup] td[data-field=workers]')?.textContent,
      busy: document.querySelector('#action-kinds tr[data-kind=lookup] td[data-field=busy]')?.textContent,
      bars: Array.from(document.querySelectorAll('#hist-turns .hist-bar')).map((b) => [b.dataset.value, b.dataset.count]),
      stats: document.querySelector('#hist-turns .hist-stats')?.textContent,
    }));
    expect(drawn).toEqual({
      workers: '1',
      busy: '0 / 3',
      bars: [
        ['0', '0'],
        ['1', '1'],
        ['2', '0'],
        ['3', '1'],
      ],
      stats: 'p50 1 · p90 3 · max 3 · 2 trajectories',
    });
    expect(errors).toEqual([]);
  }, 120_000);
});
