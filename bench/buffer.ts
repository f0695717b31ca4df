/**
 * `npm run bench -- buffer [--batch 8192] [--tokens 16384] [--inflight 1000] [--partial-s 10] [--train-s 4]
 *                          [--deletion-delay-ms N] [--r3-batch 1024] [--r3-only]`
 *
 * Experience buffer against raw JetStream, in the same run, on a real nats-server (file storage):
 *   write  : ExperienceWriter.write() of `batch` trajectories vs raw js.publish of the same bytes
 *   sample : the assembly of each batch after a trainer's first (in the memory the trainer
 *            released: the steady state of training; median over RELEASED_BATCHES - 1 batches;
 *            each trainer step lasts --train-s from the release, or until the next batch is
 *            ready if that takes longer) vs a raw pull-consumer fetch of the same bytes (median
 *            of RAW_FETCHES); the cold sample() of a process's first batch (memory touched for
 *            the first time) beside it
 *   latency: sample() with prefetch on (the next batch assembled while "training") and off
 *   memory : peak RSS of the sampler process (a child process, like a trainer) / batch bytes,
 *            with a trainer that holds each batch through training (prefetch on) and with one
 *            that releases it after its device copy (prefetch 'after-release', 5 batches)
 *   reuse  : the background assembly of a batch in fresh memory and in a released batch's
 *            (time, CPU seconds, page faults)
 *   partial: CPU of streaming `inflight` trajectories at 50 tokens/s to the partial pool
 *   cost   : CPU seconds and page faults of the cold sample and of the raw fetch (and of
 *            nats-server meanwhile), to tell where their time went on a shared machine
 *   R3     : `r3-batch` trajectories written and then sampled cold (one batch, child process)
 *            on one server (R1) and on a 3-node cluster on this machine (R3, startNatsCluster),
 *            each on fresh servers: write_r3_over_r1 and sample_r3_over_r1 are throughput ratios;
 *            then the median latency of ExperienceWriter.has() on written and unknown ids
 *            (a rollout asks it before every sample it starts).
 *            --r3-only runs this part alone.
 * Dirty pages are written out (sync) before every measured read, so that the kernel's writeback
 * of the writes just made does not fall into one measurement and not another.
 * Prints a table, then one JSON line (last line of stdout).
 */
import { fork, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { startNatsCluster, startNatsServer } from '../src/services/index.js';
import { ExperienceSampler, ExperienceWriter, PartialPool, type Batch, type TrajectoryInput } from '../src/data/index.js';
import { mapLimit } from '../src/common/concurrency.js';
import { formatBytes } from '../src/common/units.js';
import { median } from './support.js';

interface Args {
  batch: number;
  tokens: number;
  inflight: number;
  partialSeconds: number;
  window: number;
  trainSeconds: number;
  /** The samplers' maxDeletionDelayMs (0: delete at once, beside a running assembly). */
  deletionDelayMs: number | undefined;
  /** Trajectories written and sampled on R1 and on R3 (0: that part is skipped). */
  r3Batch: number;
  r3Only: boolean;
}

function parseArgs(argv: string[]): Args {
  const get = <D extends number | undefined>(name: string, def: D, zeroAllowed = false): number | D => {
    const i = argv.indexOf(`--${name}`);
    if (i < 0) return def;
    const v = Number(argv[i + 1]);
    if (!Number.isFinite(v) || v < 0 || (v === 0 && !zeroAllowed)) throw new Error(`--${name} needs a ${zeroAllowed ? 'non-negative' : 'positive'} number`);
    return v;
  };
  return {
    batch: get('batch', 8192),
    tokens: get('tokens', 16384),
    inflight: get('inflight', 1000),
    partialSeconds: get('partial-s', 10),
    window: get('window', 64),
    trainSeconds: get('train-s', 4),
    deletionDelayMs: get('deletion-delay-ms', undefined, true),
    r3Batch: get('r3-batch', 1024, true),
    r3Only: argv.includes('--r3-only'),
  };
}

const PAPER_OVERHEAD_S = 1.9;

function makeTrajectory(i: number, tokens: number, version: number): TrajectoryInput {
  const t = new Int32Array(tokens);
  const l = new Float32Array(tokens);
  for (let k = 0; k < tokens; k += 97) {
    t[k] = (i + k) % 150_000;
    l[k] = -k / tokens;
  }
  return {
    id: `traj-${i}`,
    promptId: `p${i >> 3}`,
    groupId: `g${i >> 3}`,
    sampleIndex: i & 7,
    groupSize: 8,
    weightVersion: version,
    reward: i % 2,
    tokens: t,
    logprobs: l,
    promptLength: 512,
    responseLength: tokens - 512,
  };
}

const seconds = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1e9;

/** CPU seconds (user + system, all threads) and minor page faults of a process so far (Linux). */
interface Usage {
  cpuS: number;
  faults: number;
}
function usage(pid: number | 'self' = 'self'): Usage | undefined {
  try {
    // Fields after the command name: state(3) ... minflt(10) ... utime(14) stime(15), in ticks.
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return { cpuS: (Number(f[11]) + Number(f[12])) / 100, faults: Number(f[7]) };
  } catch {
    return undefined;
  }
}
const since = (a: Usage | undefined, b: Usage | undefined): Usage | undefined =>
  a && b ? { cpuS: +(b.cpuS - a.cpuS).toFixed(2), faults: b.faults - a.faults } : undefined;

/** What a measured step cost: its own process, and the nats-server beside it. */
interface Cost {
  client?: Usage;
  server?: Usage;
}

/** Starts counting a step's cost; the returned function ends it. */
function costMeter(serverPid: number | undefined): () => Cost {
  const c0 = usage();
  const s0 = serverPid === undefined ? undefined : usage(serverPid);
  return () => ({ client: since(c0, usage()), server: serverPid === undefined ? undefined : since(s0, usage(serverPid)) });
}

/** Raw JetStream publish of `count` messages of `bytes`, `window` acks outstanding. */
async function rawPublish(nc: NatsConnection, count: number, bytes: number, window: number): Promise<number> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'RAW', subjects: ['raw.>'], storage: 'file', allow_direct: true });
  const js = jetstream(nc);
  const body = new Uint8Array(bytes).fill(7);
  const t0 = process.hrtime.bigint();
  await mapLimit(
    Array.from({ length: count }, (_, i) => i),
    window,
    (i) => js.publish(`raw.${i}`, body),
  );
  return seconds(t0);
}

/**
 * Writes the kernel's dirty pages out before a measured read: the writes just made (nats-server's
 * file storage) are otherwise written back at some moment of a later step, whose time they add
 * to, on one measurement and not the other.
 */
function flushDirtyPages(): void {
  spawnSync('sync', { stdio: 'ignore' });
}

/** Raw pull-consumer fetch of everything in RAW, through a new consumer (`name`). */
async function rawFetch(nc: NatsConnection, count: number, serverPid: number | undefined, name: string): Promise<{ s: number; cost: Cost }> {
  flushDirtyPages();
  const jsm = await jetstreamManager(nc);
  await jsm.consumers.add('RAW', { durable_name: name, ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All });
  const consumer = await jetstream(nc).consumers.get('RAW', name);
  const meter = costMeter(serverPid);
  const t0 = process.hrtime.bigint();
  let got = 0;
  let bytes = 0;
  while (got < count) {
    const msgs = await consumer.fetch({ max_messages: Math.min(512, count - got), expires: 5000 });
    for await (const m of msgs) {
      got++;
      bytes += m.data.byteLength;
    }
  }
  const s = seconds(t0);
  const cost = meter();
  if (bytes === 0) throw new Error('raw fetch got nothing');
  return { s, cost };
}

async function ourWrite(nc: NatsConnection, buffer: string, from: number, count: number, tokens: number, window: number, replicas = 1): Promise<number> {
  const w = await ExperienceWriter.open({ nc, buffer, replicas });
  // Trajectories are built before the clock starts: we measure the writer, not the generator.
  const ts = Array.from({ length: Math.min(count, window * 4) }, (_, i) => makeTrajectory(from + i, tokens, 1));
  const t0 = process.hrtime.bigint();
  await mapLimit(
    Array.from({ length: count }, (_, i) => i),
    window,
    (i) => {
      const t = ts[i % ts.length]!;
      const n = from + i;
      return w.write({ ...t, id: `traj-${n}`, groupId: `g${n >> 3}`, sampleIndex: n & 7 });
    },
  );
  return seconds(t0);
}

/** Streams `inflight` trajectories at 50 tokens/s for `secs` seconds; returns % of one core. */
async function partialCpu(nc: NatsConnection, inflight: number, secs: number): Promise<{ pct: number; appends: number }> {
  const tick = 100; // ms: 5 tokens per trajectory per tick = 50 tokens/s
  const run = async (sink: ((i: number, t: number[], l: number[]) => void) | undefined): Promise<number> => {
    const c0 = process.cpuUsage();
    const t0 = Date.now();
    const tokens = [1, 2, 3, 4, 5];
    const logprobs = [-0.1, -0.2, -0.3, -0.4, -0.5];
    let junk = 0;
    while (Date.now() - t0 < secs * 1000) {
      const started = Date.now();
      for (let i = 0; i < inflight; i++) {
        if (sink) sink(i, tokens, logprobs);
        else junk += tokens.length;
      }
      await new Promise((r) => setTimeout(r, Math.max(0, tick - (Date.now() - started))));
    }
    const c = process.cpuUsage(c0);
    if (junk < 0) throw new Error('unreachable');
    return (c.user + c.system) / 1e6 / ((Date.now() - t0) / 1000);
  };
  const baseline = await run(undefined);
  const pool = await PartialPool.open({ nc, pool: 'bench' });
  const handles = await mapLimit(
    Array.from({ length: inflight }, (_, i) => i),
    64,
    (i) => pool.start('bench-rollout', { trajectoryId: `pt-${i}`, promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, weightVersion: 1 }),
  );
  const withPool = await run((i, t, l) => handles[i]!.append(t, l));
  await pool.close();
  const jsm = await jetstreamManager(nc);
  const appends = (await jsm.streams.info(pool.names.stream)).state.messages - inflight;
  return { pct: Math.max(0, withPool - baseline) * 100, appends };
}

/** Raw fetches of the same bytes (each through a new consumer); the median is the reference. */
const RAW_FETCHES = 3;

const CHILD_MODES = ['cold', 'prefetch', 'released'] as const;
type ChildMode = (typeof CHILD_MODES)[number];
/** Batches the releasing trainer goes through (its peak RSS is over all of them). */
const RELEASED_BATCHES = 5;

interface ChildResult {
  /** The timed sample() (released: the slowest hand-over of a prefetched batch). */
  sampleS: number;
  peakRssBytes: number;
  batchBytes: number;
  cost: Cost;
  /** prefetch, released: the last batch's assembly in the background, the trainer idle. */
  assembleS?: number;
  /** released: every batch's assembly after the first (each in the memory of the one before). */
  assembleEachS?: number[];
  assembleCost?: Cost;
  /** Of the bytes the trainer read, so that the reads are not optimised away. */
  checksum?: number;
}

/** A training step that outlasts the assembly: waits until the next batch is ready. */
async function untilPrefetched(s: ExperienceSampler, serverPid: number | undefined): Promise<{ seconds: number; cost: Cost }> {
  const meter = costMeter(serverPid);
  const t0 = process.hrtime.bigint();
  const t = Date.now();
  while (s.stats().readyBatches === 0) {
    if (Date.now() - t > 300_000) throw new Error('no batch prefetched within 300 s');
    await new Promise((r) => setTimeout(r, 20));
  }
  return { seconds: seconds(t0), cost: meter() };
}

/**
 * Stands in for the trainer's copy of the batch to the GPU, which this machine does not have:
 * reads every payload byte once (a checksum). A device copy keeps no second host copy either,
 * so the RSS is what a trainer's would be; the copy's own time is not simulated.
 */
function deviceCopy(b: Batch): number {
  let sum = 0;
  for (const it of b.items) {
    for (const a of [it.tokens, new Int32Array(it.logprobs.buffer, it.logprobs.byteOffset, it.logprobs.length)]) {
      for (let k = 0; k < a.length; k++) sum = (sum + a[k]!) | 0;
    }
  }
  return sum;
}

/**
 * prefetch 'after-release': each batch is copied to the "device" and released, which starts
 * the next one in its memory; "training" lasts `trainSeconds` from the release (longer if the
 * next batch is not ready by then), then sample() hands the next batch over (timed). A real
 * step on a 1 GiB batch (134 M tokens) takes far longer; what matters here is that the sampler
 * has time after the assembly for its background work (deleting the batch before), as it has
 * in training.
 */
async function releasingTrainer(s: ExperienceSampler, serverPid: number | undefined, trainSeconds: number): Promise<Omit<ChildResult, 'peakRssBytes'>> {
  let b = await s.sample();
  let checksum = 0;
  let slowest: { sampleS: number; cost: Cost } | undefined;
  let assembled: { seconds: number; cost: Cost } | undefined;
  const assembleEachS: number[] = [];
  for (let i = 1; i < RELEASED_BATCHES; i++) {
    checksum ^= deviceCopy(b);
    b.release();
    const trainUntil = Date.now() + trainSeconds * 1000;
    assembled = await untilPrefetched(s, serverPid);
    assembleEachS.push(assembled.seconds);
    await new Promise((r) => setTimeout(r, Math.max(0, trainUntil - Date.now())));
    const meter = costMeter(serverPid);
    const t0 = process.hrtime.bigint();
    b = await s.sample();
    const sampleS = seconds(t0);
    const cost = meter();
    if (!b.prefetched) throw new Error('expected a prefetched batch');
    if (!slowest || sampleS > slowest.sampleS) slowest = { sampleS, cost };
  }
  checksum ^= deviceCopy(b);
  b.release();
  return { ...slowest!, batchBytes: b.bytes, assembleS: assembled!.seconds, assembleEachS, assembleCost: assembled!.cost, checksum };
}

/**
 * The trainer side, in its own process so that its RSS is the sampler's. 'cold': one batch
 * assembled inside sample(). 'prefetch': the first call waits; "training" on that batch lets
 * the next one assemble (in fresh memory: nothing is released), and the timed call hands it
 * over. 'released': see releasingTrainer().
 */
async function samplerChild(c: ChildSettings): Promise<ChildResult> {
  const { mode, serverPid, batch } = c;
  const nc = await connect({ servers: c.url });
  const s = await ExperienceSampler.open({
    nc,
    buffer: c.buffer,
    batchSize: batch,
    prefetch: { cold: false, prefetch: true, released: 'after-release' as const }[mode],
    maxDeletionDelayMs: c.deletionDelayMs,
  });
  let result: ChildResult;
  if (mode === 'released') {
    result = { ...(await releasingTrainer(s, serverPid, c.trainSeconds)), peakRssBytes: process.resourceUsage().maxRSS * 1024 };
  } else {
    let assembled: { seconds: number; cost: Cost } | undefined;
    if (mode === 'prefetch') {
      let training = await s.sample();
      assembled = await untilPrefetched(s, serverPid);
      if (training.items.length !== batch) throw new Error('short batch');
      training = undefined as never; // the training step is done with it
    }
    const meter = costMeter(serverPid);
    const t0 = process.hrtime.bigint();
    const b = await s.sample();
    const sampleS = seconds(t0);
    const cost = meter();
    if (b.prefetched !== (mode === 'prefetch')) throw new Error(`expected prefetched=${mode === 'prefetch'}`);
    result = {
      sampleS,
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
      batchBytes: b.bytes,
      cost,
      assembleS: assembled?.seconds,
      assembleCost: assembled?.cost,
    };
  }
  await s.close();
  await nc.close();
  return result;
}

/** What a sampler child is told (one JSON argument). */
interface ChildSettings {
  url: string;
  buffer: string;
  batch: number;
  mode: ChildMode;
  serverPid: number | undefined;
  trainSeconds: number;
  deletionDelayMs: number | undefined;
}

function runChild(settings: ChildSettings): Promise<ChildResult> {
  flushDirtyPages();
  return new Promise((resolve, reject) => {
    const child = fork(fileURLToPath(import.meta.url), ['--sampler-child', JSON.stringify(settings)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.once('message', (m) => resolve(m as ChildResult));
    child.once('exit', (code) => (code === 0 ? undefined : reject(new Error(`sampler child exited with ${code}`))));
  });
}

/** One side of the R3 comparison: the writes' and the cold sample's seconds, and has()'s latency. */
interface ReplicaRun {
  writeS: number;
  sampleS: number;
  /** Median ExperienceWriter.has() of a written trajectory (one read: its record), microseconds. */
  hasWrittenUs: number;
  /** Median has() of one never written (two reads: no record, no completion mark), microseconds. */
  hasMissingUs: number;
}

/** has() calls timed per kind, one after another (a rollout asks it once per sample it starts). */
const HAS_CALLS = 200;

/** Median latency of has() on written and on unknown trajectory ids, in microseconds. */
async function hasLatency(nc: NatsConnection, buffer: string, written: number): Promise<{ hasWrittenUs: number; hasMissingUs: number }> {
  const w = await ExperienceWriter.open({ nc, buffer });
  const time = async (id: (i: number) => string, expected: boolean): Promise<number> => {
    const us: number[] = [];
    for (let i = 0; i < HAS_CALLS; i++) {
      const t0 = process.hrtime.bigint();
      const found = await w.has(id(i));
      us.push(Number(process.hrtime.bigint() - t0) / 1000);
      if (found !== expected) throw new Error(`has(${id(i)}) answered ${found}`);
    }
    return Math.round(median(us));
  };
  return { hasWrittenUs: await time((i) => `traj-${i % written}`, true), hasMissingUs: await time((i) => `never-${i}`, false) };
}

/**
 * `count` trajectories written, then sampled cold as one batch by a child process, on servers
 * started for it (`urls`; the child reads through the first). The same steps for R1 and R3.
 */
async function replicaRun(a: Args, count: number, urls: string[], replicas: number, serverPid: number | undefined): Promise<ReplicaRun> {
  const nc = await connect({ servers: urls });
  const writeS = await ourWrite(nc, 'replicas', 0, count, a.tokens, a.window, replicas);
  const has = await hasLatency(nc, 'replicas', count);
  await nc.close();
  const sampled = await runChild({
    url: urls[0]!,
    buffer: 'replicas',
    batch: count,
    mode: 'cold',
    serverPid,
    trainSeconds: a.trainSeconds,
    deletionDelayMs: a.deletionDelayMs,
  });
  return { writeS, sampleS: sampled.sampleS, ...has };
}

/** R1 on one nats-server against R3 on a 3-node cluster on this machine, each on fresh servers. */
async function replicationCost(a: Args, log: (s: string) => void): Promise<{ r1: ReplicaRun; r3: ReplicaRun }> {
  log(`R1: ${a.r3Batch} trajectories on one nats-server`);
  const single = await startNatsServer({ jetstream: true });
  let r1: ReplicaRun;
  try {
    r1 = await replicaRun(a, a.r3Batch, [single.url], 1, single.pid);
  } finally {
    await single.stop();
  }
  log(`R3: the same on a 3-node cluster`);
  const cluster = await startNatsCluster();
  try {
    return { r1, r3: await replicaRun(a, a.r3Batch, [...cluster.urls], 3, cluster.nodes[0]!.pid) };
  } finally {
    await cluster.stop();
  }
}

/** The R3 comparison's JSON fields and table rows. */
function replicationReport(a: Args, r: { r1: ReplicaRun; r3: ReplicaRun }): { fields: Record<string, number>; rows: Array<[string, string, string]> } {
  const bytes = a.r3Batch * a.tokens * 8;
  const gbs = (s: number): number => +(bytes / s / 1e9).toFixed(3);
  const fields = {
    r3_batch: a.r3Batch,
    r1_write_gbps: gbs(r.r1.writeS),
    r3_write_gbps: gbs(r.r3.writeS),
    write_r3_over_r1: +(r.r1.writeS / r.r3.writeS).toFixed(3),
    r1_sample_gbps: gbs(r.r1.sampleS),
    r3_sample_gbps: gbs(r.r3.sampleS),
    sample_r3_over_r1: +(r.r1.sampleS / r.r3.sampleS).toFixed(3),
    r1_has_written_us: r.r1.hasWrittenUs,
    r1_has_missing_us: r.r1.hasMissingUs,
    r3_has_written_us: r.r3.hasWrittenUs,
    r3_has_missing_us: r.r3.hasMissingUs,
  };
  const rows: Array<[string, string, string]> = [
    ['write, R3 cluster', `${fields.r3_write_gbps} GB/s`, `R1 one server ${fields.r1_write_gbps} GB/s -> ratio ${fields.write_r3_over_r1} (goal >= 0.5)`],
    [
      'sample (cold), R3 cluster',
      `${fields.r3_sample_gbps} GB/s`,
      `R1 one server ${fields.r1_sample_gbps} GB/s -> ratio ${fields.sample_r3_over_r1} (goal >= 0.5)`,
    ],
    ['has(), written, R3 cluster', `${fields.r3_has_written_us} us`, `R1 one server ${fields.r1_has_written_us} us (median of ${HAS_CALLS}, one read)`],
    ['has(), never written, R3 cluster', `${fields.r3_has_missing_us} us`, `R1 one server ${fields.r1_has_missing_us} us (median of ${HAS_CALLS}, two reads)`],
  ];
  return { fields, rows };
}

function printReport(title: string, rows: Array<[string, string, string]>, result: object): void {
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  process.stdout.write(`${title}\n`);
  for (const [k, v, note] of rows) process.stdout.write(`  ${k.padEnd(w0)}  ${v.padEnd(w1)}  ${note}\n`);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

export async function run(argv: string[]): Promise<void> {
  const a = parseArgs(argv);
  const itemBytes = a.tokens * 8;
  const batchBytes = a.batch * itemBytes;
  const log = (s: string): boolean => process.stderr.write(`buffer bench: ${s}\n`);
  const r3Title = `R3 against R1: ${a.r3Batch} x ${a.tokens} tokens (${formatBytes(a.r3Batch * itemBytes)}), 3 nodes on this machine`;
  if (a.r3Only) {
    if (a.r3Batch === 0) throw new Error('--r3-only needs --r3-batch > 0');
    const r3 = replicationReport(a, await replicationCost(a, log));
    printReport(r3Title, r3.rows, { bench: 'buffer', tokens: a.tokens, ...r3.fields });
    return;
  }
  const replication = a.r3Batch > 0 ? replicationReport(a, await replicationCost(a, log)) : { fields: {}, rows: [] };
  const nats = await startNatsServer({ jetstream: true });
  try {
    const nc = await connect({ servers: nats.url });
    log(`partial pool: ${a.inflight} trajectories x 50 tokens/s for ${a.partialSeconds} s`);
    const partial = await partialCpu(nc, a.inflight, a.partialSeconds);
    log(`raw publish of ${a.batch} x ${formatBytes(itemBytes)}`);
    const rawPubS = await rawPublish(nc, a.batch, itemBytes, a.window);
    log(`raw fetch (${RAW_FETCHES} times)`);
    const rawFetches: Array<{ s: number; cost: Cost }> = [];
    for (let i = 0; i < RAW_FETCHES; i++) rawFetches.push(await rawFetch(nc, a.batch, nats.pid, `bench${i}`));
    // The median fetch is the reference; its costs are the ones shown.
    const { s: rawFetchS, cost: rawCost } = [...rawFetches].sort((x, y) => x.s - y.s)[RAW_FETCHES >> 1]!;
    await (await jetstreamManager(nc)).streams.delete('RAW');
    log('experience writer (3 batches: cold sample, then two with prefetch)');
    const writeS = await ourWrite(nc, 'bench', 0, a.batch, a.tokens, a.window);
    await ourWrite(nc, 'bench', a.batch, 2 * a.batch, a.tokens, a.window);
    const child = { url: nats.url, buffer: 'bench', batch: a.batch, serverPid: nats.pid, trainSeconds: a.trainSeconds, deletionDelayMs: a.deletionDelayMs };
    log('sampler, cold (child process)');
    const cold = await runChild({ ...child, mode: 'cold' });
    log('sampler, prefetch (child process)');
    const warm = await runChild({ ...child, mode: 'prefetch' });
    // Written only now, so that the prefetch child finds no batch to prefetch after its last.
    log(`experience writer (${RELEASED_BATCHES} more batches for the releasing trainer)`);
    await ourWrite(nc, 'bench', 3 * a.batch, RELEASED_BATCHES * a.batch, a.tokens, a.window);
    await nc.close();
    log("sampler, prefetch 'after-release', the trainer releasing each batch (child process)");
    const released = await runChild({ ...child, mode: 'released' });

    const gbs = (s: number): number => batchBytes / s / 1e9;
    // Sample throughput once training is under way: every batch after a trainer's first is
    // assembled in the memory the trainer released. The median over those batches is the
    // headline; the cold first batch of a process (its memory touched for the first time) is
    // shown beside it.
    const steady = released.assembleEachS ?? [];
    if (steady.length === 0) throw new Error('the releasing trainer assembled no batch after its first');
    const steadyS = median(steady);
    const rawRange = rawFetches.map((f) => f.s);
    const result = {
      bench: 'buffer',
      batch: a.batch,
      tokens: a.tokens,
      batch_bytes: batchBytes,
      raw_publish_gbps: +gbs(rawPubS).toFixed(3),
      write_gbps: +gbs(writeS).toFixed(3),
      write_over_raw: +(rawPubS / writeS).toFixed(3),
      raw_fetch_gbps: +gbs(rawFetchS).toFixed(3),
      raw_fetch_gbps_range: [+gbs(Math.max(...rawRange)).toFixed(3), +gbs(Math.min(...rawRange)).toFixed(3)],
      sample_gbps: +gbs(steadyS).toFixed(3),
      sample_over_raw: +(rawFetchS / steadyS).toFixed(3),
      sample_over_raw_range: [+(rawFetchS / Math.max(...steady)).toFixed(3), +(rawFetchS / Math.min(...steady)).toFixed(3)],
      steady_batches: steady.length,
      train_step_s: a.trainSeconds,
      max_deletion_delay_ms: a.deletionDelayMs ?? null,
      sample_cold_gbps: +gbs(cold.sampleS).toFixed(3),
      sample_over_raw_cold: +(rawFetchS / cold.sampleS).toFixed(3),
      sample_ms_prefetch: +(warm.sampleS * 1000).toFixed(2),
      sample_ms_cold: +(cold.sampleS * 1000).toFixed(1),
      sampler_peak_rss_bytes: warm.peakRssBytes,
      sampler_cold_peak_rss_bytes: cold.peakRssBytes,
      sampler_rss_over_batch: +(warm.peakRssBytes / batchBytes).toFixed(3),
      partial_cpu_pct: +partial.pct.toFixed(2),
      partial_appends: partial.appends,
      critical_path_s: +warm.sampleS.toFixed(4),
      paper_critical_path_s: PAPER_OVERHEAD_S,
      // Where the time of the cold sample and of the raw fetch went (Linux /proc): CPU seconds of
      // the measuring process (all its threads) and of nats-server, and minor page faults of the
      // measuring process (first touches of fresh memory).
      raw_fetch_cpu_s: rawCost.client?.cpuS,
      raw_fetch_page_faults: rawCost.client?.faults,
      raw_fetch_server_cpu_s: rawCost.server?.cpuS,
      sample_cold_cpu_s: cold.cost.client?.cpuS,
      sample_cold_page_faults: cold.cost.client?.faults,
      sample_cold_server_cpu_s: cold.cost.server?.cpuS,
      // A trainer that releases each batch after its device copy, prefetch 'after-release':
      // peak RSS over RELEASED_BATCHES batches, and its slowest sample() of a prefetched batch.
      released_batches: RELEASED_BATCHES,
      sampler_peak_rss_bytes_released: released.peakRssBytes,
      sampler_rss_over_batch_released: +(released.peakRssBytes / batchBytes).toFixed(3),
      sample_ms_prefetch_released: +(released.sampleS * 1000).toFixed(2),
      // The background assembly of a batch in fresh memory (the prefetch child's second batch)
      // and in a released batch's memory (the releasing trainer's last batch).
      assemble_fresh_s: warm.assembleS === undefined ? undefined : +warm.assembleS.toFixed(3),
      assemble_fresh_cpu_s: warm.assembleCost?.client?.cpuS,
      assemble_fresh_page_faults: warm.assembleCost?.client?.faults,
      assemble_reused_s: released.assembleS === undefined ? undefined : +released.assembleS.toFixed(3),
      assemble_reused_cpu_s: released.assembleCost?.client?.cpuS,
      assemble_reused_page_faults: released.assembleCost?.client?.faults,
      ...replication.fields,
    };
    const rows: Array<[string, string, string]> = [
      ['write throughput', `${result.write_gbps} GB/s`, `raw publish ${result.raw_publish_gbps} GB/s -> ratio ${result.write_over_raw} (goal >= 0.7)`],
      [
        'sample throughput',
        `${result.sample_gbps} GB/s`,
        `raw fetch ${result.raw_fetch_gbps} GB/s (median of ${RAW_FETCHES}) -> ratio ${result.sample_over_raw} (${result.sample_over_raw_range.join('-')} over ${steady.length} batches; goal >= 0.7)`,
      ],
      [
        'sample throughput, cold',
        `${result.sample_cold_gbps} GB/s`,
        `ratio ${result.sample_over_raw_cold}: a process's first batch, in memory touched for the first time`,
      ],
      ['sample() prefetch on', `${result.sample_ms_prefetch} ms`, 'goal <= 50 ms'],
      ['sample() prefetch off', `${result.sample_ms_cold} ms`, `one batch of ${formatBytes(batchBytes)}`],
      [
        'cold sample vs raw fetch, CPU',
        `${result.sample_cold_cpu_s ?? '?'} s, ${result.sample_cold_page_faults ?? '?'} page faults`,
        `raw fetch ${result.raw_fetch_cpu_s ?? '?'} s, ${result.raw_fetch_page_faults ?? '?'} page faults; nats-server ${result.sample_cold_server_cpu_s ?? '?'} s vs ${result.raw_fetch_server_cpu_s ?? '?'} s`,
      ],
      [
        'sampler peak RSS, prefetch',
        formatBytes(warm.peakRssBytes),
        `${result.sampler_rss_over_batch} x batch (goal <= 2): one batch training + one prefetched`,
      ],
      [
        "sampler peak RSS, 'after-release'",
        formatBytes(released.peakRssBytes),
        `${result.sampler_rss_over_batch_released} x batch (goal <= 2): each batch released after its device copy, ${RELEASED_BATCHES} batches`,
      ],
      ["sample() 'after-release'", `${result.sample_ms_prefetch_released} ms`, 'the slowest hand-over of a prefetched batch (goal <= 50 ms)'],
      [
        'assembling a batch, fresh memory',
        `${result.assemble_fresh_s ?? '?'} s, ${result.assemble_fresh_cpu_s ?? '?'} s CPU, ${result.assemble_fresh_page_faults ?? '?'} page faults`,
        'in the background, second batch of the process',
      ],
      [
        'assembling a batch, reused memory',
        `${result.assemble_reused_s ?? '?'} s, ${result.assemble_reused_cpu_s ?? '?'} s CPU, ${result.assemble_reused_page_faults ?? '?'} page faults`,
        `in the background, in a released batch's arena (batch ${RELEASED_BATCHES})`,
      ],
      ['sampler peak RSS, cold', formatBytes(cold.peakRssBytes), `${(cold.peakRssBytes / batchBytes).toFixed(3)} x batch`],
      ['partial pool CPU', `${result.partial_cpu_pct} % of a core`, `${a.inflight} in flight x 50 tok/s, ${partial.appends} appends (goal < 5 %)`],
      ['data plane on critical path', `${result.critical_path_s} s / iteration`, `paper (Laminar, §8.1): ${PAPER_OVERHEAD_S} s`],
      ...replication.rows.map(([k, v, note]): [string, string, string] => [k, v, `${note}; ${r3Title}`]),
    ];
    printReport(
      `experience buffer: batch ${a.batch} x ${a.tokens} tokens (${formatBytes(itemBytes)} each, ${formatBytes(batchBytes)} per batch)`,
      rows,
      result,
    );
  } finally {
    await nats.stop();
  }
}

if (process.argv[2] === '--sampler-child') {
  const settings = JSON.parse(process.argv[3]!) as ChildSettings;
  if (!CHILD_MODES.includes(settings.mode)) throw new Error(`unknown sampler child mode ${settings.mode}`);
  samplerChild(settings).then(
    (r) => process.send!(r, () => process.exit(0)),
    (err: unknown) => {
      process.stderr.write(`sampler child failed: ${(err as Error).stack}\n`);
      process.exit(1);
    },
  );
}
