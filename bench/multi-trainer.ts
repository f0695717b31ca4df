/**
 * `npm run bench -- multi-trainer [--size 1GiB] [--rate 2gbit] [--hosts 1,2,4] [--rounds 2]
 *                                 [--chunk-size 4MiB] [--tensors 64] [--master gateway|host]`
 *
 * A version published from several trainer hosts at once (relay/parts/), on the multi-host
 * testbed (scripts/testbed.sh: one network namespace per host, every host's link shaped with tc
 * to --rate in both directions). For n = 1, 2, 4 trainer hosts, each host pushes its share of a
 * --size version (n = 1: the whole version, the way one host publishes today; n > 1: part k of
 * n with `pushPart`) to the master relay, all at once.
 *
 * Where the master is (--master):
 *   gateway  the root namespace, at the bridge's address: its link is not shaped, so the master
 *            takes what the trainer hosts send together (a master whose NIC is at least the sum
 *            of theirs, e.g. a rollout host with several);
 *   host     a testbed host of its own, shaped like the others: the master's one link bounds the
 *            push whatever the number of trainer hosts.
 *
 * Each trainer host is a process in its namespace (bench/multi-trainer/part-publisher.ts) that
 * lays its share out first (not timed: the copy out of the trainer's memory is the same work
 * whatever n), then on the bench's word pushes it. Times (Date.now() across processes of one
 * machine):
 *   push           from the word to the master reporting the version complete (a watch on the
 *                  master's socket): the whole push, verification and completion included;
 *   visible_after_last_part_ms  from the last piece any part's publisher saw taken to that report:
 *                  what assembling costs once the bytes are in (the last pieces' checksums, the
 *                  chunks where parts meet read again, the header written, the segment sealed).
 * The median of --rounds rounds; push_4_over_1 = push(4) / push(1) (goal <= 0.35: bounded by
 * the sum of the trainer hosts' links rather than one). Needs root. UCX_TLS=tcp (between
 * namespaces UCX would otherwise take shared memory and bypass the links).
 * Prints a table, then one JSON line {"bench":"multi-trainer",...} (the last line of stdout).
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';
import { parseBandwidth, parseBytes } from '../src/common/units.js';
import { RelayClient } from '../src/relay/client/index.js';
import { claimBed } from '../src/testing/bed-claim.js';
import { createTestbed, type Testbed } from '../src/testing/testbed.js';
import { Resources, inNamespace, ucxEnv } from './broadcast/testbed.js';
import { BENCH_MODEL } from './multi-trainer/part-publisher.js';
import { median, printTable, round } from './support.js';

const CLI = fileURLToPath(new URL('../src/cli/laminar.js', import.meta.url));
const PUBLISHER = fileURLToPath(new URL('./multi-trainer/part-publisher.js', import.meta.url));
const SECRET = 'bench-multi-trainer-secret-0123456789';
const PORT = 13337;

interface Options {
  size: number;
  rate: string;
  hosts: number[];
  rounds: number;
  chunkSize: number;
  tensors: number;
  master: 'gateway' | 'host';
}

function parseOptions(args: string[]): Options {
  const value = (flag: string, fallback: string): string => {
    const i = args.indexOf(flag);
    return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : fallback;
  };
  if (args.includes('--help')) {
    process.stdout.write(
      'npm run bench -- multi-trainer [--size 1GiB] [--rate 2gbit] [--hosts 1,2,4] [--rounds 2] [--chunk-size 4MiB] [--tensors 64] [--master gateway|host]\n',
    );
    process.exit(0);
  }
  const master = value('--master', 'gateway');
  if (master !== 'gateway' && master !== 'host') throw new Error('--master is gateway or host');
  return {
    size: parseBytes(value('--size', '1GiB')),
    rate: value('--rate', '2gbit'),
    hosts: value('--hosts', '1,2,4').split(',').map(Number),
    rounds: Number(value('--rounds', '2')),
    chunkSize: parseBytes(value('--chunk-size', '4MiB')),
    tensors: Number(value('--tensors', '64')),
    master,
  };
}

interface Publisher {
  send(line: string): void;
  next(): Promise<string>;
}

/** Starts a trainer host's publisher in namespace `ns` and waits for its `ready`. */
async function startPublisher(res: Resources, ns: string, address: string, index: number, count: number, o: Options): Promise<Publisher> {
  const args = [PUBLISHER, address, String(index), String(count), String(o.size), String(o.tensors), String(o.chunkSize)];
  const [command, argv] = inNamespace(ns, process.execPath, args);
  // Its own spawn, not res.spawn: the bench talks to it on stdin.
  const child = spawn(command, argv, { env: { ...ucxEnv(), LAMINAR_SECRET: SECRET }, stdio: ['pipe', 'pipe', 'pipe'] });
  res.children.add(child);
  child.once('exit', () => res.children.delete(child));
  child.stderr.on('data', (d: Buffer) => process.stderr.write(`[publisher ${index + 1}/${count}] ${d.toString()}`));
  child.stdin.on('error', () => undefined);
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const publisher: Publisher = {
    send: (line) => child.stdin.write(`${line}\n`),
    next: async () => {
      const next = await lines.next();
      if (next.done === true) throw new Error(`publisher ${index + 1}/${count} ended (exit ${child.exitCode ?? child.signalCode ?? 'none'})`);
      return next.value;
    },
  };
  const first = await publisher.next();
  if (first !== 'ready') throw new Error(`publisher ${index + 1}/${count} said ${first}`);
  return publisher;
}

/** The master relay in `ns` (null: the root namespace), listening on `address`. */
async function startMaster(res: Resources, ns: string | null, address: string, o: Options): Promise<RelayClient> {
  const root = res.tempDir('/dev/shm/laminar-bench-multi-');
  const secretFile = join(root, 'secret');
  writeFileSync(secretFile, SECRET);
  const socketPath = join(root, 'relay.sock');
  const args = [CLI, 'relay', '--id', 'master', '--shm-dir', join(root, 'segments'), '--socket', socketPath, '--listen', `${address}:${PORT}`];
  args.push(
    '--secret-file',
    secretFile,
    '--chunk-size',
    String(o.chunkSize),
    '--no-pin',
    '--keep-versions',
    '0',
    '--metrics-port',
    '-1',
    '--log-level',
    'warn',
  );
  const [command, argv] = inNamespace(ns, process.execPath, args);
  const child = res.spawn(command, argv, ucxEnv());
  child.stderr?.on('data', (d: Buffer) => process.stderr.write(`[master] ${d.toString()}`));
  for (let i = 0; ; i++) {
    try {
      return await RelayClient.connect({ socketPath, name: 'bench-multi-trainer', reconnect: false });
    } catch (err) {
      if (i > 400 || child.exitCode !== null) throw new Error(`the master did not start: ${(err as Error).message}`);
      await delay(50);
    }
  }
}

interface CaseResult {
  hosts: number;
  pushMs: number;
  visibleAfterLastPartMs: number;
}

/** One push of `version` by `publishers` together; resolves with its times. */
async function pushOnce(master: RelayClient, publishers: Publisher[], version: number): Promise<CaseResult> {
  for (const p of publishers) p.send(`prepare ${version}`);
  for (const p of publishers) if ((await p.next()) !== 'prepared') throw new Error('a publisher did not prepare');
  const controller = new AbortController();
  const watch = master.watch({ model: BENCH_MODEL, signal: controller.signal })[Symbol.asyncIterator]();
  await master.status(); // the watch is in place once status answers (one connection, in order)
  const visible = (async () => {
    for (;;) {
      const next = await watch.next();
      if (next.done === true) throw new Error('the watch ended');
      if (next.value.version >= version) return Date.now();
    }
  })();
  const go = Date.now();
  for (const p of publishers) p.send('push');
  const reports = (await Promise.all(publishers.map(async (p) => JSON.parse(await p.next()) as { started?: number; lastPiece?: number; error?: string }))).map(
    (r) => {
      if (r.error !== undefined) throw new Error(`a publisher failed: ${r.error}`);
      return r as { started: number; lastPiece: number };
    },
  );
  const visibleAt = await visible;
  controller.abort();
  const lastPiece = Math.max(...reports.map((r) => r.lastPiece));
  return { hosts: publishers.length, pushMs: visibleAt - go, visibleAfterLastPartMs: visibleAt - lastPiece };
}

export async function run(args: string[]): Promise<void> {
  const o = parseOptions(args);
  const res = new Resources();
  const cleanup = (): void => res.releaseAll();
  process.once('SIGINT', () => {
    cleanup();
    process.exit(130);
  });
  process.once('exit', cleanup);
  const most = Math.max(...o.hosts);
  const claim = claimBed('mt');
  let bed: Testbed | null = null;
  try {
    bed = createTestbed(claim, most + (o.master === 'host' ? 1 : 0), { rate: o.rate });
    res.beds.add(bed.name);
    const masterHost = o.master === 'host' ? bed.hosts[most]! : null;
    const masterAddress = masterHost?.address ?? bed.gateway;
    const master = await startMaster(res, masterHost?.netns ?? null, masterAddress, o);
    const results: CaseResult[][] = o.hosts.map(() => []);
    let version = 1;
    for (const [c, n] of o.hosts.entries()) {
      const publishers = await Promise.all(Array.from({ length: n }, (_, k) => startPublisher(res, bed!.hosts[k]!.netns, `${masterAddress}:${PORT}`, k, n, o)));
      // A first push untimed: the master's spare segment, the links' first connections.
      await pushOnce(master, publishers, version++);
      for (let r = 0; r < o.rounds; r++) {
        const result = await pushOnce(master, publishers, version++);
        results[c]!.push(result);
        process.stderr.write(`  ${n} host(s), round ${r + 1}: push ${result.pushMs} ms, visible ${result.visibleAfterLastPartMs} ms after the last part\n`);
      }
      for (const p of publishers) p.send('quit');
    }
    master.close();
    const summary = o.hosts.map((n, c) => ({
      hosts: n,
      push_ms: median(results[c]!.map((x) => x.pushMs)),
      push_ms_range: [Math.min(...results[c]!.map((x) => x.pushMs)), Math.max(...results[c]!.map((x) => x.pushMs))],
      visible_after_last_part_ms: median(results[c]!.map((x) => x.visibleAfterLastPartMs)),
      mb_per_s: round(o.size / 1e6 / (median(results[c]!.map((x) => x.pushMs)) / 1e3), 1),
    }));
    const of = (n: number): number | null => summary.find((s) => s.hosts === n)?.push_ms ?? null;
    const one = of(1);
    const four = of(4);
    const two = of(2);
    const link = parseBandwidth(o.rate);
    printTable(`multi-trainer: ${o.size} bytes, links ${o.rate}, master at the ${o.master}`, [
      ['trainer hosts', 'push (ms)', 'range', 'MB/s', 'visible after last part (ms)'],
      ...summary.map((s) => [String(s.hosts), String(s.push_ms), s.push_ms_range.join('-'), String(s.mb_per_s), String(s.visible_after_last_part_ms)]),
    ]);
    const json = {
      bench: 'multi-trainer',
      size_bytes: o.size,
      rate: o.rate,
      master: o.master,
      chunk_bytes: o.chunkSize,
      rounds: o.rounds,
      one_link_ms: round((o.size / link) * 1e3, 0),
      cases: summary,
      push_2_over_1: one !== null && two !== null ? round(two / one, 3) : null,
      push_4_over_1: one !== null && four !== null ? round(four / one, 3) : null,
      visible_after_last_part_ms: median(summary.filter((s) => s.hosts > 1).map((s) => s.visible_after_last_part_ms)),
    };
    process.stdout.write(`${JSON.stringify(json)}\n`);
  } finally {
    cleanup();
    claim.release();
  }
}
