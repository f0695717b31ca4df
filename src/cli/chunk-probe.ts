/**
 * Measures a relay's own cost per chunk on this host, the part of appendix C's T_start that the
 * link's message latency leaves out: two relays on 127.0.0.1 (separate processes, as in a
 * cluster) carry the same bytes over one hop in two chunk sizes, and the difference of the times
 * over the difference of the chunk counts is the cost of one chunk (`perChunkCost`).
 *
 * Each round starts two fresh relays and times the second version (the first one makes each
 * relay allocate its segments; the second arrives into the spare segment the receiver prepared
 * while idle, as every version after the first does in training). Used by
 * `laminar chunk-size --probe` and by the broadcast benchmark's `--chunk-size auto`.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes, randomFillSync } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { delay } from '../common/concurrency.js';
import { TimeoutError } from '../common/errors.js';
import { median } from '../common/stats.js';
import { formatBytes } from '../common/units.js';
import { perChunkCost } from '../relay/broadcast/chunk-model.js';
import { RelayClient } from '../relay/client/index.js';
import { removeShmTree } from '../relay/pages/huge-mount.js';
import { spawnDaemon, type Daemon } from '../services/daemon-process.js';

const MODEL = 'laminar/chunk-probe';
/** Tensors of a synthetic version are at most this big. */
const MAX_TENSOR = 256 * 2 ** 20;
/** The two chunk sizes: far enough apart that the per-chunk term stands out of the noise. */
export const PROBE_CHUNK_SIZES = [2 ** 20, 16 * 2 ** 20] as const;
/** The relays must connect, and each version arrive, within this long. */
const STEP_TIMEOUT_MS = 120_000;

export interface ChunkProbeOptions {
  /** Bytes of the version carried (1 GiB averages out a busy moment well). */
  bytes: number;
  /** Two different chunk sizes (default PROBE_CHUNK_SIZES). */
  chunkSizes?: readonly [number, number];
  rounds: number;
  /** Directory under which the relays keep their segments (a tmpfs: /dev/shm or a huge-page one). */
  shmBase: string;
  /** Chunks in flight (relay --broadcast-window). */
  window?: number;
  /**
   * Environment of the relays. UCX_TLS defaults to tcp: on one host UCX would otherwise carry the
   * hop over shared memory, which stands in for no network.
   */
  env?: NodeJS.ProcessEnv;
  onProgress?: (text: string) => void;
  signal?: AbortSignal;
  /** Told of each relay process and scratch directory, for a caller that cleans up on a signal. */
  track?: { child(child: ChildProcess): void; dir(path: string): void };
}

export interface ChunkProbeResult {
  bytes: number;
  timings: { chunkSize: number; chunks: number; seconds: number[]; median: number }[];
  /** Seconds one chunk costs a relay beyond its bytes. */
  perChunk: number;
}

export async function probeChunkCost(options: ChunkProbeOptions): Promise<ChunkProbeResult> {
  const chunkSizes = options.chunkSizes ?? PROBE_CHUNK_SIZES;
  if (chunkSizes[0] === chunkSizes[1]) throw new RangeError('the probe needs two different chunk sizes');
  if (!(options.rounds >= 1)) throw new RangeError('the probe needs at least one round');
  const tensors = makeTensors(options.bytes);
  const timings: ChunkProbeResult['timings'] = [];
  for (const chunkSize of chunkSizes) {
    const seconds: number[] = [];
    for (let r = 0; r < options.rounds; r++) {
      options.signal?.throwIfAborted();
      options.onProgress?.(`one loopback hop of ${formatBytes(options.bytes)} in ${formatBytes(chunkSize)} chunks, round ${r + 1}/${options.rounds}`);
      seconds.push(await timeOneHop(tensors, chunkSize, options));
    }
    timings.push({ chunkSize, chunks: Math.ceil(options.bytes / chunkSize), seconds, median: median(seconds) });
  }
  const [first, second] = timings as [ChunkProbeResult['timings'][number], ChunkProbeResult['timings'][number]];
  return {
    bytes: options.bytes,
    timings,
    perChunk: perChunkCost({ chunks: first.chunks, seconds: first.median }, { chunks: second.chunks, seconds: second.median }),
  };
}

export type Tensors = { name: string; dtype: 'U8'; shape: number[]; data: Uint8Array }[];

/**
 * A synthetic version of `bytes` random bytes (a block repeated: the checksums do not care),
 * split into tensors of at most 256 MiB. Also the broadcast benchmark's version.
 */
export function makeTensors(bytes: number): Tensors {
  const data = Buffer.allocUnsafe(bytes);
  const block = randomFillSync(Buffer.allocUnsafe(Math.min(bytes, 16 * 2 ** 20)));
  for (let at = 0; at < bytes; at += block.length) block.copy(data, at, 0, Math.min(block.length, bytes - at));
  const tensors: Tensors = [];
  for (let at = 0, i = 0; at < bytes; at += MAX_TENSOR, i++) {
    const n = Math.min(MAX_TENSOR, bytes - at);
    tensors.push({ name: `layer.${i}.weight`, dtype: 'U8', shape: [n], data: data.subarray(at, at + n) });
  }
  return tensors;
}

/** Seconds from the publish of version 2 at the first relay to its completion at the second. */
async function timeOneHop(tensors: Tensors, chunkSize: number, options: ChunkProbeOptions): Promise<number> {
  const root = mkdtempSync(join(options.shmBase, 'laminar-chunk-probe-'));
  options.track?.dir(root);
  const env = { ...(options.env ?? process.env) };
  env.UCX_TLS ??= 'tcp';
  const daemons: Daemon[] = [];
  const clients: RelayClient[] = [];
  const abort = new AbortController();
  const stop = options.signal ? AbortSignal.any([options.signal, abort.signal]) : abort.signal;
  try {
    const secretFile = join(root, 'secret');
    writeFileSync(secretFile, randomBytes(32).toString('hex'), { mode: 0o600 });
    // Each relay binds a port of the kernel's choosing (a port picked beforehand could be taken
    // by another process before the relay binds it); the plan naming both follows.
    for (let i = 0; i < 2; i++) {
      const argv = [
        'relay',
        '--id',
        `p${i}`,
        '--listen',
        '127.0.0.1:0',
        '--shm-dir',
        join(root, `p${i}`),
        '--socket',
        join(root, `p${i}.sock`),
        '--secret-file',
        secretFile,
        '--chunk-size',
        String(chunkSize),
        '--broadcast-window',
        String(options.window ?? 4),
        '--no-pin',
        '--keep-versions',
        '0',
        '--metrics-port',
        '-1',
        '--retry-interval',
        '250ms',
        '--log-level',
        'info',
      ];
      daemons.push(await spawnDaemon(`relay p${i}`, argv, 'relay ready', [], env));
      options.track?.child(daemons[i]!.child);
      clients.push(await RelayClient.connect({ socketPath: join(root, `p${i}.sock`), name: 'chunk-probe' }));
    }
    const [sender, receiver] = clients as [RelayClient, RelayClient];
    const plan = { epoch: 1, relays: daemons.map((d, i) => ({ id: `p${i}`, address: `127.0.0.1:${d.ready.ucxPort as number}` })) };
    await Promise.all(clients.map((c) => c.setPlan(plan)));
    await until('the two relays to connect', stop, async () => (await sender.status()).broadcast?.downstream?.id === 'p1');
    await carry(sender, receiver, tensors, 1, stop);
    await until('the receiver to prepare a spare segment', stop, async () => {
      const [s, r] = await Promise.all([sender.status(), receiver.status()]);
      return r.spares.count >= 1 && r.spares.warming === 0 && !r.broadcast?.receiving.length && !s.broadcast?.downstream?.sending.length;
    });
    return await carry(sender, receiver, tensors, 2, stop);
  } finally {
    abort.abort();
    for (const c of clients) c.close();
    await Promise.all(daemons.map((d) => d.kill('SIGTERM')));
    // A relay's huge-page mount in its shm directory outlives it: rm alone stops at it (EBUSY).
    removeShmTree(root);
  }
}

/** Publishes `version` at the sender; seconds until the receiver holds it complete. */
async function carry(sender: RelayClient, receiver: RelayClient, tensors: Tensors, version: number, signal: AbortSignal): Promise<number> {
  const watch = receiver.watch({ model: MODEL, replay: true, signal })[Symbol.asyncIterator]();
  const arrived = (async () => {
    for (;;) {
      const next = await watch.next();
      if (next.done) throw new Error(`the watch on the receiving relay ended before version ${version} arrived`);
      if (next.value.version >= version) return performance.now();
    }
  })();
  arrived.catch(() => undefined);
  // Requests on one connection are answered in order: once status answers, the watch is in place.
  await receiver.status();
  for (const t of tensors) t.data[0] = version;
  // From the moment the sender serves it (its own verification is no part of the hop).
  await (
    await sender.publish({ model: MODEL, version, tensors })
  ).visible;
  const started = performance.now();
  const timeout = delay(STEP_TIMEOUT_MS, signal).then(() => {
    throw new TimeoutError(`version ${version} did not arrive over one loopback hop within ${STEP_TIMEOUT_MS / 1e3} s`);
  });
  timeout.catch(() => undefined);
  const end = await Promise.race([arrived, timeout]);
  await watch.return(undefined);
  return (end - started) / 1e3;
}

async function until(what: string, signal: AbortSignal, check: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + STEP_TIMEOUT_MS;
  while (!(await check())) {
    signal.throwIfAborted();
    if (performance.now() > deadline) throw new TimeoutError(`the probe timed out waiting for ${what}`);
    await delay(50, signal);
  }
}
