/**
 * `npm run bench -- fp8 [--rows 4096] [--cols 4096] [--rounds 5]`
 *
 * The FP8 conversion of a relay (src/relay/fp8, native/fp8_quantize.cc): BF16 weights to e4m3
 * with 128x128 block scales. Measures, on one bf16 tensor of normal-distributed values:
 * - one thread: one call of the kernel over the whole tensor at a time (GB/s of bf16 read), per
 *   CPU second of the thread (fp8_convert_GBps_per_thread: what a core does, whatever else runs on
 *   the machine) and per second of wall clock;
 * - the raw limit in the same run: a native copy of the same bytes, one thread;
 * - the relay's way: the whole version converted in 16 MiB jobs on the libuv pool;
 * - a relay's FP8 variant: an in-process relay (segments in /dev/shm) holding a bf16 version of
 *   `--relay-bytes`, and the time from an acquire of `<model>@fp8` to the variant served
 *   (conversion, checksums, directory: what the first FP8 engine of a host waits for);
 * and the size of an FP8 version against its bf16 source for a Llama-style model layout, the
 * bytes a broadcast of the FP8 version would carry instead (fp8_bytes_over_bf16);
 * - where to convert (fp8-chain.ts, root: the netns testbed, `--relays` relays on `--rate`
 *   links, a `--chain-size` version of 4096x4096 bf16 tensors, `--chain-rounds` rounds of each
 *   `--fp8-broadcast` mode): the broadcast of the FP8 version the master converted over the
 *   broadcast of the bf16 version, each from the version served at the master to the last relay
 *   holding it (fp8_broadcast_over_bf16), the same with the master's conversion counted
 *   (fp8_with_conversion_over_bf16), and FP8 everywhere by conversion at each relay after the
 *   bf16 broadcast over by the master's (relay_convert_over_master); `--skip-chain` leaves them
 *   null.
 * Prints tables, then one JSON line (the last line of stdout).
 */
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseBytes } from '../src/common/units.js';
import { RelayClient } from '../src/relay/client/relay-client.js';
import { startRelay } from '../src/relay/daemon.js';
import { fp8ModelId } from '../src/relay/fp8/model-id.js';
import { removeShmTree } from '../src/relay/pages/huge-mount.js';
import { fp8QuantizeAsync, Mapping } from '../src/native/index.js';
import { planLayout, type TensorSpec } from '../src/safetensors/header.js';
import { compileKeepPattern, DEFAULT_FP8_KEEP, planFp8 } from '../src/relay/fp8/plan.js';
import { quantiseVersion, versionSource } from '../src/relay/fp8/quantize.js';
import { chainFigures } from './fp8-chain.js';
import { median, positiveInt, printTable, round } from './support.js';

/** Llama-3-8B's tensors (one layer stands for all 32: the ratio is per layer plus the ends). */
function llamaLayout(): TensorSpec[] {
  const h = 4096;
  const kv = 1024;
  const ff = 14336;
  const vocab = 128256;
  const specs: TensorSpec[] = [{ name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [vocab, h] }];
  for (let i = 0; i < 32; i++) {
    const p = `model.layers.${i}.`;
    specs.push(
      { name: `${p}input_layernorm.weight`, dtype: 'BF16', shape: [h] },
      { name: `${p}self_attn.q_proj.weight`, dtype: 'BF16', shape: [h, h] },
      { name: `${p}self_attn.k_proj.weight`, dtype: 'BF16', shape: [kv, h] },
      { name: `${p}self_attn.v_proj.weight`, dtype: 'BF16', shape: [kv, h] },
      { name: `${p}self_attn.o_proj.weight`, dtype: 'BF16', shape: [h, h] },
      { name: `${p}post_attention_layernorm.weight`, dtype: 'BF16', shape: [h] },
      { name: `${p}mlp.gate_proj.weight`, dtype: 'BF16', shape: [ff, h] },
      { name: `${p}mlp.up_proj.weight`, dtype: 'BF16', shape: [ff, h] },
      { name: `${p}mlp.down_proj.weight`, dtype: 'BF16', shape: [h, ff] },
    );
  }
  specs.push({ name: 'model.norm.weight', dtype: 'BF16', shape: [h] }, { name: 'lm_head.weight', dtype: 'BF16', shape: [vocab, h] });
  return specs;
}

/** bf16 words of N(0, 0.02) values (Box-Muller, seeded LCG: the same tensor every run). */
function fillBf16(words: Uint16Array): void {
  let state = 46;
  const next = (): number => ((state = (state * 1103515245 + 12345) >>> 0) + 1) / 4294967297;
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (let i = 0; i < words.length; i++) {
    f[0] = 0.02 * Math.sqrt(-2 * Math.log(next())) * Math.cos(2 * Math.PI * next());
    words[i] = u[0]! >>> 16;
  }
}

/** Seconds from an acquire of `<model>@fp8` to the variant served, for a bf16 version of about `bytes`. */
async function relayVariantSeconds(bytes: number): Promise<{ seconds: number; bytes: number }> {
  const root = mkdtempSync(join('/dev/shm', 'laminar-fp8-bench-'));
  const relay = await startRelay({ shmDir: join(root, 'segments'), socketPath: join(root, 'relay.sock'), metricsPort: -1, pin: false, hugePages: 'off' });
  try {
    const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
    try {
      const cols = 4096;
      const rows = Math.max(128, Math.floor(bytes / 2 / cols / 128) * 128);
      const data = new Uint16Array(rows * cols);
      fillBf16(data);
      const layers = 4;
      const rowsEach = rows / layers;
      const tensors = Array.from({ length: layers }, (_, i) => ({
        name: `model.layers.${i}.mlp.up_proj.weight`,
        dtype: 'BF16' as const,
        shape: [rowsEach, cols],
        data: data.subarray(i * rowsEach * cols, (i + 1) * rowsEach * cols),
      }));
      await (
        await client.publish({ model: 'bench/fp8', version: 1, tensors })
      ).visible;
      const t0 = performance.now();
      const lease = await client.acquire({ model: fp8ModelId('bench/fp8'), timeoutMs: 600_000 });
      const seconds = (performance.now() - t0) / 1e3;
      await lease.release();
      return { seconds, bytes: data.byteLength };
    } finally {
      client.close();
    }
  } finally {
    await relay.close();
    removeShmTree(root);
  }
}

async function seconds(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return (performance.now() - t0) / 1e3;
}

/**
 * CPU seconds of the process while fn runs: with one pool thread working and the event loop
 * waiting, the thread's own time, which other processes on a loaded machine do not inflate.
 */
async function cpuSeconds(fn: () => Promise<unknown>): Promise<number> {
  const t0 = process.cpuUsage();
  await fn();
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / 1e6;
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      rows: { type: 'string' },
      cols: { type: 'string' },
      rounds: { type: 'string' },
      'relay-bytes': { type: 'string' },
      'chain-size': { type: 'string', default: '512MiB' },
      'chain-rounds': { type: 'string', default: '3' },
      'chunk-size': { type: 'string', default: '16MiB' },
      relays: { type: 'string', default: '4' },
      rate: { type: 'string', default: '2gbit' },
      'skip-chain': { type: 'boolean', default: false },
    },
  });
  const rows = positiveInt(values.rows ?? '4096', '--rows');
  const cols = positiveInt(values.cols ?? '4096', '--cols');
  const rounds = positiveInt(values.rounds ?? '5', '--rounds');
  const bytes = rows * cols * 2;
  const src = new Mapping(null, { size: bytes });
  for (let at = 0; at < bytes; at += 2 ** 28) fillBf16(new Uint16Array(src.view(at, Math.min(2 ** 28, bytes - at))));
  const scaleBytes = Math.ceil(rows / 128) * Math.ceil(cols / 128) * 4;
  const dst = new Mapping(null, { size: rows * cols + scaleBytes });
  const copy = new Mapping(null, { size: bytes });
  await fp8QuantizeAsync(src, 0, 'BF16', rows, cols, 0, rows, dst, 0, rows * cols); // faults the pages in
  await copy.copyFrom(src, 0, 0, bytes);

  const oneThread: number[] = [];
  const oneThreadCpu: number[] = [];
  const memcpy: number[] = [];
  const pooled: number[] = [];
  const spec: TensorSpec[] = [{ name: 'layers.0.mlp.up_proj.weight', dtype: 'BF16', shape: [rows, cols] }];
  const plan = planFp8(spec, compileKeepPattern(DEFAULT_FP8_KEEP));
  const sourceLayout = planLayout(spec, { model: 'bench', version: 1, chunkSize: 2 ** 31 });
  const targetLayout = planLayout(plan.specs, { model: 'bench@fp8', version: 1, chunkSize: 2 ** 31 });
  const version = new Mapping(null, { size: sourceLayout.totalSize });
  await version.copyFrom(src, 0, sourceLayout.dataOffset, bytes);
  const target = new Mapping(null, { size: targetLayout.totalSize });
  const threads = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
  await quantiseVersion(plan, versionSource(version, sourceLayout), target, targetLayout, threads);
  for (let r = 0; r < rounds; r++) {
    oneThread.push(bytes / 1e9 / (await seconds(() => fp8QuantizeAsync(src, 0, 'BF16', rows, cols, 0, rows, dst, 0, rows * cols))));
    oneThreadCpu.push(bytes / 1e9 / (await cpuSeconds(() => fp8QuantizeAsync(src, 0, 'BF16', rows, cols, 0, rows, dst, 0, rows * cols))));
    memcpy.push(bytes / 1e9 / (await seconds(() => copy.copyFrom(src, 0, 0, bytes))));
    pooled.push(bytes / 1e9 / (await seconds(() => quantiseVersion(plan, versionSource(version, sourceLayout), target, targetLayout, threads))));
  }
  const variant = await relayVariantSeconds(parseBytes(values['relay-bytes'] ?? '256MiB'));
  const started = performance.now();
  const chainTensor = new Uint16Array(4096 * 4096);
  fillBf16(chainTensor);
  const chain = values['skip-chain']
    ? { skipped: '--skip-chain' }
    : await chainFigures({
        bytes: parseBytes(values['chain-size']),
        rate: values.rate,
        relays: positiveInt(values.relays, '--relays'),
        rounds: positiveInt(values['chain-rounds'], '--chain-rounds'),
        chunkSize: parseBytes(values['chunk-size']),
        tensor: chainTensor,
        say: (text) => void process.stderr.write(`[${((performance.now() - started) / 1e3).toFixed(0)} s] ${text}\n`),
      });
  const measured = 'skipped' in chain ? null : chain;
  const llama = llamaLayout();
  const bf16Bytes = planLayout(llama, { model: 'llama', version: 1, chunkSize: 2 ** 31 }).totalSize;
  const fp8Bytes = planLayout(planFp8(llama, compileKeepPattern(DEFAULT_FP8_KEEP)).specs, { model: 'llama@fp8', version: 1, chunkSize: 2 ** 31 }).totalSize;

  const result = {
    bench: 'fp8',
    tensor: [rows, cols],
    fp8_convert_GBps_per_thread: round(median(oneThreadCpu), 2),
    fp8_convert_GBps_one_thread_wall: round(median(oneThread), 2),
    memcpy_GBps_per_thread: round(median(memcpy), 2),
    fp8_convert_GBps_pool: round(median(pooled), 2),
    pool_threads: threads,
    relay_variant_bytes: variant.bytes,
    relay_variant_seconds: round(variant.seconds, 3),
    relay_variant_GBps: round(variant.bytes / 1e9 / variant.seconds, 2),
    fp8_bytes_over_bf16: round(fp8Bytes / bf16Bytes, 4),
    chain: measured && { relays: Number(values.relays), rate: values.rate, bytes: parseBytes(values['chain-size']), rounds: Number(values['chain-rounds']) },
    chain_skipped: 'skipped' in chain ? chain.skipped : null,
    bf16_broadcast_s: measured && round(measured.bf16_s),
    relay_convert_s: measured && round(measured.relay_convert_s),
    master_convert_s: measured && round(measured.master_convert_s),
    fp8_broadcast_s: measured && round(measured.fp8_s - measured.master_convert_s),
    fp8_everywhere_s: measured && round(measured.fp8_s),
    also_fp8_s: measured && round(measured.also_fp8_s),
    also_bf16_s: measured && round(measured.also_bf16_s),
    fp8_broadcast_over_bf16: measured && round(measured.fp8_broadcast_over_bf16),
    fp8_with_conversion_over_bf16: measured && round(measured.fp8_with_conversion_over_bf16),
    relay_convert_over_master: measured && round(measured.relay_convert_over_master),
  };
  printTable('FP8 conversion (GB/s of bf16 read, median)', [
    ['measure', 'GB/s'],
    ['kernel, one thread, per CPU second', String(result.fp8_convert_GBps_per_thread)],
    ['kernel, one thread, wall clock', String(result.fp8_convert_GBps_one_thread_wall)],
    ['native copy, one thread (raw limit)', String(result.memcpy_GBps_per_thread)],
    [`version in 16 MiB jobs, ${threads} pool threads`, String(result.fp8_convert_GBps_pool)],
    [`a relay's FP8 variant of ${variant.bytes} bytes, acquire to served (checksums and directory included)`, String(result.relay_variant_GBps)],
  ]);
  printTable('Llama-3-8B layout', [
    ['version', 'bytes'],
    ['bf16', String(bf16Bytes)],
    ['fp8 (embeddings, norms, lm_head kept)', String(fp8Bytes)],
  ]);
  if (measured) {
    printTable(`Where to convert: ${values.relays} relays, ${values.rate} links, ${values['chain-size']} bf16 (median of ${values['chain-rounds']})`, [
      ['--fp8-broadcast', 'FP8 everywhere (s)', 'bf16 everywhere (s)'],
      [
        'off (each relay converts after the bf16 broadcast)',
        `${round(measured.bf16_s + measured.relay_convert_s)} (${round(measured.relay_convert_s)} converting)`,
        String(round(measured.bf16_s)),
      ],
      ['only (the master converts and broadcasts FP8)', `${round(measured.fp8_s)} (${round(measured.master_convert_s)} converting)`, '-'],
      ['also (the master broadcasts both)', String(round(measured.also_fp8_s)), String(round(measured.also_bf16_s))],
    ]);
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
