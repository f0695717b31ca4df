/**
 * The FP8 part of `npm run bench -- fp8` that needs the multi-host testbed (root): where to
 * convert, measured. On the testbed of the delta-chain bench (scripts/testbed.sh: one network
 * namespace per host, each host's egress shaped with tc to --rate), fresh relays per round, the
 * same bf16 version published at the master under each `--fp8-broadcast` mode:
 *
 *   off   bf16 down the chain, each relay converts on request: the bf16 broadcast's time
 *         (`bf16_s`), then the tail's conversion of it (`relay_convert_s`);
 *   only  the master converts and broadcasts the FP8 version alone: from the bf16 version served
 *         at the master to its FP8 version complete there (`master_convert_s`), and to the FP8
 *         version complete at the last relay (`fp8_s`); the FP8 version's broadcast is the time
 *         between, timed as the bf16 one is: from the version served at the master to the last
 *         relay holding it;
 *   also  both go down: when the FP8 version, and then the bf16 one, are complete everywhere.
 *
 * As in the delta-chain bench, version 1 fills the relays, version 2 (timed) comes once every
 * relay is idle with a spare segment (a job's steady state), with `--delta off`: the versions
 * are equal, and a delta would carry nothing.
 */
import { setMaxListeners } from 'node:events';
import { existsSync } from 'node:fs';
import type { Fp8BroadcastMode } from '../src/relay/fp8/broadcast.js';
import { fp8ModelId } from '../src/relay/fp8/model-id.js';
import {
  MODEL,
  startRelay,
  stopRelays,
  waitForChain,
  waitForIdleSpares,
  watchFor,
  withTimeout,
  type RelayProc,
  type RelaySettings,
} from './broadcast/relays.js';
import { stat } from './broadcast/report.js';
import { Resources, TESTBED, upTestbed, type TestbedHost } from './broadcast/testbed.js';

export interface ChainOptions {
  /** bf16 bytes of the version (whole 4096x4096 tensors). */
  bytes: number;
  rate: string;
  relays: number;
  rounds: number;
  chunkSize: number;
  /** The version's tensors' data (one 4096x4096 bf16 tensor, repeated). */
  tensor: Uint16Array;
  say: (text: string) => void;
}

/**
 * A mode of the chain probe: an `--fp8-broadcast` mode, or `pair`: two bf16 models published at
 * once under `off` (the second of half the bytes, as an FP8 version is), which is `also` without
 * the master's conversion: whether two versions on one link are slow by themselves.
 */
export type ChainMode = Fp8BroadcastMode | 'pair';

/** The second model of `pair`. */
const PAIR_MODEL = `${MODEL}-pair`;

export interface ChainFigures {
  /** off: the bf16 version served at the master to complete at the last relay. */
  bf16_s: number;
  /** off: the tail's conversion, asked once it holds the bf16 version. */
  relay_convert_s: number;
  /** only: the bf16 version served at the master to its FP8 version complete there (the conversion). */
  master_convert_s: number;
  /** only: the bf16 version served at the master to the FP8 version complete at the last relay. */
  fp8_s: number;
  also_fp8_s: number;
  also_bf16_s: number;
  /** The FP8 version's broadcast (served at the master to complete at the last relay) over the bf16 version's (medians). */
  fp8_broadcast_over_bf16: number;
  /** From the bf16 version served at the master to FP8 everywhere, conversion included, over the bf16 broadcast. */
  fp8_with_conversion_over_bf16: number;
  /** FP8 everywhere: converted at each relay after the bf16 broadcast, over converted once at the master and broadcast. */
  relay_convert_over_master: number;
}

const SIDE = 4096;

/** When a model's version was complete, in seconds from the bf16 version served at the master: there, and at the last relay. */
export interface Arrival {
  master: number;
  last: number;
}

/** Publishes `version` at the master and times each model watched (at every relay). */
async function timed(relays: RelayProc[], version: number, tensors: Tensor[], models: string[], timeoutMs: number, pair = false): Promise<Arrival[]> {
  const abort = new AbortController();
  setMaxListeners(0, abort.signal);
  try {
    const watches = models.map((model) => relays.map((r) => watchFor(r, version, abort.signal, model)));
    await Promise.all(watches.flat().map((w) => w.ready));
    const published = [relays[0]!.client.publish({ model: MODEL, version, tensors })];
    if (pair) published.push(relays[0]!.client.publish({ model: PAIR_MODEL, version, tensors: tensors.slice(0, Math.max(1, tensors.length >> 1)) }));
    await Promise.all((await Promise.all(published)).map((p) => p.visible));
    const t0 = performance.now();
    return await withTimeout(
      Promise.all(
        watches.map(async ([master, ...rest]) => ({
          master: Math.max(0, (await master!.done) - t0) / 1e3,
          last: (Math.max(...(await Promise.all(rest.map((w) => w.done)))) - t0) / 1e3,
        })),
      ),
      timeoutMs,
      `the broadcast of version ${version}`,
      relays,
    );
  } finally {
    abort.abort();
  }
}

type Tensor = { name: string; dtype: 'BF16'; shape: number[]; data: Uint16Array };

/** One round of one mode on fresh relays: the seconds of each model watched, and (off) the tail's conversion. */
async function oneRound(
  res: Resources,
  settings: RelaySettings,
  hosts: TestbedHost[],
  mode: ChainMode,
  tensors: Tensor[],
  timeoutMs: number,
  port: number,
): Promise<{ arrivals: Arrival[]; convert: number | null }> {
  const members = hosts.map((h) => ({ ...h, address: `${h.address}:${port}` }));
  const peers = members.map(({ id, address }) => ({ id, address }));
  const relays: RelayProc[] = [];
  // --peers chains start one by one, in chain order (CONTRIBUTING.md, "Daemons side by side").
  try {
    const fp8Mode = mode === 'pair' ? 'off' : mode;
    for (const m of members) relays.push(await startRelay(res, { ...settings, extraArgs: ['--fp8-broadcast', fp8Mode] }, m, peers));
    await waitForChain(relays);
    const models = { off: [MODEL], only: [fp8ModelId(MODEL)], also: [fp8ModelId(MODEL), MODEL], pair: [PAIR_MODEL, MODEL] }[mode];
    await timed(relays, 1, tensors, models, timeoutMs, mode === 'pair');
    await waitForIdleSpares(relays, timeoutMs);
    const arrivals = await timed(relays, 2, tensors, models, timeoutMs, mode === 'pair');
    let convert: number | null = null;
    if (mode === 'off') {
      const t0 = performance.now();
      const lease = await relays[relays.length - 1]!.client.acquire({ model: fp8ModelId(MODEL), version: 2, timeoutMs });
      convert = (performance.now() - t0) / 1e3;
      await lease.release();
    }
    return { arrivals, convert };
  } finally {
    await stopRelays(res, relays);
  }
}

/** Each mode's rounds: the arrivals of each model watched, per round, and the tail's conversions (off). */
export interface ChainRuns {
  runs: Record<ChainMode, Arrival[][]>;
  converts: number[];
}

/**
 * Runs `options.rounds` rounds of each of `modes` on the testbed (fresh relays per round), or
 * says why it could not (not root, no testbed script). A probe of some modes only (`pair` and
 * `also`, say) calls this from a script of its own: the `pair` figures in docs/performance/relay.md
 * ("FP8 variants") came so, `chainRuns({ bytes, rate: '2gbit', relays: 4, ... }, ['off', 'pair', 'also'])`.
 */
export async function chainRuns(options: ChainOptions, modes: readonly ChainMode[]): Promise<ChainRuns | { skipped: string }> {
  if (process.getuid?.() !== 0 || !existsSync(TESTBED)) return { skipped: 'needs root (network namespaces) and scripts/testbed.sh' };
  const res = new Resources();
  const onSignal = (signal: NodeJS.Signals): void => {
    res.releaseAll();
    process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
  };
  for (const s of ['SIGINT', 'SIGTERM'] as const) process.on(s, onSignal);
  try {
    const p = options.relays;
    const { hosts, secretFile } = upTestbed(res, `f8${process.pid % 10000}`, p, options.rate, options.say);
    const settings: RelaySettings = { chunkSize: options.chunkSize, window: 4, secretFile, shmBase: '/dev/shm', delta: 'off' };
    const count = Math.max(1, Math.round(options.bytes / (SIDE * SIDE * 2)));
    const tensors: Tensor[] = Array.from({ length: count }, (_, i) => ({
      name: `model.layers.${i}.mlp.up_proj.weight`,
      dtype: 'BF16',
      shape: [SIDE, SIDE],
      data: options.tensor,
    }));
    const timeoutMs = 60_000 + (10 * p * options.bytes * 8e3) / 2e9;
    let port = 13537;
    const runs: Record<ChainMode, Arrival[][]> = { off: [], only: [], also: [], pair: [] };
    const converts: number[] = [];
    for (let r = 0; r < options.rounds; r++) {
      for (const mode of modes) {
        options.say(`round ${r + 1}/${options.rounds}: ${mode === 'pair' ? 'two bf16 models at once' : `--fp8-broadcast ${mode}`}`);
        const { arrivals, convert } = await oneRound(res, settings, hosts, mode, tensors, timeoutMs, port++);
        options.say(`  ${JSON.stringify(arrivals)}`);
        runs[mode].push(arrivals);
        if (convert !== null) converts.push(convert);
      }
    }
    return { runs, converts };
  } finally {
    res.releaseAll();
    for (const s of ['SIGINT', 'SIGTERM'] as const) process.removeListener(s, onSignal);
  }
}

/** The figures, or why they could not be measured (not root, no testbed script). */
export async function chainFigures(options: ChainOptions): Promise<ChainFigures | { skipped: string }> {
  const measured = await chainRuns(options, ['off', 'only', 'also']);
  if ('skipped' in measured) return measured;
  const { runs, converts } = measured;
  const med = (xs: number[]): number => stat(xs).median;
  const bf16 = med(runs.off.map((a) => a[0]!.last));
  const fp8 = med(runs.only.map((a) => a[0]!.last));
  const fp8Broadcast = med(runs.only.map((a) => a[0]!.last - a[0]!.master));
  const convert = med(converts);
  return {
    bf16_s: bf16,
    relay_convert_s: convert,
    master_convert_s: med(runs.only.map((a) => a[0]!.master)),
    fp8_s: fp8,
    also_fp8_s: med(runs.also.map((a) => a[0]!.last)),
    also_bf16_s: med(runs.also.map((a) => a[1]!.last)),
    fp8_broadcast_over_bf16: fp8Broadcast / bf16,
    fp8_with_conversion_over_bf16: fp8 / bf16,
    relay_convert_over_master: (bf16 + convert) / fp8,
  };
}
