/**
 * The dashboard's publisher on a real HTTP server (the router every daemon runs) on a real
 * socket, read by SSE clients that parse the stream: a snapshot, then deltas that applyDelta
 * turns into exactly the state a page opening afterwards gets as its snapshot, the same bytes to
 * every page; the page limit (503, Retry-After, ERR_DASHBOARD_FULL); a page that stops reading
 * cut off while another goes on; close() ending every stream. The timer is set far away and the
 * tests step the updates themselves, so nothing waits on elapsed time.
 */
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { startHttpServer, type HttpServer } from '../../src/common/http-server.js';
import { EventJournal } from '../../src/manager/dashboard/journal.js';
import { applyDelta, type DashboardDelta, type DashboardState } from '../../src/manager/dashboard/model.js';
import { DashboardPublisher, EVENTS_SHOWN, type DashboardPublisherOptions } from '../../src/manager/dashboard/publisher.js';
import { dashboardRoutes } from '../../src/manager/dashboard/routes.js';
import { SeriesRecorder } from '../../src/manager/dashboard/series-recorder.js';
import type { ManagerStatus } from '../../src/manager/manager.js';
import { get, json } from '../helpers/http.js';
import { metricValue, until } from '../helpers/relay.js';
import { SseClient } from '../helpers/sse.js';

/** A manager's status with `relays` relays in the chain and `rollouts` rollouts. */
function fleet(relays: number, rollouts: number): ManagerStatus {
  return {
    manager: 'm1',
    leader: true,
    leaderId: 'm1',
    job: 'job',
    epoch: 1,
    master: 'relay-000',
    chain: Array.from({ length: relays }, (_, i) => ({
      position: i,
      id: `relay-${String(i).padStart(3, '0')}`,
      address: `10.0.0.${i}:13337`,
      host: `host-${i}`,
      labels: {},
      health: 'alive' as const,
      heardMsAgo: 100,
      holds: [{ model: 'm', version: 1 }],
      receiving: [],
      progress: 1,
      demoted: false,
      bytes: { sent: 0, received: 0 },
    })),
    members: [
      ...Array.from({ length: relays }, (_, i) => ({
        id: `relay-${String(i).padStart(3, '0')}`,
        kind: 'relay' as const,
        host: `host-${i}`,
        health: 'alive' as const,
        heardMsAgo: 100,
        inChain: true,
      })),
      ...Array.from({ length: rollouts }, (_, i) => ({
        id: `rollout-${String(i).padStart(4, '0')}`,
        kind: 'rollout' as const,
        host: `host-${i % 8}`,
        health: 'alive' as const,
        heardMsAgo: 100,
        inChain: false,
      })),
    ],
    newest: [{ model: 'm', version: 1 }],
    rollouts: Array.from({ length: rollouts }, (_, i) => ({
      id: `rollout-${String(i).padStart(4, '0')}`,
      host: `host-${i % 8}`,
      health: 'alive' as const,
      state: 'generating' as const,
      model: 'm',
      weightVersion: 1,
      kvUsed: 0.5,
      kvPrev: 0.5,
      running: 8,
      waiting: 0,
      owned: 8,
      tokensPerSecond: 100,
    })),
    repack: { busy: [], orphansWaiting: 0, moves: { done: 0, failed: 0 }, orphans: { resumed: 0, completed: 0, returned: 0, lost: 0 } },
  };
}

interface Setup {
  server: HttpServer;
  publisher: DashboardPublisher;
  registry: Registry;
  journal: EventJournal;
  series: SeriesRecorder;
  /** The status the next update reads; tests change it. */
  status: ManagerStatus;
}

const open: { setup: Setup | null; clients: SseClient[] } = { setup: null, clients: [] };

async function setUp(options: Partial<DashboardPublisherOptions> = {}, relays = 4, rollouts = 16): Promise<Setup> {
  const registry = new Registry();
  const journal = new EventJournal();
  const series = new SeriesRecorder();
  const setup = { registry, journal, series, status: fleet(relays, rollouts) } as Setup;
  setup.publisher = new DashboardPublisher({
    status: () => setup.status,
    series: () => series.window(),
    events: () => journal.latest(EVENTS_SHOWN),
    staleness: (t) => series.stalenessCounts(t),
    registry,
    // The tests step the updates: the timer never fires within a test.
    intervalMs: 3_600_000,
    ...options,
  });
  setup.server = await startHttpServer({ host: '127.0.0.1', port: 0, routes: dashboardRoutes(setup.publisher), registry });
  open.setup = setup;
  return setup;
}

async function page(setup: Setup): Promise<SseClient> {
  const client = await SseClient.open(setup.server.port);
  open.clients.push(client);
  return client;
}

afterEach(async () => {
  for (const client of open.clients) client.close();
  open.clients = [];
  open.setup?.publisher.close();
  await open.setup?.server.close();
  open.setup = null;
});

describe('the dashboard publisher', () => {
  it('sends a snapshot, then deltas that give every page the state a new page gets, the same bytes to each', async () => {
    const setup = await setUp();
    const a = await page(setup);
    expect(a.status).toBe(200);
    expect(a.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(a.headers['cache-control']).toBe('no-store');
    expect(a.headers['x-accel-buffering']).toBe('no');
    const first = await a.next();
    expect(first.event).toBe('snapshot');
    expect(first.retry).toBe(2000);
    let state = JSON.parse(first.data) as DashboardState;
    expect(first.id).toBe(String(state.seq));
    expect(state.relays.map((r) => r.id)).toEqual(['relay-000', 'relay-001', 'relay-002', 'relay-003']);
    expect(state.rollouts.ids).toHaveLength(16);
    // A second page opened before any update shares the snapshot (the same state).
    const b = await page(setup);
    const bFirst = await b.next();
    expect(bFirst.data).toBe(first.data);

    // Changes of every kind: a relay dies (out of the chain), KV use moves, an event, a point.
    const changes: Array<(s: ManagerStatus, t: number) => void> = [
      (s) => {
        const dead = s.chain.splice(1, 1)[0]!;
        s.chain.forEach((r, i) => (r.position = i));
        const member = s.members.find((m) => m.id === dead.id)!;
        member.health = 'dead';
        member.inChain = false;
        setup.journal.record('relay-dead', dead.id, 'dead (report)');
      },
      (s) => s.rollouts.forEach((r, i) => (r.kvUsed = (i % 10) / 10)),
      (s, t) => setup.series.sample(t, s, { bytesReceived: 1000 * t, watching: false }),
      () => {
        setup.series.inherent(2);
        setup.series.consumption(1, 8);
      },
      (s) => {
        s.newest = [{ model: 'm', version: 2 }];
        s.chain[0]!.receiving = [{ model: 'm', version: 2, hwm: 3, chunks: 10 }];
        s.chain[0]!.demoted = true;
      },
      () => undefined,
    ];
    let t = Date.now();
    for (const change of changes) {
      change(setup.status, (t += 1000));
      setup.publisher.update();
      const [da, db] = [await a.next(), await b.next()];
      expect(da.event).toBe('delta');
      expect(db.data, 'the same bytes to every page').toBe(da.data);
      const delta = JSON.parse(da.data) as DashboardDelta;
      expect(delta.base).toBe(state.seq);
      expect(da.id).toBe(String(delta.seq));
      state = applyDelta(state, delta);
      // A page opening now gets the state the others reached.
      const fresh = await page(setup);
      const snapshot = await fresh.nextJson<DashboardState>('snapshot');
      expect(state).toEqual(snapshot);
      fresh.close();
    }
    expect(state.relays.find((r) => r.id === 'relay-001')).toMatchObject({ health: 'dead', position: null });
    expect(state.relays[0]!.demoted).toBe(true);
    expect(state.events.map((e) => e.kind)).toEqual(['relay-dead']);
    expect(state.series.t).toHaveLength(1);
    expect(state.staleness).toEqual({ inherent: [0, 0, 1], consumption: [0, 8], windowS: 60, maxValue: 64 });
    const text = await setup.registry.metrics();
    expect(metricValue(text, 'laminar_dashboard_updates_total')).toBe(changes.length);
    expect(metricValue(text, 'laminar_dashboard_bytes_total')).toBeGreaterThanOrEqual(a.bytes + b.bytes);
    expect(text).toMatch(/laminar_dashboard_update_seconds_count \d+/);
    await until('the fresh pages counted as gone', async () =>
      metricValue(await setup.registry.metrics(), 'laminar_dashboard_pages_closed_total', 'reason="left"') === changes.length ? true : undefined,
    );
    expect(metricValue(await setup.registry.metrics(), 'laminar_dashboard_pages')).toBe(2);
  });

  it('refuses pages beyond the limit with 503, Retry-After and ERR_DASHBOARD_FULL, and takes one again once a page left', async () => {
    const setup = await setUp({ maxPages: 2 });
    const a = await page(setup);
    await a.next();
    await page(setup);
    const refused = await get(setup.server.port, '/events');
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBe('5');
    expect(json(refused).code).toBe(ErrorCodes.DASHBOARD_FULL);
    expect(metricValue(await setup.registry.metrics(), 'laminar_dashboard_pages_closed_total', 'reason="full"')).toBe(1);
    a.close();
    await until('the page that left is forgotten', () => (setup.publisher.open === 1 ? true : undefined));
    const c = await page(setup);
    expect(c.status).toBe(200);
    expect((await c.next()).event).toBe('snapshot');
    // A HEAD of /events: the stream's headers, no stream held.
    const head = await get(setup.server.port, '/events', { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(setup.publisher.open).toBe(2);
  });

  it('cuts off a page that stops reading once more than the limit is buffered, and goes on with the others', async () => {
    const setup = await setUp({ maxBufferedBytes: 256 * 1024 }, 8, 256);
    const slow = await page(setup);
    const fast = await page(setup);
    await slow.next();
    slow.pause();
    let state = await fast.nextJson<DashboardState>('snapshot');
    // Each update carries 50 new events of 1 KB: the slow page's socket buffers fill, then its response's.
    let updates = 0;
    while (setup.publisher.open === 2) {
      for (let i = 0; i < 50; i++) setup.journal.record('plan', `epoch ${updates}`, 'x'.repeat(1000));
      setup.publisher.update();
      updates++;
      state = applyDelta(state, await fast.nextJson<DashboardDelta>('delta'));
      if (updates > 5000) throw new Error('the slow page was never cut off');
    }
    const text = await setup.registry.metrics();
    expect(metricValue(text, 'laminar_dashboard_pages_closed_total', 'reason="slow"')).toBe(1);
    expect(setup.publisher.open).toBe(1);
    // The slow page, reading again, finds its stream cut off (its EventSource would reconnect for a snapshot).
    slow.resume();
    await slow.closed();
    // The fast page is still served, and still in step.
    setup.status.rollouts[0]!.kvUsed = 0.99;
    setup.publisher.update();
    state = applyDelta(state, await fast.nextJson<DashboardDelta>('delta'));
    expect(state.rollouts.columns.kv[0]).toBe(99);
  });

  it('ends every stream on close(), and the server then closes', async () => {
    const setup = await setUp();
    const pages = [await page(setup), await page(setup)];
    for (const p of pages) await p.next();
    setup.publisher.close();
    await Promise.all(pages.map((p) => p.closed()));
    expect(metricValue(await setup.registry.metrics(), 'laminar_dashboard_pages_closed_total', 'reason="shutdown"')).toBe(2);
    // A page asking after close() is refused, not held.
    const late = await get(setup.server.port, '/events');
    expect(late.status).toBe(503);
    expect(json(late).code).toBe(ErrorCodes.DASHBOARD_FULL);
    await setup.server.close();
    open.setup = null;
  });

  it('runs its timer only while a page is open', async () => {
    const setup = await setUp({ intervalMs: 20 });
    const a = await page(setup);
    const snapshot = await a.nextJson<DashboardState>('snapshot');
    // Two timer updates arrive on their own.
    const d1 = await a.nextJson<DashboardDelta>('delta');
    const d2 = await a.nextJson<DashboardDelta>('delta');
    expect([d1.base, d2.base]).toEqual([snapshot.seq, d1.seq]);
    a.close();
    await until('the page is gone', () => (setup.publisher.open === 0 ? true : undefined));
    const updates = metricValue(await setup.registry.metrics(), 'laminar_dashboard_updates_total');
    // No page: no state kept, and update() does nothing.
    expect(setup.publisher.currentSeq).toBe(0);
    setup.publisher.update();
    expect(metricValue(await setup.registry.metrics(), 'laminar_dashboard_updates_total')).toBe(updates);
  });

  it('refuses bad limits with ERR_INVALID_ARG', () => {
    const base = { status: () => fleet(1, 1), series: () => new SeriesRecorder().window(), events: () => [], registry: new Registry() };
    expect(() => new DashboardPublisher({ ...base, intervalMs: 0 })).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
    expect(() => new DashboardPublisher({ ...base, maxPages: 1.5 })).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
  });
});
