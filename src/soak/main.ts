/**
 * `npm run soak -- --duration 2h`: the demo's whole job under hours of overlapping faults drawn
 * from a seed, then the ledger. Faults: SIGKILL (and restart) of relays (the master included),
 * rollouts, the active manager and the trainer; nats-server and redis-server restarts; a relay's
 * UCX link stalled on the netns testbed; a process frozen with SIGSTOP; a relay's memory budget
 * filled. Every minute (--sample-every) it reads each daemon's RSS, heap and open files, the
 * relays' segments and the NATS consumers; at the end, the trend of each over the last half of
 * the run, the ledger (nothing lost, duplicated or corrupt; every prompt accounted for), a JSON
 * line `{"bench":"soak",...}` and a PNG of throughput and resources with the faults marked.
 * Exit code 1 when the ledger or the resources fail, 130 on Ctrl-C.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync, appendFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { openJetStreamManager } from '../data/jetstream-manager.js';
import { Command } from 'commander';
import { describeFailure } from '../common/errors.js';
import { delay } from '../common/concurrency.js';
import { parseBytes, parseDurationOption } from '../common/units.js';
import { PromptPool } from '../data/index.js';
import { intIn, managerStatus, scrape } from '../demo/books.js';
import { onInterrupt } from '../demo/interrupt.js';
import { openStage } from '../demo/stage.js';
import { projectPython, REPO_ROOT } from '../services/python.js';
import { createTestbed, type Testbed } from '../testing/testbed.js';
import { claimBed } from '../testing/bed-claim.js';
import { FaultInjector } from './fault-injector.js';
import { faultSchedule, overlapCount, overlapping, type FaultKind } from './fault-schedule.js';
import { SOAK_MODEL, createSoakJob, type SoakJob } from './job.js';
import { BufferAudit } from './audit.js';
import { promptBooks, trajectoryBooks, weightBooks } from './ledger.js';
import { filesIn, openFds, residentBytes, trend, type Trend } from './resources.js';
import type { DaemonKind } from './supervisor.js';

interface SoakCliOptions {
  duration: string;
  seed?: string;
  faultEvery: string;
  relays: string;
  rollouts: string;
  size: string;
  sampleEvery: string;
  settle: string;
  testbed: 'auto' | 'on' | 'off';
  out: string;
  timeScale: string;
  natsCluster: string;
}

type Group = DaemonKind | 'nats-server' | 'redis-server' | 'soak';
const GROUPS: Group[] = ['relay', 'rollout', 'manager', 'trainer', 'nats-server', 'redis-server', 'soak'];

/** One row of the timeline: a sample of the whole job. */
interface Sample {
  atMs: number;
  completed: number;
  trainerVersion: number;
  faultsActive: number;
  rssBytes: Record<Group, number>;
  fds: Record<Group, number>;
  heapBytes: Record<DaemonKind, number>;
  shmFiles: number;
  consumers: number;
  consumersByStream: Record<string, number>;
  /**
   * Each process by name: its pid (a restart is a new one), RSS and fds. A group's sum mixes
   * young and old processes; a leak shows as one pid's RSS rising over its life.
   */
  processes: Record<string, { pid: number; rssMiB: number; fds: number }>;
}

const TENSORS = 8;
/** Trends are judged over at least this much of the run's second half, in at least this many samples. */
const MIN_TREND_WINDOW_MS = 10 * 60_000;
const MIN_TREND_SAMPLES = 8;

async function main(): Promise<void> {
  const opts = new Command('soak')
    .description('run the demo job for hours under overlapping random faults, then check the ledger and the resource trends')
    .option('--duration <time>', 'how long faults are injected (the settle and the ledger come after)', '10m')
    .option('--seed <n>', 'seed of the fault schedule (default: drawn and printed)')
    .option('--fault-every <time>', 'mean time between fault arrivals (exponential gaps)', '25s')
    .option('--relays <n>', 'relays, one per simulated host', '4')
    .option('--rollouts <n>', 'simulated rollouts', '8')
    .option('--size <bytes>', 'size of each weight version', '8MiB')
    .option('--time-scale <x>', 'simulated seconds per wall second (rollouts and trainer)', '10')
    .option('--sample-every <time>', 'how often resources and throughput are read', '60s')
    .option('--settle <time>', 'after the last fault: how long the job may take to hold the newest version everywhere', '120s')
    .option('--testbed <mode>', 'relays and the trainer on netns hosts (needed for stalled links): auto, on, off', 'auto')
    .option('--out <dir>', 'where the timeline, the faults, the summary and the PNG go', 'soak-out')
    .option(
      '--nats-cluster <nodes>',
      'NATS nodes: 1 (one nats-server) or 3 (a JetStream cluster at R3; adds NATS node kills and partitions to the faults)',
      '1',
    )
    .parse(process.argv)
    .opts<SoakCliOptions>();
  const durationMs = parseDurationOption('--duration', opts.duration);
  const meanGapMs = parseDurationOption('--fault-every', opts.faultEvery);
  const sampleMs = parseDurationOption('--sample-every', opts.sampleEvery);
  const settleMs = parseDurationOption('--settle', opts.settle);
  const relayCount = intIn('relays', opts.relays, 3, 16);
  const rolloutCount = intIn('rollouts', opts.rollouts, 1, 64);
  const sizeBytes = parseBytes(opts.size);
  const timeScale = Number(opts.timeScale);
  if (!(timeScale > 0)) throw new Error('--time-scale must be > 0');
  if (opts.natsCluster !== '1' && opts.natsCluster !== '3') throw new Error(`--nats-cluster must be 1 or 3, got ${JSON.stringify(opts.natsCluster)}`);
  const natsNodes = Number(opts.natsCluster);
  if (!['auto', 'on', 'off'].includes(opts.testbed)) throw new Error(`--testbed must be auto, on or off, got ${JSON.stringify(opts.testbed)}`);
  const seed = opts.seed !== undefined ? intIn('seed', opts.seed, 0, 2 ** 32 - 1) : Math.floor(Math.random() * 2 ** 31);
  const out = resolve(opts.out);
  mkdirSync(out, { recursive: true });

  let testbed: Testbed | null = null;
  if (opts.testbed !== 'off') {
    try {
      // A name and subnet of this process's own: a second soak (the suite's short one) or a test
      // beside it must not take this one's down.
      testbed = createTestbed(claimBed('sk'), relayCount + 1, { rate: '2gbit' });
    } catch (err) {
      if (opts.testbed === 'on') throw err;
      console.log(`no netns testbed (${(err as Error).message.split('\n')[0]}): everything on loopback, no stalled links`);
    }
  }
  const exclude: FaultKind[] = [
    ...(testbed ? [] : ['stall-link' as const]),
    ...(natsNodes === 3 ? [] : ['kill-nats-node' as const, 'partition-nats-node' as const]),
  ];
  const schedule = faultSchedule({ seed, durationMs, meanGapMs, exclude, quietStartMs: Math.min(20_000, durationMs / 10) });
  console.log(
    `soak: seed ${seed}, ${opts.duration} of faults (${schedule.length} scheduled, mean gap ${opts.faultEvery}, ${overlapping(schedule)} overlapping another), ` +
      `${relayCount} relays${testbed ? ' on the netns testbed' : ''}, ${rolloutCount} rollouts${natsNodes === 3 ? ', a 3-node NATS cluster' : ''}; output in ${out}`,
  );

  const run = onInterrupt();
  const stage = await openStage('laminar-soak-', join(out, 'logs'), { natsNodes, ...(testbed ? { natsHost: '0.0.0.0' } : {}) });
  const unexpected: { name: string; code: number | string; atMs: number; lastLogs: string[] }[] = [];
  let t0 = performance.now();
  const clock = (): number => Math.round(performance.now() - t0);
  const say = (line: string): void => console.log(`${(clock() / 1000).toFixed(1).padStart(8)} s  ${line}`);
  const published = new Map<number, string>();
  /** Trajectories the trainer took out of the buffer (trained on, stale, over capacity), from its own lines. */
  const removedByTrainer = new Set<string>();
  let newestPublished = -1;
  let job: SoakJob | null = null;
  let audit: BufferAudit | null = null;
  let passed = false;
  try {
    // Before any writer: the audit must read every record before the trainer trains on it and deletes it.
    const bufferAudit = (audit = await BufferAudit.open(stage.nc));
    const prompts = await PromptPool.open({ redis: stage.redis, epochs: 0 });
    await prompts.load(Array.from({ length: 4096 }, (_, i) => ({ id: `q${i}`, payload: { question: `synthetic prompt ${i}` }, n: 4 })));
    job = createSoakJob({
      stage,
      testbed,
      relays: relayCount,
      rollouts: rolloutCount,
      size: opts.size,
      tensors: TENSORS,
      timeScale,
      restartDelayMs: 1000,
      events: {
        unexpectedExit: (name, code, lastLogs) => {
          unexpected.push({ name, code, atMs: clock(), lastLogs });
          say(`UNEXPECTED EXIT of ${name} (${code}); restarting it`);
        },
        startFailed: (name, err) => {
          // The first line says what exited, the last what it said as it went.
          const lines = err.message.split('\n').filter((l) => l.trim() !== '');
          say(`${name} failed to start (${lines[0]}${lines.length > 1 ? ` ${lines.at(-1)!.slice(0, 300)}` : ''}); trying again`);
        },
      },
      nextTrainerVersion: () => newestPublished + 1,
      onTrainerLine: (line) => {
        try {
          const record = JSON.parse(line) as { published?: number; sha256?: string; removed?: string; ids?: string[] };
          if (record.published !== undefined && record.sha256) {
            published.set(record.published, record.sha256);
            newestPublished = Math.max(newestPublished, record.published);
          }
          if (record.removed !== undefined && record.ids) for (const id of record.ids) removedByTrainer.add(id);
        } catch {
          // not a JSON line
        }
      },
    });
    const liveJob = job;
    // Ctrl-C during the start: stopping the daemons ends the starts still retrying.
    const stopOnInterrupt = (): void => void Promise.all(liveJob.all().map((p) => p.stop()));
    run.signal.addEventListener('abort', stopOnInterrupt, { once: true });
    await liveJob.start();
    run.signal.removeEventListener('abort', stopOnInterrupt);
    if (run.signal.aborted) return;
    const injector = new FaultInjector(liveJob, stage, testbed, clock, say);
    t0 = performance.now();
    say(`job up: ${liveJob.all().length} daemons; faults start`);

    const samples: Sample[] = [];
    const jsm = await openJetStreamManager(stage.nc);
    const takeSample = async (): Promise<Sample> => {
      const rssBytes = Object.fromEntries(GROUPS.map((g) => [g, 0])) as Record<Group, number>;
      const fds = Object.fromEntries(GROUPS.map((g) => [g, 0])) as Record<Group, number>;
      const heapBytes = { relay: 0, rollout: 0, manager: 0, trainer: 0 };
      const processes: Sample['processes'] = {};
      const count = (group: Group, pid: number | undefined, name: string = group): void => {
        if (pid === undefined) return;
        const rss = residentBytes(pid) ?? 0;
        const open = openFds(pid) ?? 0;
        rssBytes[group] += rss;
        fds[group] += open;
        processes[name] = { pid, rssMiB: Math.round((rss / 2 ** 20) * 10) / 10, fds: open };
      };
      for (const proc of liveJob.all()) count(proc.kind, proc.pid, proc.name);
      if (stage.natsCluster) for (const node of stage.natsCluster.nodes) count('nats-server', node.pid, `nats-server ${node.name}`);
      else count('nats-server', stage.nats.pid);
      count('redis-server', stage.redisServer.pid);
      count('soak', process.pid);
      const heaps = await Promise.all(
        liveJob.all().map(async (proc) => {
          const port = proc.daemon?.ready.metricsPort ?? proc.daemon?.ready.httpPort;
          if (typeof port !== 'number' || proc.paused) return [proc.kind, 0] as const;
          const read = await scrape(port, liveJob.metricsHost(proc));
          return [proc.kind, read('laminar_nodejs_heap_size_used_bytes')] as const;
        }),
      );
      for (const [kind, bytes] of heaps) heapBytes[kind] += bytes;
      let consumers = 0;
      const consumersByStream: Record<string, number> = {};
      try {
        for await (const s of jsm.streams.list()) {
          consumers += s.state.consumer_count;
          consumersByStream[s.config.name] = s.state.consumer_count;
        }
      } catch {
        consumers = Number.NaN; // nats-server down at this moment
      }
      const sample: Sample = {
        atMs: clock(),
        completed: bufferAudit.completed,
        trainerVersion: newestPublished,
        faultsActive: injector.activeCount,
        rssBytes,
        fds,
        heapBytes,
        shmFiles: liveJob.relays.reduce((n, r) => n + filesIn(r.segmentDir() ?? join(stage.root, r.id)), 0),
        consumers,
        consumersByStream,
        processes,
      };
      samples.push(sample);
      appendFileSync(join(out, 'timeline.jsonl'), `${JSON.stringify(sample)}\n`);
      return sample;
    };
    writeFileSync(join(out, 'timeline.jsonl'), '');

    // ---- the faults ------------------------------------------------------------------------
    let next = 0;
    let nextSample = 0;
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- Ctrl-C aborts it during the awaits below; TS keeps the narrowing from the check after the start
    while (clock() < durationMs && !run.signal.aborted) {
      while (next < schedule.length && schedule[next]!.atMs <= clock()) await injector.apply(schedule[next++]!);
      if (clock() >= nextSample) {
        const s = await takeSample();
        // On a fixed beat from the start, not from the end of the last sample: a sample that
        // took seconds (scrapes of every daemon on a loaded machine) or a fault whose start
        // held the loop no longer pushes every later one back (a 45-s run at load 21 sampled 6
        // times instead of 9). A beat missed altogether is taken at once, and the beat goes on
        // from there.
        nextSample = Math.max(nextSample + sampleMs, s.atMs);
        say(
          `${s.completed} trajectories completed, trainer at v${s.trainerVersion}, ${injector.records.filter((r) => !r.note).length} faults applied ` +
            `(${s.faultsActive} under way), daemons ${Math.round(daemons(s.rssBytes) / 2 ** 20)} MiB RSS, ${daemons(s.fds)} fds`,
        );
      }
      const wake = Math.min(schedule[next]?.atMs ?? Infinity, nextSample, durationMs);
      await delay(Math.max(10, wake - clock()), run.signal).catch(() => undefined);
    }
    await injector.endAll();
    writeFileSync(join(out, 'faults.jsonl'), injector.records.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const applied = injector.records.filter((r) => !r.note?.startsWith('skipped') && !r.note?.startsWith('not applied'));
    say(`faults over: ${applied.length} applied, ${injector.records.length - applied.length} skipped; settling`);

    // ---- settle: every daemon up, every live relay on the newest version -------------------
    // Bounded: a daemon that cannot come back (the first 2-hour run's trainer) must not hang the books.
    const allUp = Promise.all(liveJob.all().map((p) => p.start()));
    // The bound's timer is cancelled once everything is up: left pending, it kept the finished
    // run's process alive for the rest of --settle (two minutes by default).
    const upOrBound = new AbortController();
    await Promise.race([allUp, delay(settleMs, AbortSignal.any([run.signal, upOrBound.signal])).catch(() => undefined)]);
    upOrBound.abort();
    const settled = await settle(liveJob, settleMs, () => newestPublished, run.signal);
    say(settled ? 'settled: every relay holds the newest version' : `not settled within ${opts.settle}`);
    await takeSample();

    // ---- the end: stop the producers, then read the books ----------------------------------
    say('stopping the trainer');
    await liveJob.trainer.stop();
    // The trainer's last version reaches every relay before the books are read. (The stopped
    // trainer is not waited for: it was, and every run spent --settle here.)
    if (!(await settle(liveJob, settleMs, () => newestPublished, run.signal, [liveJob.trainer])))
      say(`not settled after the trainer stopped, within ${opts.settle}`);
    say('stopping the rollouts');
    await Promise.all(liveJob.rollouts.map((r) => r.stop()));
    await delay(500);
    say('reading the books: trajectories');
    const trajectories = await trajectoryBooks(stage.nc, { ...stage.ledger, removed: removedByTrainer }, bufferAudit);
    say('reading the books: weights');
    const weights = await weightBooks(liveJob.relays, published, newestPublished >= 0 ? newestPublished : null, { size: sizeBytes, tensors: TENSORS });
    say('reading the books: prompts');
    const promptsBooks = await promptBooks(stage.redis);

    // ---- resources: the trend over the last half of the run --------------------------------
    const lastHalf = samples.filter((s) => s.atMs >= durationMs / 2 && s.atMs <= durationMs + sampleMs);
    // A sample taken while nats-server was down has no consumer count (NaN): it is left out, not read as 0.
    const series = (value: (s: Sample) => number): Trend =>
      trend(lastHalf.map((s) => ({ atMs: s.atMs, value: value(s) })).filter((p) => Number.isFinite(p.value)));
    // The job's processes only: the soak itself keeps every trajectory id it saw (its books) and grows by design.
    const rss = series((s) => daemons(s.rssBytes) / 2 ** 20);
    const fd = series((s) => daemons(s.fds));
    const byGroup = Object.fromEntries(GROUPS.map((g) => [g, { rss: series((s) => s.rssBytes[g] / 2 ** 20), fds: series((s) => s.fds[g]) }]));
    const shm = series((s) => s.shmFiles);
    const judgeable = lastHalf.length >= MIN_TREND_SAMPLES && durationMs / 2 >= MIN_TREND_WINDOW_MS;
    const consumers = series((s) => s.consumers);

    const summary = {
      bench: 'soak',
      seed,
      duration_s: Math.round(durationMs / 1000),
      faults: applied.length,
      faults_by_kind: countBy(applied.map((r) => r.kind)),
      faults_overlapping: overlapCount(applied),
      unexpected_exits: unexpected.length,
      trajectories: trajectories.completed,
      lost: trajectories.lost.length,
      duplicated: trajectories.duplicated.length,
      unaudited: trajectories.unread,
      audit_redelivered: trajectories.auditRedelivered,
      corrupt: weights.corrupt.length,
      relays_lagging: weights.lagging.length,
      versions_checked: weights.versionsChecked,
      versions_unrecorded: weights.unrecorded,
      prompts_misplaced: promptsBooks.misplaced,
      claims_unaccounted: promptsBooks.unaccountedClaims,
      rss_slope_MB_per_h: round(rss.perHour),
      rss_slope_se: round(rss.standardError),
      fd_slope_per_h: round(fd.perHour),
      fd_slope_se: round(fd.standardError),
      shm_segments_slope_per_h: round(shm.perHour),
      consumers_slope_per_h: round(consumers.perHour),
      // A trend needs a long enough window: a short run's last half is still warming up (JIT, caches, the stream's index).
      resources_flat: judgeable ? rss.flat && fd.flat && shm.flat && consumers.flat : null,
      samples: samples.length,
    };
    writeFileSync(
      join(out, 'summary.json'),
      `${JSON.stringify({ ...summary, trajectories_books: trajectories, weights, prompts: promptsBooks, by_group: byGroup, unexpected }, null, 2)}\n`,
    );

    console.log('\nsoak summary');
    const row = (label: string, value: string): void => console.log(`  ${label.padEnd(28)} ${value}`);
    row('seed', `${seed} (run again with --seed ${seed} --duration ${opts.duration} --fault-every ${opts.faultEvery})`);
    row(
      'faults',
      `${applied.length} applied (${Object.entries(summary.faults_by_kind)
        .map(([k, n]) => `${n} ${k}`)
        .join(', ')}), ${summary.faults_overlapping} overlapping another`,
    );
    row('unexpected exits', unexpected.length === 0 ? '0' : unexpected.map((u) => `${u.name} (${u.code}) at ${(u.atMs / 1000).toFixed(0)} s`).join(', '));
    row(
      'trajectories',
      `${trajectories.started} started, ${trajectories.completed} written to the buffer, ${trajectories.inPool} in the partial pool; ${trajectories.lost.length} lost, ${trajectories.duplicated.length} duplicated` +
        ` (audit: ${trajectories.unread} messages deleted before it read them, ${trajectories.auditRestarts} consumer restarts, ${trajectories.auditRedelivered} redelivered${trajectories.auditCaughtUp ? '' : ', NOT caught up'})`,
    );
    row(
      'weights',
      `v${weights.newest ?? '-'} newest; ${weights.versionsChecked} versions on ${weights.relaysChecked} relays checked against the trainer's SHA-256 (${weights.unrecorded} against a recomputation): ${weights.corrupt.length} corrupt, ${weights.lagging.length} relays lagging`,
    );
    row(
      'prompts',
      `${promptsBooks.total} in the pool: ${promptsBooks.pending} pending, ${promptsBooks.leased} leased, ${promptsBooks.doneThisEpoch} done; ${promptsBooks.misplaced} misplaced, ${promptsBooks.unaccountedClaims} claims unaccounted (of ${promptsBooks.claims})`,
    );
    for (const g of GROUPS) {
      const t = byGroup[g]!;
      row(`${g} (last half)`, `RSS ${t.rss.mean.toFixed(0)} MiB ${signed(t.rss.perHour)} MiB/h, fds ${t.fds.mean.toFixed(0)} ${signed(t.fds.perHour)}/h`);
    }
    const verdict = summary.resources_flat === null ? 'run too short to judge a trend' : summary.resources_flat ? 'flat' : 'NOT flat';
    row(
      'all daemons (last half)',
      `RSS ${signed(rss.perHour)} ± ${round(rss.standardError)} MiB/h, fds ${signed(fd.perHour)} ± ${round(fd.standardError)}/h: ${verdict}`,
    );
    row('shm segments, consumers', `${signed(shm.perHour)}/h, ${signed(consumers.perHour)}/h`);
    console.log(JSON.stringify(summary));

    await plot(out);
    passed =
      settled &&
      summary.lost === 0 &&
      summary.duplicated === 0 &&
      summary.corrupt === 0 &&
      summary.relays_lagging === 0 &&
      summary.prompts_misplaced === 0 &&
      summary.claims_unaccounted === 0 &&
      summary.resources_flat !== false &&
      summary.unexpected_exits === 0 &&
      trajectories.auditCaughtUp &&
      trajectories.completed > 0;
  } finally {
    await Promise.all((job?.all() ?? []).map((p) => p.stop()));
    await audit?.stop();
    await stage.shutdown();
    testbed?.destroy();
    process.exitCode = run.interrupted ? run.exitCode : passed ? 0 : 1;
  }
}

/** Waits until every relay is up and holds the newest published version (by the leader's status). */
/**
 * Waits until every process of the job is up (but those stopped on purpose) and every live relay
 * holds the newest version; false after `timeoutMs`.
 */
async function settle(
  job: SoakJob,
  timeoutMs: number,
  newest: () => number,
  signal: AbortSignal,
  stopped: ReadonlyArray<ReturnType<SoakJob['all']>[number]> = [],
): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline && !signal.aborted) {
    const target = newest();
    if (target >= 0 && job.all().every((p) => stopped.includes(p) || (p.up && !p.paused))) {
      for (const port of job.managerPorts()) {
        const status = await managerStatus(port);
        if (!status?.leader) continue;
        const relays = status.chain.filter((r) => r.health === 'alive');
        if (relays.length === job.relays.length && relays.every((r) => r.holds.some((h) => h.model === SOAK_MODEL && h.version >= target))) return true;
      }
    }
    await delay(500, signal).catch(() => undefined);
  }
  return false;
}

const execFileAsync = promisify(execFile);

async function plot(out: string): Promise<void> {
  try {
    await execFileAsync(projectPython(), [join(REPO_ROOT, 'python', 'tools', 'plot_soak.py'), out]);
    console.log(`  plot                         ${join(out, 'soak.png')}`);
  } catch (err) {
    console.log(`  plot                         not written: ${(err as Error).message.split('\n')[0]}`);
  }
}

function countBy(keys: readonly string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const k of keys) counts[k] = (counts[k] ?? 0) + 1;
  return counts;
}

const sum = (values: Record<string, number>): number => Object.values(values).reduce((a, b) => a + b, 0);
const daemons = (values: Record<Group, number>): number => sum(values) - values.soak;
const round = (x: number): number => (Number.isFinite(x) ? Math.round(x * 100) / 100 : x);
const signed = (x: number): string => `${x >= 0 ? '+' : ''}${round(x)}`;

main().catch((err: unknown) => {
  console.error(`soak failed: ${describeFailure(err)}`);
  process.exit(1);
});
