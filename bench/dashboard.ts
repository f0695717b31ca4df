/**
 * `npm run bench -- dashboard`: the manager's dashboard at the scale of a thousand-GPU job
 * (issue #29). A real nats-server and `laminar manager`; in this process, the control bench's
 * fleet (128 relays and 1,024 rollouts as real `MemberAgent`s on their own NATS connections) in
 * its moving form: every heartbeat the rollouts report another KV use, batch and trajectories in
 * flight, and the relays a version arriving chunk by chunk, so that each second's update carries
 * what a running job's would (bench/control/fleet.ts).
 *
 * Phases, each `--measure` seconds:
 * 1. no page open: the manager's CPU (the floor: its control plane alone);
 * 2. one page in headless Chromium: the manager's CPU, and the page's time from an update's
 *    arrival to the end of the frame that shows it (the page's own timings,
 *    src/manager/dashboard/page/timings.ts), against the same page's bare frame (a frame that
 *    changes nothing, timed the same way: the raw limit);
 * 3. ten pages: the browser's and nine more streams read by plain HTTP clients in a separate
 *    process (bench/dashboard/sse-readers.ts), so that ten renderers do not take the two cores the
 *    manager is measured on; the manager's CPU and the page's render times again.
 * The manager's own account of each update (state, diff, JSON: `laminar_dashboard_update_seconds`)
 * and the bytes an update costs per page come from its /metrics. `--screenshot <file>` keeps a
 * picture of the page at the end (the README's).
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { delay } from '../src/common/concurrency.js';
import { parseDuration } from '../src/common/units.js';
import { freePort, startNatsServer } from '../src/services/index.js';
import { percentile, positiveInt, printTable, processCpuSeconds, round } from './support.js';
import { closeMembers, connectMembers } from './control/fleet.js';
import { httpJson, httpText, pct, until } from './control/helpers.js';
import { managerStatus, spawnManager } from './control/manager.js';
import { first, parseMetrics, sum, type Samples } from './control/metrics.js';
import { bareFrameTimes, launchChromium, pageResyncs, renderTimesSince, renderTimings, untilRolloutsShown } from './dashboard/browser.js';

const USAGE = `usage: npm run bench -- dashboard [--relays 128] [--rollouts 1024] [--heartbeat 1s] [--measure 60] [--screenshot <file.png>]

The manager's dashboard with the control bench's fleet moving: the manager's CPU with 0, 1 and 10
pages open, and a headless page's time to render each update. About 5 minutes with the defaults.
`;

const SSE_READERS = fileURLToPath(new URL('./dashboard/sse-readers.js', import.meta.url));
/** The pages of phase 3: the browser's and these. */
const OTHER_PAGES = 9;

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      relays: { type: 'string', default: '128' },
      rollouts: { type: 'string', default: '1024' },
      heartbeat: { type: 'string', default: '1s' },
      measure: { type: 'string', default: '60' },
      screenshot: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const relayCount = positiveInt(values.relays, '--relays');
  const rolloutCount = positiveInt(values.rollouts, '--rollouts');
  const measureS = positiveInt(values.measure, '--measure');
  const heartbeatMs = parseDuration(values.heartbeat);
  const say = (line: string): boolean => process.stderr.write(`dashboard bench: ${line}\n`);

  const nats = await startNatsServer({ jetstream: true });
  const cleanups: Array<() => Promise<unknown>> = [() => nats.stop()];
  try {
    const httpPort = await freePort();
    const manager = spawnManager(nats.url, httpPort, 6000);
    cleanups.unshift(() => manager.stop());
    await until(async () => (await httpJson(httpPort, '/status').catch(() => null)) !== null, 30_000, 'the manager did not answer /status');

    say(`${relayCount} relays and ${rolloutCount} rollouts joining`);
    const members = await connectMembers(nats.url, relayCount, rolloutCount, heartbeatMs, true);
    cleanups.unshift(() => closeMembers(members));
    for (const m of members) m.agent.start();
    await until(
      async () => {
        const s = await managerStatus(httpPort);
        return s.alive === members.length && s.chain === relayCount;
      },
      180_000,
      'not every member joined',
    );
    await delay(3000);

    /** The manager's CPU (fraction of a core) and its dashboard counters over `measureS`. */
    const measure = async (what: string): Promise<{ cpu: number; before: Samples; after: Samples }> => {
      say(`measuring ${what} for ${measureS} s`);
      const before = parseMetrics(await httpText(httpPort, '/metrics'));
      const cpu0 = processCpuSeconds(manager.pid);
      const t0 = performance.now();
      await delay(measureS * 1000);
      const cpu = (processCpuSeconds(manager.pid) - cpu0) / ((performance.now() - t0) / 1e3);
      return { cpu, before, after: parseMetrics(await httpText(httpPort, '/metrics')) };
    };

    const idle = await measure('the manager with no page open');

    const browser = await launchChromium();
    cleanups.unshift(() => browser.close());
    const page = await browser.newPage({ viewport: { width: 1600, height: 1200 } });
    const pageErrors: string[] = [];
    page.on('pageerror', (err) => pageErrors.push(err.message));
    await page.goto(`http://127.0.0.1:${httpPort}/`);
    await untilRolloutsShown(page, rolloutCount, 60_000);
    await delay(3000);
    const bare = await bareFrameTimes(page, 60);
    let timed = await renderTimings(page);
    const onePage = await measure('one page open in headless Chromium');
    const renderOne = await renderTimesSince(page, timed);

    const readers = spawn(process.execPath, [SSE_READERS, String(httpPort), String(OTHER_PAGES)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const readerLines = createInterface({ input: readers.stdout });
    const lines: string[] = [];
    const ready = new Promise<void>((resolve, reject) => {
      readerLines.on('line', (line) => {
        lines.push(line);
        if (line === 'ready') resolve();
      });
      readers.once('exit', (code) => reject(new Error(`the stream readers exited (${code}) before they were ready`)));
    });
    cleanups.unshift(() => Promise.resolve(readers.exitCode === null && readers.kill('SIGKILL')));
    await ready;
    const pages = first(parseMetrics(await httpText(httpPort, '/metrics')), 'laminar_dashboard_pages');
    if (pages !== 1 + OTHER_PAGES) throw new Error(`the manager counts ${pages} pages open, not ${1 + OTHER_PAGES}`);
    timed = await renderTimings(page);
    const tenPages = await measure(`${1 + OTHER_PAGES} pages open`);
    const renderTen = await renderTimesSince(page, timed);
    const readersDone = new Promise<void>((resolve) => readers.once('exit', () => resolve()));
    readers.kill('SIGTERM');
    await readersDone;
    const readerSummary = JSON.parse(lines.at(-1) ?? '{}') as { ended?: number };

    if (values.screenshot !== undefined) {
      await page.screenshot({ path: values.screenshot });
      say(`screenshot written to ${values.screenshot}`);
    }
    const resyncs = await pageResyncs(page);

    const updates = (m: { before: Samples; after: Samples }): number =>
      sum(m.after, 'laminar_dashboard_updates_total') - sum(m.before, 'laminar_dashboard_updates_total');
    const updateMs = (m: { before: Samples; after: Samples }): number =>
      (1e3 * (sum(m.after, 'laminar_dashboard_update_seconds_sum') - sum(m.before, 'laminar_dashboard_update_seconds_sum'))) / Math.max(1, updates(m));
    const bytesPerPageUpdate = (m: { before: Samples; after: Samples }, open: number): number =>
      (sum(m.after, 'laminar_dashboard_bytes_total') - sum(m.before, 'laminar_dashboard_bytes_total')) / Math.max(1, updates(m)) / open;
    const bareP50 = percentile(bare, 0.5);
    const result = {
      bench: 'dashboard',
      relays: relayCount,
      rollouts: rolloutCount,
      measure_s: measureS,
      manager_cpu_0_pages: round(idle.cpu),
      manager_cpu_1_page: round(onePage.cpu),
      manager_cpu_10_pages: round(tenPages.cpu),
      cpu_per_page_after_first: round((tenPages.cpu - onePage.cpu) / OTHER_PAGES, 4),
      update_ms_1_page: round(updateMs(onePage), 2),
      update_ms_10_pages: round(updateMs(tenPages), 2),
      update_bytes_per_page: Math.round(bytesPerPageUpdate(tenPages, 1 + OTHER_PAGES)),
      render_ms_p50_1_page: round(percentile(renderOne, 0.5), 1),
      render_ms_p99_1_page: round(percentile(renderOne, 0.99), 1),
      render_ms_p50_10_pages: round(percentile(renderTen, 0.5), 1),
      render_ms_p99_10_pages: round(percentile(renderTen, 0.99), 1),
      renders_timed: renderOne.length + renderTen.length,
      bare_frame_ms_p50: round(bareP50, 1),
      render_over_bare_frame: round(percentile(renderOne, 0.5) / bareP50, 2),
      page_resyncs: resyncs,
      streams_ended: readerSummary.ended ?? null,
      page_errors: pageErrors.length,
    };
    printTable(`dashboard: ${relayCount} relays + ${rolloutCount} rollouts moving, an update a second`, [
      ['figure', 'measured', 'raw limit (same run)', 'ratio'],
      ['manager CPU, no page open', `${pct(idle.cpu)} of a core`, '', ''],
      ['manager CPU, 1 page', `${pct(onePage.cpu)} of a core`, `${pct(idle.cpu)} with none`, `${round(onePage.cpu / idle.cpu, 2)}`],
      ['manager CPU, 10 pages', `${pct(tenPages.cpu)} of a core`, `${pct(idle.cpu)} with none`, `${round(tenPages.cpu / idle.cpu, 2)}`],
      ['  each page after the first', `${pct(result.cpu_per_page_after_first)} of a core`, '', ''],
      ['an update in the manager (state, diff, JSON)', `${result.update_ms_1_page} ms (1 page) / ${result.update_ms_10_pages} ms (10)`, '', ''],
      ['bytes per update per page', `${result.update_bytes_per_page} B`, '', ''],
      [
        'update arrived -> frame shown, 1 page (p50 / p99)',
        `${result.render_ms_p50_1_page} / ${result.render_ms_p99_1_page} ms`,
        `bare frame ${result.bare_frame_ms_p50} ms`,
        `${result.render_over_bare_frame}`,
      ],
      ['the same with 10 pages open', `${result.render_ms_p50_10_pages} / ${result.render_ms_p99_10_pages} ms`, '', ''],
      ['page resyncs / streams cut off / page errors', `${resyncs} / ${result.streams_ended} / ${pageErrors.length}`, '', 'must be 0 / 0 / 0'],
    ]);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    if (resyncs > 0 || (result.streams_ended ?? 0) > 0 || pageErrors.length > 0) process.exitCode = 1;
  } finally {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  }
}
