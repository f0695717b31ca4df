/**
 * `npm run bench -- delta-chain [--size 512MiB] [--rate 2gbit] [--relays 4] [--changed 0.02]
 *                               [--rounds 3] [--chunk-size 16MiB] [--delta auto|on] [--cold]`
 *
 * Delta broadcast down the chain (src/relay/broadcast/delta/) on the multi-host testbed
 * (scripts/testbed.sh: one network namespace per host, each host's egress shaped with tc to
 * --rate), against the full broadcast of the same versions on the same links in the same run.
 * Needs root.
 *
 * Each round starts fresh relays (`--delta off`, then `--delta auto`, the default, or `on` to
 * encode every chunk whatever auto would choose), publishes
 * version 1 at the master (full everywhere: nobody holds a base), then version 2, in which
 * --changed of the bf16 words (2-byte words, spread evenly over the version, their low byte
 * changed: what an optimizer step at an RL learning rate does to most weights) differ from
 * version 1, and times version 2 from the moment the master serves it to the moment the last
 * relay reports it complete. The chunk size is fixed (--chunk-size, the same for both versions),
 * as it is in a job once the relays' chunk model has settled. Version 2 is published once every
 * relay is idle with a spare segment ready, as the broadcast bench's steady state does: in a
 * job every version after the second arrives into the pages of the version that retired (and a
 * relay prepares a spare between steps), so a fresh allocation is what only a relay's second
 * version pays. --cold publishes version 2 at once instead, every relay allocating its segment
 * (the same for the full and the delta rounds).
 *
 *   delta_broadcast_over_full  the time of version 2 with deltas over its time in full (median
 *                              of the rounds);
 *   delta_wire_fraction        bytes the tail received on the wire for version 2 over the bytes
 *                              of its chunks (from the relay's own counters).
 *
 * Prints a table, then one JSON line (the last line of stdout): {"bench":"delta-chain",...}.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { setMaxListeners } from 'node:events';
import { makeTensors, type Tensors } from '../src/cli/chunk-probe.js';
import { parseBytes } from '../src/common/units.js';
import type { DeltaCounts } from '../src/relay/protocol/status.js';
import { startRelay, stopRelays, waitForChain, waitForIdleSpares, watchFor, withTimeout, type RelayProc, type RelaySettings } from './broadcast/relays.js';
import { stat } from './broadcast/report.js';
import { Resources, TESTBED, upTestbed } from './broadcast/testbed.js';
import { printTable, round } from './support.js';

const USAGE = `usage: npm run bench -- delta-chain [options]   (root)

  --size <bytes>        version size (default 512MiB)
  --rate <bandwidth>    link rate of each testbed host, tc syntax (default 2gbit)
  --relays <p>          relays in the chain, the master included (default 4)
  --changed <fraction>  share of the bf16 words version 2 changes (default 0.02)
  --chunk-size <bytes>  the relays' --chunk-size (default 16MiB)
  --rounds <n>          rounds of each mode; the median and range are reported (default 3)
  --delta <auto|on>     the relays' --delta for the delta rounds (default auto)
  --cold                publish version 2 as soon as version 1 is everywhere, before the relays
                        have spare segments (every relay allocates version 2's segment)
`;

/** First port of the relays; each round takes the next (a closed listener leaves TIME_WAIT behind). */
let nextPort = 13437;

interface Timed {
  seconds: number;
  /** What the tail received for version 2. */
  tail: DeltaCounts;
}

/** Version 2's data: version 1's with `changed` of its 2-byte words' low byte altered, evenly spread. */
function nextVersion(tensors: Tensors, changed: number): Tensors {
  const stride = Math.max(1, Math.round(1 / changed));
  return tensors.map((t) => {
    const data = Uint8Array.from(t.data);
    // Little-endian bf16: the low byte is the mantissa's end, what a small update moves.
    for (let word = stride >> 1; 2 * word < data.length; word += stride) data[2 * word] = data[2 * word]! ^ 0x01;
    return { ...t, data };
  });
}

function minus(a: DeltaCounts, b: DeltaCounts): DeltaCounts {
  return {
    chunks: { same: a.chunks.same - b.chunks.same, sparse: a.chunks.sparse - b.chunks.sparse, full: a.chunks.full - b.chunks.full },
    fullBytes: a.fullBytes - b.fullBytes,
    wireBytes: a.wireBytes - b.wireBytes,
  };
}

/** Publishes `tensors` as `version` at the master; seconds from its being served there to the last relay complete. */
async function timedVersion(relays: RelayProc[], version: number, tensors: Tensors, timeoutMs: number, signal: AbortSignal): Promise<number> {
  const watches = relays.slice(1).map((r) => watchFor(r, version, signal));
  await Promise.all(watches.map((w) => w.ready));
  await (
    await relays[0]!.client.publish({ model: 'bench/broadcast', version, tensors })
  ).visible;
  const t0 = performance.now();
  const ends = await withTimeout(Promise.all(watches.map((w) => w.done)), timeoutMs, `the broadcast of version ${version}`, relays);
  return (Math.max(...ends) - t0) / 1e3;
}

async function tailCounts(relays: RelayProc[]): Promise<DeltaCounts> {
  const delta = (await relays[relays.length - 1]!.client.status()).broadcast?.delta;
  if (!delta) throw new Error('the tail relay reports no delta counters (an older build?)');
  return delta.in;
}

/** One round of one mode: fresh relays, version 1, then (once they hold spares, unless `cold`) version 2 timed. */
async function oneRound(
  res: Resources,
  settings: RelaySettings,
  hosts: { id: string; address: string; ns: string }[],
  versions: { v1: Tensors; v2: Tensors; cold: boolean },
  timeoutMs: number,
): Promise<Timed> {
  const { v1, v2 } = versions;
  const port = nextPort++;
  const members = hosts.map((h) => ({ ...h, address: `${h.address}:${port}` }));
  const peers = members.map(({ id, address }) => ({ id, address }));
  const relays = await Promise.all(members.map((m) => startRelay(res, settings, m, peers)));
  const abort = new AbortController();
  setMaxListeners(0, abort.signal);
  try {
    await waitForChain(relays);
    await timedVersion(relays, 1, v1, timeoutMs, abort.signal);
    if (!versions.cold) await waitForIdleSpares(relays, timeoutMs);
    const before = await tailCounts(relays);
    const seconds = await timedVersion(relays, 2, v2, timeoutMs, abort.signal);
    return { seconds, tail: minus(await tailCounts(relays), before) };
  } finally {
    abort.abort();
    await stopRelays(res, relays);
  }
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      size: { type: 'string', default: '512MiB' },
      rate: { type: 'string', default: '2gbit' },
      relays: { type: 'string', default: '4' },
      changed: { type: 'string', default: '0.02' },
      'chunk-size': { type: 'string', default: '16MiB' },
      rounds: { type: 'string', default: '3' },
      delta: { type: 'string', default: 'auto' },
      cold: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const size = parseBytes(values.size);
  const p = Number(values.relays);
  const changed = Number(values.changed);
  const rounds = Number(values.rounds);
  const chunkSize = parseBytes(values['chunk-size']);
  if (!(Number.isInteger(p) && p >= 2 && p <= 64)) throw new Error(`--relays: 2..64, got ${values.relays}`);
  if (!(changed > 0 && changed <= 1)) throw new Error(`--changed: a fraction in (0, 1], got ${values.changed}`);
  if (!(Number.isInteger(rounds) && rounds >= 1)) throw new Error('--rounds is a positive integer');
  const mode = values.delta;
  if (mode !== 'auto' && mode !== 'on') throw new Error(`--delta: auto or on, got ${mode}`);
  if (process.getuid?.() !== 0 || !existsSync(TESTBED)) {
    process.stderr.write('delta-chain bench: needs root (network namespaces) and scripts/testbed.sh\n');
    process.exitCode = 2;
    return;
  }

  const res = new Resources();
  const onSignal = (signal: NodeJS.Signals): void => {
    res.releaseAll();
    process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
  };
  for (const s of ['SIGINT', 'SIGTERM'] as const) process.on(s, onSignal);
  process.on('exit', () => res.releaseAll());
  const started = performance.now();
  const say = (text: string): void => void process.stderr.write(`[${((performance.now() - started) / 1e3).toFixed(0)} s] ${text}\n`);

  try {
    const { hosts, secretFile } = upTestbed(res, `dc${process.pid % 10000}`, p, values.rate, say);
    const settings = (delta: 'auto' | 'on' | 'off'): RelaySettings => ({ chunkSize, window: 4, secretFile, shmBase: '/dev/shm', delta });
    const v1 = makeTensors(size);
    const versions = { v1, v2: nextVersion(v1, changed), cold: values.cold };
    // At 2 Gbit/s a version takes seconds per hop; ten times the whole chain's worth is a failure.
    const timeoutMs = 60_000 + (10 * p * size * 8e3) / 2e9;

    const full: Timed[] = [];
    const delta: Timed[] = [];
    for (let r = 0; r < rounds; r++) {
      say(`round ${r + 1}/${rounds}: full (--delta off)`);
      full.push(await oneRound(res, settings('off'), hosts, versions, timeoutMs));
      say(`round ${r + 1}/${rounds}: delta (--delta ${mode})`);
      delta.push(await oneRound(res, settings(mode), hosts, versions, timeoutMs));
    }
    const fullS = stat(full.map((t) => t.seconds));
    const deltaS = stat(delta.map((t) => t.seconds));
    const tail = delta[delta.length - 1]!.tail;
    const wireFraction = tail.fullBytes > 0 ? tail.wireBytes / tail.fullBytes : 1;
    const into = values.cold ? 'fresh segments' : 'spare segments';
    printTable(`Delta broadcast: ${p} relays, ${values.rate}, ${values.size}, ${changed * 100} % of bf16 words changed, into ${into} (median of ${rounds})`, [
      ['version 2', 'seconds', 'range', 'tail chunks same/sparse/full', 'wire / full bytes'],
      ['full (--delta off)', String(round(fullS.median)), `${round(fullS.min)}-${round(fullS.max)}`, '-', '1'],
      [
        `delta (--delta ${mode})`,
        String(round(deltaS.median)),
        `${round(deltaS.min)}-${round(deltaS.max)}`,
        `${tail.chunks.same}/${tail.chunks.sparse}/${tail.chunks.full}`,
        String(round(wireFraction, 4)),
      ],
    ]);
    process.stdout.write(
      `${JSON.stringify({
        bench: 'delta-chain',
        relays: p,
        rate: values.rate,
        bytes: size,
        chunk_bytes: chunkSize,
        changed_fraction: changed,
        delta_mode: mode,
        cold: values.cold,
        rounds,
        full_s: round(fullS.median),
        delta_s: round(deltaS.median),
        delta_broadcast_over_full: round(deltaS.median / fullS.median),
        delta_wire_fraction: round(wireFraction, 4),
        tail_chunks: tail.chunks,
      })}\n`,
    );
  } finally {
    res.releaseAll();
  }
}
