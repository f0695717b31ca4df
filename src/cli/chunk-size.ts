/** `laminar chunk-size`: the broadcast chunk size that minimises appendix C's T(p, k). */
import { Command } from 'commander';
import { ErrorCodes, InvalidInputError, LaminarError } from '../common/errors.js';
import { formatBytes, parseBandwidth, parseBytes, parseLatency } from '../common/units.js';
import { broadcastTime, optimalChunkCount, optimalChunkSize } from '../relay/broadcast/chunk-model.js';
import { chooseChunkSize } from '../relay/chunking/chunk-choice.js';
import { DEFAULT_CHUNK_SIZE } from '../relay/options.js';
import { PROBE_CHUNK_SIZES, probeChunkCost, type ChunkProbeResult } from './chunk-probe.js';

interface ChunkSizeOptions {
  size: string;
  relays: string;
  bandwidth: string;
  latency: string;
  perChunk?: string;
  probe?: boolean;
  probeSize: string;
  probeRounds: string;
  shmDir: string;
  json?: boolean;
}

export function chunkSizeCommand(): Command {
  return new Command('chunk-size')
    .description('the broadcast chunk size minimising T(p,k) = (p+k-2)(M/k*T_byte + T_start) for a measured link (Laminar appendix C)')
    .requiredOption('--size <bytes>', 'bytes of one version (M), e.g. 15GiB')
    .requiredOption('--relays <p>', 'relays in the chain, the master included (p)')
    .requiredOption('--bandwidth <rate>', 'measured bandwidth of one link, e.g. 100gbit or 11GB/s (ucx_perftest -t tag_bw)')
    .requiredOption('--latency <time>', 'measured start-up latency of one message, e.g. 5us (ucx_perftest -t tag_lat)')
    .option('--per-chunk <time>', "a relay's own cost per chunk, added to --latency in T_start (default 0; --probe measures it)")
    .option(
      '--probe',
      "measure a relay's cost per chunk on this host first: two relays on 127.0.0.1 carry --probe-size in 1 MiB and in 16 MiB chunks (UCX settings from the environment)",
    )
    .option('--probe-size <bytes>', 'bytes the probe carries in each round', '1GiB')
    .option('--probe-rounds <n>', 'rounds of the probe per chunk size (the median is used)', '3')
    .option('--shm-dir <dir>', "where the probe's relays keep their segments", '/dev/shm')
    .option('--json', 'print the result as JSON')
    .action(async (opts: ChunkSizeOptions) => {
      const bytes = parseBytes(opts.size);
      const p = Number(opts.relays);
      if (!Number.isInteger(p) || p < 2) throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--relays must be an integer >= 2 (the master counts)');
      const latency = parseLatency(opts.latency);
      const bandwidth = parseBandwidth(opts.bandwidth);
      if (opts.probe && opts.perChunk !== undefined) throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'give --per-chunk or --probe, not both');
      let probe: ChunkProbeResult | null = null;
      if (opts.probe) probe = await runProbe(opts);
      const perChunk = probe ? probe.perChunk : opts.perChunk !== undefined ? parseLatency(opts.perChunk) : 0;
      const link = { bandwidth, startup: latency + perChunk };
      const best = optimalChunkSize(p, bytes, link);
      const bestK = Math.ceil(bytes / best);
      const defaultK = Math.ceil(bytes / DEFAULT_CHUNK_SIZE);
      // What a relay's --chunk-size auto makes of the same inputs (bounded to 1-32 MiB, page multiples).
      const auto = chooseChunkSize(bytes, p, link);
      const result = {
        size_bytes: bytes,
        relays: p,
        bandwidth_Bps: link.bandwidth,
        latency_s: latency,
        per_chunk_s: perChunk,
        probe: probe && {
          bytes: probe.bytes,
          timings: probe.timings.map((t) => ({ chunk_bytes: t.chunkSize, chunks: t.chunks, seconds: t.seconds, median_s: t.median })),
        },
        tstart_s: link.startup,
        optimal_chunks_model: optimalChunkCount(p, bytes, link),
        optimal_chunk_bytes: best,
        t_optimal_s: broadcastTime(p, bestK, bytes, link),
        auto_chunk_bytes: auto.chunkSize,
        t_auto_s: auto.modelSeconds,
        default_chunk_bytes: DEFAULT_CHUNK_SIZE,
        t_default_s: broadcastTime(p, defaultK, bytes, link),
        t_one_link_s: bytes / link.bandwidth,
      };
      if (opts.json) {
        process.stdout.write(`${JSON.stringify(result)}\n`);
        return;
      }
      const probeText = probe
        ? `a relay's cost per chunk on this host: ${(perChunk * 1e6).toFixed(0)} us (${probe.timings.map((t) => `${t.chunks} x ${formatBytes(t.chunkSize)} in ${t.median.toFixed(3)} s`).join(' against ')})\n`
        : '';
      process.stdout.write(
        probeText +
          `optimal chunk: ${formatBytes(best)} (${bestK} chunks) -> T = ${result.t_optimal_s.toFixed(3)} s\n` +
          `a relay's --chunk-size auto (the default; 1-32 MiB, 2 MiB multiples): ${formatBytes(auto.chunkSize)} (${auto.chunks} chunks) -> T = ${auto.modelSeconds.toFixed(3)} s\n` +
          `32 MiB, the fixed default before auto: ${defaultK} chunks -> T = ${result.t_default_s.toFixed(3)} s\n` +
          `one link alone (M/B): ${result.t_one_link_s.toFixed(3)} s\n` +
          `relays choose by default (laminar relay --link-bandwidth ${opts.bandwidth} --chunk-cost ${Math.round(link.startup * 1e6)}us gives them these inputs), or fix it: laminar relay --chunk-size ${best}\n` +
          (perChunk === 0 && !probe
            ? "note: T_start counts the link's latency alone; a relay's own cost per chunk (--per-chunk, or --probe to measure it) argues for larger chunks\n"
            : ''),
      );
    });
}

async function runProbe(opts: ChunkSizeOptions): Promise<ChunkProbeResult> {
  const bytes = parseBytes(opts.probeSize);
  const rounds = Number(opts.probeRounds);
  if (!Number.isInteger(rounds) || rounds < 1 || rounds > 20)
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--probe-rounds must be an integer in 1..20, got ${JSON.stringify(opts.probeRounds)}`);
  if (bytes < 2 * PROBE_CHUNK_SIZES[1])
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--probe-size must be at least ${formatBytes(2 * PROBE_CHUNK_SIZES[1])} (two of the larger chunks)`);
  // Ctrl-C stops the probe's relays and removes their segments before the command ends.
  const abort = new AbortController();
  const onSignal = (): void => abort.abort(new LaminarError(ErrorCodes.ABORTED, 'the probe was interrupted'));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    return await probeChunkCost({
      bytes,
      rounds,
      shmBase: opts.shmDir,
      signal: abort.signal,
      onProgress: (text) => process.stderr.write(`probe: ${text}\n`),
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
