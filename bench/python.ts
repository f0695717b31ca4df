/**
 * `npm run bench -- python [--size 1GiB] [--rounds 5] [--writes 4000] [--skip relay,writer,sampler]`
 *
 * The Python client against the TypeScript one and the raw limits, in one run:
 *   relay:   a relay process; the Python client's acquire (-> numpy views, -> torch tensors), its
 *            read of every tensor out of a lease against numpy's copy of a private buffer, and its
 *            publish stall (copies + checksums + commit of a 1 GiB, 16-tensor state dict) against
 *            the TypeScript client's (beginPublish, writeAsync of every tensor, commit) of the
 *            same size on the same relay (bench/python/relay_bench.py);
 *   writer:  trajectories/s written to the experience buffer (16 KiB payloads) from Python
 *            (laminar.data.ExperienceWriter, bench/python/writer_bench.py) against the TypeScript
 *            ExperienceWriter, the same count and window, on one nats-server;
 *   sampler: `laminar sampler` serving a Python trainer: sample() of a prefetched batch of
 *            512 × 32 KiB and the copies the Python side made of its bytes
 *            (bench/python/sampler_bench.py).
 * Prints a table, then one JSON line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { NatsConnection } from '@nats-io/transport-node';
import { connect } from '@nats-io/transport-node';
import { mapLimit } from '../src/common/concurrency.js';
import { parseBytes } from '../src/common/units.js';
import { ExperienceWriter } from '../src/data/index.js';
import { Mapping } from '../src/native/index.js';
import { RelayClient } from '../src/relay/client/relay-client.js';
import { spawnDaemon, startNatsServer } from '../src/services/index.js';
import { spawnBenchRelay, median, printTable, round } from './support.js';
import { removeShmTree } from '../src/relay/pages/huge-mount.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const PYTHON = join(REPO, '.venv', 'bin', 'python');
const TENSORS = 16;
const WRITE_WINDOW = 64;
const PAYLOAD_BYTES = 16 * 1024;
const SAMPLE_BATCH = 512;
const SAMPLE_TOKENS = 4096; // 4096 × (int32 + float32) = 32 KiB a trajectory

const log = (s: string): boolean => process.stderr.write(`python bench: ${s}\n`);

/** Runs a Python bench script; its last stdout line is its JSON result. */
function runPython(script: string, args: string[]): Promise<Record<string, number>> {
  return new Promise((resolve, reject) => {
    const child: ChildProcess = spawn(PYTHON, [join(REPO, 'bench', 'python', script), ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      const last = out.trim().split('\n').at(-1) ?? '';
      if (code !== 0) reject(new Error(`${script} exited with ${code}: ${last}`));
      else {
        // The script's own "bench" name gives way to this bench's.
        const figures = JSON.parse(last) as Record<string, number>;
        delete figures.bench;
        resolve(figures);
      }
    });
  });
}

/** The TypeScript client's publish stall of `size` bytes in 16 tensors: writes + commit sent (begin timed apart). */
async function tsPublish(socketPath: string, size: number, rounds: number, firstVersion: number): Promise<{ stall: number[]; begin: number[] }> {
  const tensorBytes = Math.floor(size / TENSORS / 4096) * 4096;
  const src = new Mapping(null, { size: tensorBytes * TENSORS, populate: true });
  new Uint8Array(src.view(0, Math.min(tensorBytes * TENSORS, 2 ** 32))).fill(0x3c);
  const sources = Array.from({ length: TENSORS }, (_, i) => new Uint8Array(src.view(i * tensorBytes, tensorBytes)));
  const tensors = sources.map((_, i) => ({ name: `layer.${i}.weight`, dtype: 'BF16' as const, shape: [tensorBytes / 2] }));
  const client = await RelayClient.connect({ socketPath, name: 'bench-ts' });
  const stall: number[] = [];
  const begin: number[] = [];
  try {
    for (let version = firstVersion; version < firstVersion + rounds; version++) {
      const t0 = performance.now();
      const pub = await client.beginPublish({ model: 'bench/ts', version, tensors });
      const t1 = performance.now();
      await Promise.all(tensors.map((t, i) => pub.writeAsync(t.name, sources[i]!)));
      const { visible } = await pub.commit();
      stall.push(performance.now() - t1);
      begin.push(t1 - t0);
      // Out of the stall, and before the next round: the relay's read would share its bandwidth.
      await visible;
    }
  } finally {
    client.close();
    src.close();
  }
  return { stall, begin };
}

async function relayPart(size: number, rounds: number): Promise<Record<string, number>> {
  const relay = await spawnBenchRelay(['--keep-versions', '1']);
  try {
    // The TypeScript rounds run before and after the Python ones, and their median is taken
    // over both: this VM's memory bandwidth drifts by 10-15 % over a minute, and a block on each
    // side of the Python run takes most of that drift out of the ratio.
    log(`TypeScript publish, ${rounds} rounds`);
    const before = await tsPublish(relay.socketPath, size, rounds, 1);
    log(`Python client (acquire, views, read, publish), ${rounds} rounds`);
    const py = await runPython('relay_bench.py', [
      '--socket',
      relay.socketPath,
      '--size-bytes',
      String(size),
      '--tensors',
      String(TENSORS),
      '--rounds',
      String(rounds),
    ]);
    log(`TypeScript publish, ${rounds} more rounds`);
    const after = await tsPublish(relay.socketPath, size, rounds, rounds + 1);
    const stallMs = median([...before.stall, ...after.stall]);
    return {
      ...py,
      ts_publish_stall_ms: round(stallMs, 1),
      ts_begin_ms: round(median([...before.begin, ...after.begin]), 1),
      py_publish_stall_over_ts: round(py.py_publish_stall_ms! / stallMs, 2),
    };
  } finally {
    await relay.stop();
  }
}

function trajectory(n: number, tokens: number): Record<string, unknown> {
  return {
    id: `ts-${n}`,
    promptId: `p${n >> 3}`,
    groupId: `g${n >> 3}`,
    sampleIndex: n & 7,
    groupSize: 8,
    weightVersion: 1,
    reward: (n % 7) / 7,
    tokens: new Int32Array(tokens).fill(n),
    logprobs: new Float32Array(tokens).fill(-0.5),
    promptLength: tokens / 4,
    responseLength: tokens - tokens / 4,
  };
}

async function tsWrites(nc: NatsConnection, buffer: string, count: number): Promise<number> {
  const writer = await ExperienceWriter.open({ nc, buffer });
  const tokens = PAYLOAD_BYTES / 8;
  const template = trajectory(0, tokens);
  const t0 = performance.now();
  await mapLimit(
    Array.from({ length: count }, (_, i) => i),
    WRITE_WINDOW,
    (n) => writer.write({ ...template, id: `ts-${n}`, groupId: `g${n >> 3}`, sampleIndex: n & 7 }),
  );
  return count / ((performance.now() - t0) / 1e3);
}

async function writerPart(count: number): Promise<Record<string, number>> {
  const server = await startNatsServer({ jetstream: true });
  const nc = await connect({ servers: server.url });
  try {
    log(`TypeScript writer: ${count} trajectories of ${PAYLOAD_BYTES} B`);
    const tsRate = await tsWrites(nc, 'ts', count);
    log(`Python writer: ${count} trajectories of ${PAYLOAD_BYTES} B`);
    const py = await runPython('writer_bench.py', [
      '--nats-url',
      server.url,
      '--buffer',
      'py',
      '--count',
      String(count),
      '--payload-bytes',
      String(PAYLOAD_BYTES),
    ]);
    return { ...py, ts_writes_per_s: round(tsRate, 0), py_writer_over_ts: round(py.py_writes_per_s! / tsRate, 2) };
  } finally {
    await nc.close();
    await server.stop();
  }
}

async function samplerPart(rounds: number): Promise<Record<string, number>> {
  const shm = mkdtempSync('/dev/shm/laminar-bench-py-');
  const server = await startNatsServer({ jetstream: true });
  const nc = await connect({ servers: server.url });
  const socket = join(shm, 'sampler.sock');
  let sampler: Awaited<ReturnType<typeof spawnDaemon>> | null = null;
  try {
    const count = SAMPLE_BATCH * (rounds + 2);
    log(`writing ${count} trajectories of ${SAMPLE_TOKENS * 8} B`);
    const writer = await ExperienceWriter.open({ nc, buffer: 'sample' });
    const template = trajectory(0, SAMPLE_TOKENS);
    await mapLimit(
      Array.from({ length: count }, (_, i) => i),
      WRITE_WINDOW,
      (n) => writer.write({ ...template, id: `s-${n}`, groupId: `g${n >> 3}`, sampleIndex: n & 7 }),
    );
    sampler = await spawnDaemon(
      'sampler',
      [
        'sampler',
        '--nats',
        server.url,
        '--buffer',
        'sample',
        '--batch-size',
        String(SAMPLE_BATCH),
        '--socket',
        socket,
        '--shm-dir',
        shm,
        '--metrics-port',
        '-1',
      ],
      'sampler ready',
    );
    log(`Python sampler: ${rounds} prefetched batches of ${SAMPLE_BATCH}`);
    return await runPython('sampler_bench.py', ['--socket', socket, '--rounds', String(rounds)]);
  } finally {
    await sampler?.kill('SIGTERM');
    await nc.close();
    await server.stop();
    removeShmTree(shm);
  }
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      size: { type: 'string', default: '1GiB' },
      rounds: { type: 'string', default: '5' },
      writes: { type: 'string', default: '4000' },
      skip: { type: 'string', default: '' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write('usage: npm run bench -- python [--size 1GiB] [--rounds 5] [--writes 4000] [--skip relay,writer,sampler]\n');
    return;
  }
  if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run bash scripts/bootstrap.sh`);
  const skip = new Set(values.skip.split(',').filter(Boolean));
  const size = parseBytes(values.size);
  const rounds = Number(values.rounds);
  const result: Record<string, unknown> = { bench: 'python', size_bytes: size, rounds };
  if (!skip.has('relay')) Object.assign(result, await relayPart(size, rounds));
  if (!skip.has('writer')) Object.assign(result, await writerPart(Number(values.writes)));
  if (!skip.has('sampler')) Object.assign(result, await samplerPart(rounds));

  const r = result as Record<string, number | undefined>;
  const show = (v: number | undefined, unit = ''): string => (v === undefined ? 'skipped' : `${v}${unit}`);
  printTable('Python client', [
    ['measure', 'laminar', 'goal'],
    ['acquire latest -> numpy views (1 GiB, 16 tensors)', show(r.py_acquire_ms, ' ms'), '<= 2 ms'],
    ['acquire latest -> torch tensors', show(r.py_torch_views_ms, ' ms'), '<= 5 ms'],
    ['numpy read out of a lease / numpy memcpy', show(r.py_read_over_memcpy), '>= 0.9'],
    [
      'publish stall (copies + commit), Python / TypeScript',
      r.py_publish_stall_over_ts === undefined ? 'skipped' : `${r.py_publish_stall_over_ts} (${r.py_publish_stall_ms} / ${r.ts_publish_stall_ms} ms)`,
      '<= 1.1',
    ],
    [
      'trajectories/s written, Python / TypeScript (16 KiB)',
      r.py_writer_over_ts === undefined ? 'skipped' : `${r.py_writer_over_ts} (${r.py_writes_per_s} / ${r.ts_writes_per_s})`,
      '>= 0.7',
    ],
    ['sample() of a prefetched 512 × 32 KiB batch', show(r.py_sample_ms_prefetch, ' ms'), '<= 50 ms'],
    ['copies of batch bytes on the Python side', show(r.py_batch_copies), '0'],
  ]);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
