/**
 * The dashboard page in headless Chromium (Debian's `chromium`, driven by playwright-core)
 * against a real job: a real `laminar manager` on a real nats-server, three real relays chained
 * over UCX on loopback, a sim-trainer publishing a version a step and four sim-rollouts pulling
 * them from their relays, prompts in a real redis-server.
 *
 * The page loads (with its assets and no error in the console, so nothing was refused by its
 * Content-Security-Policy), shows the chain in plan order with the master first, and the
 * rollouts; it follows a new version published (the relays' tiles, the header and the rollouts'
 * version bar) and draws the staleness histograms of the last minute (inherent and consumption,
 * the sim-trainer's sampler publishing its batch summaries); a middle relay SIGKILLed is marked
 * dead, outside the repaired chain, with its death in the event log; and once its manager stops,
 * the page says it is reconnecting, then takes a snapshot from the manager started on the same
 * port. Every wait is on the page's DOM
 * (waitForFunction), never on time; the deadlines only bound a failing test.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PromptPool } from '../../src/data/index.js';
import { spawnDaemon, startNatsServer, startRedisServer, type Daemon, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { launchChromium, pageWithErrors, type PageDocument, type PageWindow } from '../helpers/browser.js';
import { tempShmDir, until } from '../helpers/relay.js';

const JOB = 'dashboard-page';
const MODEL = 'dash/policy';
const RELAYS = ['r0', 'r1', 'r2'];
/** Relay each rollout takes its weights from (none on r1, the one killed). */
const ROLLOUTS: [string, string][] = [
  ['ro0', 'r0'],
  ['ro1', 'r0'],
  ['ro2', 'r2'],
  ['ro3', 'r2'],
];
// The page's globals, in the functions run in the page.
declare const document: PageDocument;
declare const window: PageWindow;

/** Bounds a wait that would otherwise hang a failing test; the waits themselves end on the page's state. */
const DEADLINE_MS = 90_000;

describe('the dashboard page in headless Chromium, against a running job', () => {
  const shm = tempShmDir('laminar-dash-');
  const daemons = new Map<string, Daemon>();
  let nats: NatsServer | undefined;
  let redisServer: RedisServer | undefined;
  let redis: Redis | undefined;
  let browser: Browser | undefined;
  let page: Page;
  let errors: string[];
  let port: number;
  let control: string[];

  const startManager = async (id: string, httpPort: number): Promise<Daemon> => {
    const argv = ['manager', ...control, '--id', id, '--http-port', String(httpPort), '--redis', redisServer!.url, '--model', MODEL];
    argv.push('--lease', '2s', '--suspect-after', '1s', '--dead-after', '2s', '--dashboard-interval', '250ms');
    const manager = await spawnDaemon(`manager ${id}`, argv, 'manager started');
    daemons.set('manager', manager);
    return manager;
  };
  const chainIds = async (): Promise<string[]> => {
    const answer = await fetch(`http://127.0.0.1:${port}/status`).catch(() => null);
    return answer?.ok ? ((await answer.json()) as { chain: { id: string }[] }).chain.map((r) => r.id) : [];
  };

  beforeAll(async () => {
    const secretFile = join(shm.dir, 'secret');
    writeFileSync(secretFile, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });
    [nats, redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer()]);
    redis = new Redis(redisServer.port, '127.0.0.1', { maxRetriesPerRequest: null });
    const prompts = await PromptPool.open({ redis, epochs: 0 });
    await prompts.load(Array.from({ length: 2048 }, (_, i) => ({ id: `q${i}`, payload: { question: `prompt ${i}` }, n: 2 })));
    control = ['--nats', nats.url, '--job', JOB, '--log-level', 'info'];
    const env = { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp' };
    port = (await startManager('m1', 0)).ready.httpPort as number;

    for (const [i, id] of RELAYS.entries()) {
      const argv = ['relay', ...control, '--id', id, '--host', `host${i}`, '--shm-dir', join(shm.dir, id), '--socket', join(shm.dir, `${id}.sock`)];
      argv.push('--no-pin', '--secret-file', secretFile, '--heartbeat', '250ms', '--metrics-port', '-1', '--listen', '127.0.0.1:0', '--chunk-size', '256KiB');
      daemons.set(id, await spawnDaemon(`relay ${id}`, argv, 'relay ready', [], env, undefined, 60_000));
      // In this order: r0 the master (on the trainer's host), then r1, then r2.
      await until(`${id} in the chain`, async () => ((await chainIds()).includes(id) ? true : undefined), 60_000);
    }
    const trainer = ['sim-trainer', ...control, '--model', MODEL, '--size', '1MiB', '--tensors', '2', '--batch-size', '8', '--train-time', '1s'];
    trainer.push('--host', 'host0', '--secret-file', secretFile, '--metrics-port', '0');
    daemons.set('sim-trainer', await spawnDaemon('sim-trainer', trainer, 'serving /metrics', [], env, undefined, 60_000));
    for (const [i, [id, relay]] of ROLLOUTS.entries()) {
      const argv = ['sim-rollout', ...control, '--id', id, '--redis', redisServer.url, '--relay-socket', join(shm.dir, `${relay}.sock`)];
      argv.push('--host', `host${RELAYS.indexOf(relay)}`, '--model', MODEL, '--time-scale', '10', '--heartbeat', '250ms', '--batch-prompts', '4');
      argv.push('--kv-capacity', '8192', '--output-median', '32', '--output-max', '128', '--seed', String(i + 1));
      daemons.set(id, await spawnDaemon(`sim-rollout ${id}`, argv, 'sim-rollout started', [], env, undefined, 60_000));
    }
    browser = await launchChromium();
    ({ page, errors } = await pageWithErrors(browser));
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await Promise.all([...daemons.values()].map((d) => d.kill('SIGKILL').catch(() => undefined)));
    redis?.disconnect();
    await Promise.all([nats?.stop(), redisServer?.stop()]);
    shm.cleanup();
  });

  /** Waits until `fn` holds in the page (evaluated at each animation frame). */
  const pageUntil = async (fn: (arg: string | number | null) => boolean, arg: string | number | null): Promise<void> => {
    await page.waitForFunction(fn, arg, { timeout: DEADLINE_MS });
  };
  const tiles = (): Promise<{ id: string; health: string; position: string; classes: string; holds: string }[]> =>
    page.evaluate(() =>
      Array.from(document.querySelectorAll('#chain .tile')).map((n) => ({
        id: n.dataset.relay ?? '',
        health: n.dataset.health ?? '',
        position: n.dataset.position ?? '',
        classes: n.className,
        holds: n.dataset.holds ?? '',
      })),
    );

  it('loads with its assets, shows the chain with the master first and the rollouts, and follows a new version', async () => {
    const answer = await page.goto(`http://127.0.0.1:${port}/`);
    expect(answer?.status()).toBe(200);
    expect(answer?.headers()['content-type']).toBe('text/html; charset=utf-8');
    expect(answer?.headers()['content-security-policy']).toContain("default-src 'self'");

    // The chain in plan order, master first, every relay alive; the four rollouts in the grid.
    await pageUntil(
      (ids) =>
        Array.from(document.querySelectorAll('#chain .tile:not(.outside)'))
          .map((n) => n.dataset.relay)
          .join() === ids,
      RELAYS.join(),
    );
    const chain = await tiles();
    expect(chain.map((t) => t.position)).toEqual(['0', '1', '2']);
    expect(chain[0]!.classes).toContain('master');
    expect(chain.every((t) => t.health === 'alive')).toBe(true);
    await pageUntil(() => document.getElementById('rollout-grid')?.dataset.shown === '4', null);
    expect(await page.textContent('#rollout-summary')).toBe('4 of 4 shown');
    await page.waitForSelector('#charts .chart canvas', { timeout: DEADLINE_MS });
    expect(await page.locator('#charts .chart').count()).toBe(5);

    // A version the trainer publishes after the page loaded: the header names it, every relay
    // of the chain comes to hold it, and rollouts generate with it (the version bar).
    const seen = await page.evaluate(() => Math.max(-1, ...(window.laminarDashboard.state()?.header.newest.map((n) => n.version) ?? [])));
    await pageUntil((arg) => {
      const before = Number(arg);
      const newest = window.laminarDashboard.state()?.header.newest[0]?.version ?? -1;
      if (newest <= before) return false;
      const holders = Array.from(document.querySelectorAll('#chain .tile:not(.outside)')).filter((n) =>
        (n.dataset.holds ?? '').split(',').some((h) => Number(h.split(':').pop()) > before),
      );
      const bar = Array.from(document.querySelectorAll('#rollout-versions .version-seg')).some((n) => Number(n.dataset.version) > before);
      return holders.length === 3 && bar && (document.querySelector('[data-fact=newest] dd')?.textContent ?? '').includes(`v${newest}`);
    }, seen);

    // The staleness histograms of the last minute: trajectories completed (inherent) and trained
    // on (consumption: the sim-trainer's sampler publishes a summary of each batch), a bar per
    // value with its count, and p50, p90, max and the total under each, as the state says.
    await pageUntil(() => Array.from(document.querySelectorAll('#hist-inherent .hist-bar')).some((n) => Number(n.dataset.count) > 0), null);
    // The bars are the state's counts (at the frame after each update: the state moves on every 250 ms).
    await pageUntil(() => {
      const staleness = window.laminarDashboard.state()?.staleness;
      if (!staleness) return false;
      return (['inherent', 'consumption'] as const).every((kind) => {
        const bars = Array.from(document.querySelectorAll(`#hist-${kind} .hist-bar`)).map((n) => Number(n.dataset.count));
        const counts = staleness[kind];
        return bars.length >= counts.length && bars.every((n, v) => n === (counts[v] ?? 0));
      });
    }, null);
    const histograms = await page.evaluate(() =>
      ['inherent', 'consumption'].map((kind) => ({
        state: document.getElementById(`hist-${kind}`)?.dataset.state,
        total: Number(document.getElementById(`hist-${kind}`)?.dataset.total),
        counts: Array.from(document.querySelectorAll(`#hist-${kind} .hist-bar`)).map((n) => Number(n.dataset.count)),
        stats: document.querySelector(`#hist-${kind} .hist-stats`)?.textContent ?? '',
      })),
    );
    for (const [k, kind] of (['inherent', 'consumption'] as const).entries()) {
      const h = histograms[k]!;
      expect(h.state, kind).toBe('bars');
      expect(h.counts.filter((n) => n > 0).length, kind).toBeGreaterThan(0);
      expect(h.total, kind).toBe(h.counts.reduce((a, b) => a + b, 0));
      expect(h.stats, kind).toMatch(/^p50 \d+\+? · p90 \d+\+? · max \d+\+? · [\d,]+ trajector(y|ies)$/);
    }
    expect(await page.evaluate(() => window.laminarDashboard.renderTimes().length)).toBeGreaterThan(0);
    expect(errors).toEqual([]);
  }, 150_000);

  it('marks a SIGKILLed relay dead and shows the repaired chain, with the death in the event log', async () => {
    await daemons.get('r1')!.kill('SIGKILL');
    daemons.delete('r1');
    await pageUntil(() => {
      const inChain = Array.from(document.querySelectorAll('#chain .tile:not(.outside)'))
        .map((n) => n.dataset.relay)
        .join();
      const r1 = document.querySelector('#chain .tile[data-relay=r1]');
      return inChain === 'r0,r2' && r1?.dataset.health === 'dead' && r1.classList.contains('dead') && r1.classList.contains('outside');
    }, null);
    expect(await page.textContent('#chain-summary')).toMatch(/^2 in the chain, 1 outside \(1 dead\)/);
    await pageUntil(() => document.querySelector('#events .event[data-kind=relay-dead][data-subject=r1]') !== null, null);
    expect(await page.locator('#events .event[data-kind=plan]').count()).toBeGreaterThan(0);
    expect(errors).toEqual([]);
  }, 150_000);

  it('says it is reconnecting once its manager stops, and takes a snapshot from the next one on the port', async () => {
    expect(await daemons.get('manager')!.kill('SIGTERM')).toBe(0);
    await pageUntil(() => document.getElementById('connection')?.dataset.state === 'reconnecting', null);
    // The relays and rollouts are still there: the next manager takes the job over and the page reconnects to it.
    await startManager('m2', port);
    await pageUntil(
      () =>
        document.getElementById('connection')?.dataset.state === 'live' &&
        (document.querySelector('[data-fact=manager] dd')?.textContent ?? '').startsWith('m2 (leading)') &&
        Array.from(document.querySelectorAll('#chain .tile:not(.outside)'))
          .map((n) => n.dataset.relay)
          .join() === 'r0,r2',
      null,
    );
    // The state it took is a snapshot of the new manager, not deltas on the old one's.
    expect(await page.evaluate(() => window.laminarDashboard.state()?.header.manager)).toBe('m2');
    // The browser's failed reconnects while no manager listened are the only console errors.
    expect(errors.filter((e) => !/ERR_CONNECTION_REFUSED|Failed to load resource/.test(e))).toEqual([]);
  }, 150_000);
});
