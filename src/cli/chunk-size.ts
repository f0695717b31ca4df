/** `laminar chunk-size`: the broadcast chunk size that minimises appendix C's T(p, k). */
import { Command } from 'commander';
import { formatBytes, parseBandwidth, parseBytes, parseLatency } from '../common/units.js';
import { broadcastTime, optimalChunkCount, optimalChunkSize } from '../relay/broadcast/chunk-model.js';
import { DEFAULT_CHUNK_SIZE } from '../relay/options.js';

export function chunkSizeCommand(): Command {
  return new Command('chunk-size')
    .description('the broadcast chunk size minimising T(p,k) = (p+k-2)(M/k*T_byte + T_start) for a measured link (Laminar appendix C)')
    .requiredOption('--size <bytes>', 'bytes of one version (M), e.g. 15GiB')
    .requiredOption('--relays <p>', 'relays in the chain, the master included (p)')
    .requiredOption('--bandwidth <rate>', 'measured bandwidth of one link, e.g. 100gbit or 11GB/s (ucx_perftest -t tag_bw)')
    .requiredOption('--latency <time>', 'measured start-up latency of one message, e.g. 5us (ucx_perftest -t tag_lat)')
    .option('--per-chunk <time>', "a relay's own cost per chunk, added to --latency in T_start (npm run bench -- broadcast --chunk-size auto measures it)", '0us')
    .option('--json', 'print the result as JSON')
    .action((opts: { size: string; relays: string; bandwidth: string; latency: string; perChunk: string; json?: boolean }) => {
      const bytes = parseBytes(opts.size);
      const p = Number(opts.relays);
      if (!Number.isInteger(p) || p < 2) throw new Error('--relays must be an integer >= 2 (the master counts)');
      const latency = parseLatency(opts.latency);
      const perChunk = parseLatency(opts.perChunk);
      const link = { bandwidth: parseBandwidth(opts.bandwidth), startup: latency + perChunk };
      const best = optimalChunkSize(p, bytes, link);
      const bestK = Math.ceil(bytes / best);
      const defaultK = Math.ceil(bytes / DEFAULT_CHUNK_SIZE);
      const result = {
        size_bytes: bytes,
        relays: p,
        bandwidth_Bps: link.bandwidth,
        latency_s: latency,
        per_chunk_s: perChunk,
        tstart_s: link.startup,
        optimal_chunks_model: optimalChunkCount(p, bytes, link),
        optimal_chunk_bytes: best,
        t_optimal_s: broadcastTime(p, bestK, bytes, link),
        default_chunk_bytes: DEFAULT_CHUNK_SIZE,
        t_default_s: broadcastTime(p, defaultK, bytes, link),
        t_one_link_s: bytes / link.bandwidth,
      };
      if (opts.json) {
        process.stdout.write(`${JSON.stringify(result)}\n`);
        return;
      }
      process.stdout.write(
        `optimal chunk: ${formatBytes(best)} (${bestK} chunks) -> T = ${result.t_optimal_s.toFixed(3)} s\n` +
          `default chunk: ${formatBytes(DEFAULT_CHUNK_SIZE)} (${defaultK} chunks) -> T = ${result.t_default_s.toFixed(3)} s\n` +
          `one link alone (M/B): ${result.t_one_link_s.toFixed(3)} s\n` +
          `use it with: laminar relay --chunk-size ${best}\n` +
          (perChunk === 0 ? "note: T_start counts the link's latency alone; a relay's own cost per chunk (--per-chunk, which npm run bench -- broadcast --chunk-size auto measures) argues for larger chunks\n" : ''),
      );
    });
}
