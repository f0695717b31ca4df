/**
 * `npm run bench -- delta [--versions DIR] [--steps 6] [--config default] [--chunk 1MiB]
 *   [--size 256MiB] [--rounds 5]`
 *
 * The chunk delta codec (src/relay/delta, native/delta_codec.cc) on weight versions of real
 * training: the GRPO digits example's policy trained at lr 1e-6, 1e-5 and the example's 1e-3,
 * each step's weights as a bf16 publish sends them (bench/python/delta_versions.py, run into a
 * temporary directory unless --versions names one it wrote). Measures:
 * - per step and learning rate: the fraction of bytes and of bf16 elements that changed, and the
 *   bytes a delta puts on the wire (every chunk of --chunk as same, sparse or full) over the
 *   version's bytes: delta_wire_fraction is the mean over the steps at lr 1e-6 (goal <= 0.10);
 * - speed, out of cache: a base and a new version of --size, each the trained versions repeated
 *   (the real pattern of changes, at lr 1e-6, from the last step), encoded chunk by chunk on one
 *   thread (delta_encode_GBps_per_thread: version bytes scanned per CPU second, goal >= 2), and
 *   rebuilt chunk by chunk with each chunk's XXH3-64 computed as it is written and compared with
 *   the new version's (the verification a relay does), against a copy of the same bytes in the
 *   same run (delta_reconstruct_over_memcpy: rebuild GB/s over copy GB/s, goal >= 0.5), both per
 *   CPU second of the thread (on a loaded machine, wall clock charges each for others' work);
 * - what the delta costs where it does not pay: the encoder on lr 1e-3's versions, where nearly
 *   every word changes (the scan gives up once the payload passes the chunk's size, or sooner with
 *   a lower maxSparseFraction: 0.25 measured too).
 * Prints tables, then one JSON line (the last line of stdout).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parseBytes } from '../src/common/units.js';
import { checksumBuffer } from '../src/native/index.js';
import { decodeChunkWithChecksum, encodeChunk, type EncodedChunk } from '../src/relay/delta/codec.js';
import { encodeSparseReference } from '../src/relay/delta/sparse-reference.js';
import { median, positiveInt, printTable, round } from './support.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const PYTHON = join(REPO, '.venv', 'bin', 'python');

interface Manifest {
  config: string;
  params: number;
  bytes: number;
  runs: { lr: number; dir: string; versions: number }[];
}

interface StepFigures {
  step: number;
  bytesChanged: number;
  elementsChanged: number;
  wire: number;
  chunks: Record<EncodedChunk['kind'], number>;
}

function readVersion(dir: string, run: Manifest['runs'][number], k: number): Uint8Array {
  return new Uint8Array(readFileSync(join(dir, run.dir, `v${k}.bin`)));
}

/** Chunk by chunk of `chunk` bytes: every encoding of `next` against `base`. */
function* chunks(base: Uint8Array, next: Uint8Array, chunk: number): Generator<{ base: Uint8Array; next: Uint8Array }> {
  for (let at = 0; at < next.length; at += chunk) yield { base: base.subarray(at, at + chunk), next: next.subarray(at, at + chunk) };
}

function stepFigures(base: Uint8Array, next: Uint8Array, chunk: number, step: number): StepFigures {
  let bytesChanged = 0;
  let elementsChanged = 0;
  for (let i = 0; i + 1 < next.length; i += 2) {
    const low = base[i] !== next[i];
    const high = base[i + 1] !== next[i + 1];
    bytesChanged += Number(low) + Number(high);
    elementsChanged += Number(low || high);
  }
  let wire = 0;
  const kinds = { same: 0, sparse: 0, full: 0 };
  for (const c of chunks(base, next, chunk)) {
    const encoded = encodeChunk(c.base, c.next);
    wire += encoded.payload.length;
    kinds[encoded.kind]++;
  }
  return {
    step,
    bytesChanged: bytesChanged / next.length,
    elementsChanged: elementsChanged / (next.length / 2),
    wire: wire / next.length,
    chunks: kinds,
  };
}

/** `source` repeated to `size` bytes (a whole number of copies, at least one). */
function tiled(source: Uint8Array, size: number): Uint8Array {
  const copies = Math.max(1, Math.floor(size / source.length));
  const out = new Uint8Array(copies * source.length);
  for (let i = 0; i < copies; i++) out.set(source, i * source.length);
  return out;
}

function cpuSeconds(fn: () => void): number {
  const t0 = process.cpuUsage();
  fn();
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / 1e6;
}

function wallSeconds(fn: () => void): number {
  const t0 = performance.now();
  fn();
  return (performance.now() - t0) / 1e3;
}

function trainedVersions(values: { versions?: string; steps?: string; config?: string }): { dir: string; cleanup: () => void } {
  if (values.versions !== undefined) return { dir: values.versions, cleanup: () => {} };
  const dir = mkdtempSync(join(tmpdir(), 'laminar-delta-bench-'));
  const steps = String(positiveInt(values.steps ?? '6', '--steps'));
  const args = [join(REPO, 'bench', 'python', 'delta_versions.py'), '--out', dir, '--steps', steps, '--config', values.config ?? 'default'];
  process.stderr.write(`training the GRPO example's policy for the versions: ${PYTHON} ${args.join(' ')}\n`);
  const result = spawnSync(PYTHON, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  if (result.status !== 0) throw new Error(`delta_versions.py failed (${result.status ?? result.signal})`);
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Everything runs on this thread, synchronously: the encoder and decoder are synchronous calls. */
function measure(args: string[]): void {
  const { values } = parseArgs({
    args,
    options: {
      versions: { type: 'string' },
      steps: { type: 'string' },
      config: { type: 'string' },
      chunk: { type: 'string' },
      size: { type: 'string' },
      rounds: { type: 'string' },
    },
  });
  const chunk = parseBytes(values.chunk ?? '1MiB');
  const size = parseBytes(values.size ?? '256MiB');
  const rounds = positiveInt(values.rounds ?? '5', '--rounds');
  const trained = trainedVersions(values);
  try {
    const manifest = JSON.parse(readFileSync(join(trained.dir, 'manifest.json'), 'utf8')) as Manifest;
    const perLr = manifest.runs.map((r) => {
      const steps: StepFigures[] = [];
      for (let k = 1; k < r.versions; k++) steps.push(stepFigures(readVersion(trained.dir, r, k - 1), readVersion(trained.dir, r, k), chunk, k));
      return { lr: r.lr, steps, meanWire: steps.reduce((s, x) => s + x.wire, 0) / steps.length };
    });
    const atLr = (lr: number): (typeof perLr)[number] | undefined => perLr.find((x) => Math.abs(x.lr - lr) < lr * 1e-9);
    const low = atLr(1e-6) ?? perLr[0]!;
    const high = perLr.find((x) => x.lr === Math.max(...perLr.map((y) => y.lr)))!;

    // Speed, out of cache: the last step at lr 1e-6 (and at the highest lr), tiled to --size.
    const lowRun = manifest.runs.find((r) => r.lr === low.lr)!;
    const highRun = manifest.runs.find((r) => r.lr === high.lr)!;
    const base = tiled(readVersion(trained.dir, lowRun, lowRun.versions - 2), size);
    const next = tiled(readVersion(trained.dir, lowRun, lowRun.versions - 1), size);
    const dense = {
      base: tiled(readVersion(trained.dir, highRun, highRun.versions - 2), size),
      next: tiled(readVersion(trained.dir, highRun, highRun.versions - 1), size),
    };
    const bytes = next.length;
    const encoded: EncodedChunk[] = [];
    const expected: bigint[] = [];
    for (const c of chunks(base, next, chunk)) {
      encoded.push(encodeChunk(c.base, c.next));
      expected.push(checksumBuffer(c.next));
    }
    const out = new Uint8Array(bytes);
    out.set(base); // faults the pages in
    const encodeCpu: number[] = [];
    const encodeWall: number[] = [];
    const denseCpu: number[] = [];
    const denseBoundedCpu: number[] = [];
    const rebuild: number[] = [];
    const copy: number[] = [];
    const encodeAll = (b: Uint8Array, n: Uint8Array, maxSparseFraction = 1): void => {
      for (const c of chunks(b, n, chunk)) encodeChunk(c.base, c.next, { maxSparseFraction });
    };
    for (let r = 0; r < rounds; r++) {
      encodeCpu.push(bytes / 1e9 / cpuSeconds(() => encodeAll(base, next)));
      encodeWall.push(bytes / 1e9 / wallSeconds(() => encodeAll(base, next)));
      denseCpu.push(bytes / 1e9 / cpuSeconds(() => encodeAll(dense.base, dense.next)));
      denseBoundedCpu.push(bytes / 1e9 / cpuSeconds(() => encodeAll(dense.base, dense.next, 0.25)));
      rebuild.push(
        bytes /
          1e9 /
          cpuSeconds(() => {
            let i = 0;
            for (let at = 0; at < bytes; at += chunk, i++) {
              const target = out.subarray(at, at + chunk);
              const sum = decodeChunkWithChecksum(encoded[i]!.kind, base.subarray(at, at + chunk), encoded[i]!.payload, target);
              if (sum !== expected[i]) throw new Error(`chunk ${i} rebuilt wrongly`);
            }
          }),
      );
      copy.push(
        bytes /
          1e9 /
          cpuSeconds(() => {
            for (let at = 0; at < bytes; at += chunk) out.set(next.subarray(at, at + chunk), at);
          }),
      );
    }
    // The TypeScript reference on one chunk in 16, for scale.
    const referenceSeconds = wallSeconds(() => {
      for (let at = 0; at < bytes; at += 16 * chunk) encodeSparseReference(base.subarray(at, at + chunk), next.subarray(at, at + chunk), chunk - 1);
    });
    const referenceGBps = (Math.ceil(bytes / chunk / 16) * Math.min(chunk, bytes)) / 1e9 / referenceSeconds;

    const result = {
      bench: 'delta',
      model: `${manifest.config} (${manifest.params} parameters, ${manifest.bytes} bytes in bf16)`,
      chunk_bytes: chunk,
      steps: low.steps.length,
      delta_wire_fraction: round(low.meanWire, 4),
      delta_wire_fraction_max: round(Math.max(...low.steps.map((s) => s.wire)), 4),
      wire_fraction_by_lr: Object.fromEntries(perLr.map((x) => [String(x.lr), x.steps.map((s) => round(s.wire, 4))])),
      bytes_changed_by_lr: Object.fromEntries(perLr.map((x) => [String(x.lr), x.steps.map((s) => round(s.bytesChanged, 4))])),
      elements_changed_by_lr: Object.fromEntries(perLr.map((x) => [String(x.lr), x.steps.map((s) => round(s.elementsChanged, 4))])),
      speed_bytes: bytes,
      delta_encode_GBps_per_thread: round(median(encodeCpu), 2),
      delta_encode_GBps_wall: round(median(encodeWall), 2),
      delta_encode_dense_GBps_per_thread: round(median(denseCpu), 2),
      delta_encode_dense_bounded_GBps_per_thread: round(median(denseBoundedCpu), 2),
      reference_encode_GBps: round(referenceGBps, 3),
      delta_reconstruct_GBps: round(median(rebuild), 2),
      memcpy_GBps: round(median(copy), 2),
      delta_reconstruct_over_memcpy: round(median(rebuild) / median(copy), 3),
      delta_broadcast_over_full: null,
    };
    const rows = [['lr', 'step', 'bytes changed', 'elements changed', 'wire / version', 'chunks same / sparse / full']];
    for (const x of perLr) {
      for (const s of x.steps) {
        rows.push([
          String(x.lr),
          String(s.step),
          String(round(s.bytesChanged, 4)),
          String(round(s.elementsChanged, 4)),
          String(round(s.wire, 4)),
          `${s.chunks.same} / ${s.chunks.sparse} / ${s.chunks.full}`,
        ]);
      }
    }
    printTable(`Real training (${result.model}), chunks of ${chunk} bytes`, rows);
    printTable(`Speed on ${bytes} bytes (lr ${low.lr}'s last step tiled), median of ${rounds}`, [
      ['measure', 'GB/s'],
      ['encode, one thread, per CPU second', String(result.delta_encode_GBps_per_thread)],
      ['encode, one thread, wall clock', String(result.delta_encode_GBps_wall)],
      [`encode at lr ${high.lr} (nearly every word changed), per CPU second`, String(result.delta_encode_dense_GBps_per_thread)],
      [`the same with maxSparseFraction 0.25 (gives up sooner), per CPU second`, String(result.delta_encode_dense_bounded_GBps_per_thread)],
      ['encode, the TypeScript reference (one chunk in 16)', String(result.reference_encode_GBps)],
      ['rebuild + XXH3-64 verification, one thread, per CPU second', String(result.delta_reconstruct_GBps)],
      ['copy of the same bytes (raw limit), per CPU second', String(result.memcpy_GBps)],
    ]);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    trained.cleanup();
  }
}

export function run(args: string[]): Promise<void> {
  measure(args);
  return Promise.resolve();
}
