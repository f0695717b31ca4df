/**
 * `npm run bench -- broadcast [--size 1GiB] [--rate 2gbit] [--relays 2,4,8] [--chunk-size 32MiB|auto]
 *                             [--window 4] [--rounds 3] [--delay 0ms] [--mtu 1500]
 *                             [--skip star,loopback]`
 *
 * The chain-pipelined broadcast between relays, on the multi-host testbed (scripts/testbed.sh:
 * one network namespace per host, each host's egress shaped with tc to --rate), against the raw
 * limit of the same links measured in the same run with ucx_perftest, and against the model of
 * the paper's appendix C (src/relay/broadcast/chunk-model.ts). Needs root and ucx_perftest.
 *
 * p counts the relays taking part, the master included: p = 2 is a single hop.
 *   T_p2p       master -> r1, one hop (the chain with p = 2);
 *   T_chain(p)  master -> r1 -> ... -> r(p-1), each relay forwarding a chunk once it verified it;
 *   T_star(p)   the naive way: the master sends the whole version to r1, then to r2, ... (plan
 *               [master, ri] applied at the master under a newer epoch once ri has it all);
 *   model       T(p, k) = (p + k - 2) * (M/k * T_byte + T_start), with T_byte = 1 / perftest's
 *               tag bandwidth and T_start = perftest's tag latency (median one-way), k = chunks;
 *               with --chunk-size auto, T_start also counts a relay's own cost per chunk,
 *               probed first: one loopback hop of 1 GiB (at most --size) in 1 MiB and in
 *               16 MiB chunks, the difference of the times over the difference of the chunk
 *               counts.
 * Every time runs from the moment publish() returns (the version is committed at the master) to
 * the moment the last relay reports the version complete (a watch on each relay's own socket).
 * Each chain round starts fresh relays (empty shared memory) and times two versions: the first,
 * whose segments every relay must allocate, and the second, which arrives (as every version
 * after the first in training) into the spare segment each relay prepared while idle. The
 * steady state is the headline figure; the first version is shown beside it. Rounds give the
 * median and the range, as the machine may be shared.
 *
 * Every host's kernel here shares the machine's cores, and a veth link does in software, per
 * packet, what a real NIC offloads: --mtu (default 1500) sets the links' MTU, to see how much of
 * a chain's cost on a small machine is per-packet kernel work (jumbo frames: 9000).
 *
 * UCX_TLS=tcp for every relay and every ucx_perftest: between network namespaces of one machine
 * UCX otherwise picks its shared-memory transports (posix/sysv/cma), which bypass the shaped
 * links altogether. Other UCX_* variables in the environment pass through (to study tuning).
 * ucx_perftest prints MiB/s; everything here is MB/s (10^6 bytes/s), computed as bytes / time.
 *
 * The raw link, host 2 -> host 1: ucx_perftest tag_bw carrying the same traffic as one hop (the
 * chunk size as message size, --window messages in flight with -O, as many messages as the
 * version has chunks but at least 16, an eighth more as warm-up), tag_lat for T_start (8 bytes,
 * the median one-way latency: perftest spins on both sides, and where it shares cores with other
 * work its average is mostly scheduling delay), and a plain kernel TCP stream of the same bytes.
 * Both perftest processes busy-poll: on a machine with few cores and other load they compete
 * with the kernel's packet processing, and their bandwidth varies much more than TCP's.
 * CPU columns: /proc/stat for the whole machine, /proc/<pid>/stat for each relay, over the
 * broadcast only.
 *
 * Loopback: one hop between two relays on 127.0.0.1 (no namespaces, no shaping, UCX_TLS=tcp)
 * against ucx_perftest over the same transport: how much of the raw UCX/TCP speed relays keep.
 * Prints tables, then one JSON line (the last line of stdout).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { setMaxListeners } from 'node:events';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { broadcastTime, optimalChunkSize, type LinkModel } from '../src/relay/broadcast/chunk-model.js';
import { makeTensors, probeChunkCost, type ChunkProbeResult, type Tensors } from '../src/cli/chunk-probe.js';
import { RelayClient } from '../src/relay/client/relay-client.js';
import { formatBytes, parseBytes } from '../src/common/units.js';
import { median, printTable, processCpuSeconds, round } from './support.js';
import { delay } from '../src/common/concurrency.js';

const CLI = fileURLToPath(new URL('../src/cli/laminar.js', import.meta.url));
const TESTBED = fileURLToPath(new URL('../../scripts/testbed.sh', import.meta.url));
const MODEL = 'bench/broadcast';
/**
 * Each round's relays listen on a new port: a listener closed a moment ago leaves connections in
 * TIME_WAIT on its port, and UCX binds without SO_REUSEADDR.
 */
let nextRelayPort = 13337;
const PERFTEST_PORT = 14000;
/**
 * The per-chunk cost probe of --chunk-size auto carries this many bytes (at most --size): a whole
 * GiB, as the transfer is a small part of a round (relays start in each) and more chunks average
 * out a busy moment of the machine.
 */
const PROBE_BYTES = 2 ** 30;

const USAGE = `usage: npm run bench -- broadcast [options]   (root; needs ucx_perftest)

  --size <bytes>        version size (default 1GiB)
  --rate <bandwidth>    link rate of each testbed host, tc syntax (default 2gbit)
  --delay <ms>          one-way delay added to each link (default 0ms)
  --mtu <bytes>         MTU of the testbed's links (default 1500; jumbo frames: 9000)
  --relays <list>       chain lengths p to measure; p counts the master (p=2: one hop)
                        (default 2,4,8)
  --chunk-size <bytes>  chunk size of the version (relay --chunk-size), or "auto": the model's
                        optimum for the longest chain with the link measured here, T_start
                        being perftest's latency plus a relay's own cost per chunk, probed
                        first on loopback (one hop of 1 GiB, at most --size, in 1 MiB and
                        in 16 MiB chunks)
                        (default 32MiB, the relay's default)
  --window <n>          chunks in flight per link (relay --broadcast-window; default 4, the
                        relay's default)
  --rounds <n>          rounds of each measurement; median and range are reported (default 3)
  --skip <list>         parts to leave out: star, loopback (default none)
  --shm <huge|plain>    where relays keep their segments: a tmpfs mounted with huge=within_size
                        (2 MiB pages, as recommended for production; default) or /dev/shm
                        (4 KiB pages). With huge, the loopback hop is also measured on /dev/shm.

Every relay and ucx_perftest runs with UCX_TLS=tcp (shared memory would bypass the shaped
links); other UCX_* variables of the environment pass through.
`;

// ---- processes, directories and testbeds: released on any exit --------------------------------

class Resources {
  readonly children = new Set<ChildProcess>();
  readonly dirs = new Set<string>();
  readonly beds = new Set<string>();
  readonly mounts = new Set<string>();

  /** Synchronous, so that signal and exit handlers can use it. */
  releaseAll(): void {
    for (const child of this.children) {
      if (child.exitCode === null && child.signalCode === null) {
        try {
          child.kill('SIGKILL');
        } catch {
          // already gone
        }
      }
    }
    this.children.clear();
    for (const dir of this.dirs) rmSync(dir, { recursive: true, force: true });
    this.dirs.clear();
    for (const bed of this.beds) spawnSync('bash', [TESTBED, 'down', bed], { stdio: 'ignore' });
    this.beds.clear();
    for (const mount of this.mounts) {
      spawnSync('umount', ['-l', mount], { stdio: 'ignore' });
      rmSync(mount, { recursive: true, force: true });
    }
    this.mounts.clear();
  }

  /**
   * A tmpfs with 2 MiB pages where the file fits them (huge=within_size), as README recommends
   * for the relays' shm directory; null when the kernel or the machine refuses the mount.
   */
  hugeTmpfs(): string | null {
    const dir = mkdtempSync('/tmp/laminar-bench-huge-');
    const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${totalmem()},huge=within_size,mode=0755`, 'tmpfs', dir], { encoding: 'utf8' });
    if (mounted.status !== 0) {
      rmSync(dir, { recursive: true, force: true });
      return null;
    }
    this.mounts.add(dir);
    return dir;
  }

  spawn(command: string, args: string[], env: NodeJS.ProcessEnv, stdio: 'pipe' | 'ignore' = 'pipe'): ChildProcess {
    const child = spawn(command, args, { env, stdio: ['ignore', stdio, stdio] });
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    child.once('error', () => this.children.delete(child));
    return child;
  }

  tempDir(prefix: string): string {
    const dir = mkdtempSync(prefix);
    this.dirs.add(dir);
    return dir;
  }
}

/** The command line of `command` run in network namespace `ns` (or here when ns is null). */
function inNamespace(ns: string | null, command: string, args: string[]): [string, string[]] {
  return ns === null ? [command, args] : ['ip', ['netns', 'exec', ns, command, ...args]];
}

function ucxEnv(): NodeJS.ProcessEnv {
  return { ...process.env, UCX_TLS: 'tcp' };
}


function exited(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A tc rate ("2gbit", "500mbit", "100kbit", "1000000bit") in bytes per second. */
function parseRate(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)bit\s*$/i.exec(text);
  if (!m) throw new Error(`--rate: a tc rate such as 2gbit or 500mbit, got ${JSON.stringify(text)}`);
  return (Number(m[1]) * { '': 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12 }[m[2]!.toLowerCase() as '' | 'k' | 'm' | 'g' | 't']) / 8;
}

// ---- CPU accounting ---------------------------------------------------------------------------

interface MachineCpu {
  total: number;
  idle: number;
  system: number;
  softirq: number;
}

function machineCpu(): MachineCpu {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
  return { total, idle: v[3]! + v[4]!, system: v[2]!, softirq: v[6]! };
}

interface CpuUse {
  /** Busy fraction of the whole machine (all cores) during the broadcast. */
  machineBusy: number;
  /** Of which kernel time on behalf of processes (copies, page faults, TCP, ...). */
  machineSystem: number;
  /** Of which softirq (the kernel moving packets: veth, bridge, tc, TCP). */
  machineSoftirq: number;
  /** Per relay: cores used on average during the broadcast (1 = one full core). */
  relays: number[];
}

function cpuSampler(pids: (number | undefined)[]): () => CpuUse {
  const t0 = performance.now();
  const m0 = machineCpu();
  const p0 = pids.map(processCpuSeconds);
  return () => {
    const wall = (performance.now() - t0) / 1e3;
    const m1 = machineCpu();
    const total = Math.max(1, m1.total - m0.total);
    return {
      machineBusy: 1 - (m1.idle - m0.idle) / total,
      machineSystem: (m1.system - m0.system) / total,
      machineSoftirq: (m1.softirq - m0.softirq) / total,
      relays: pids.map((pid, i) => (processCpuSeconds(pid) - p0[i]!) / wall),
    };
  };
}

// ---- relays -----------------------------------------------------------------------------------

interface RelayProc {
  id: string;
  address: string;
  root: string;
  child: ChildProcess;
  client: RelayClient;
  log: string[];
}

interface RelaySettings {
  chunkSize: number;
  window: number;
  secretFile: string;
  /** Directory (a tmpfs) the relays' shm directories are made in. */
  shmBase: string;
}

async function startRelay(
  res: Resources,
  settings: RelaySettings,
  member: { id: string; address: string; ns: string | null },
  peers: { id: string; address: string }[],
): Promise<RelayProc> {
  const root = res.tempDir(join(settings.shmBase, 'laminar-bench-bcast-'));
  const socketPath = join(root, 'relay.sock');
  const args = [
    CLI, 'relay',
    '--id', member.id,
    '--shm-dir', join(root, 'segments'),
    '--socket', socketPath,
    '--peers', peers.map((m) => `${m.id}@${m.address}`).join(','),
    '--secret-file', settings.secretFile,
    '--chunk-size', String(settings.chunkSize),
    '--broadcast-window', String(settings.window),
    '--no-pin',
    '--keep-versions', '0',
    '--metrics-port', '-1',
    '--retry-interval', '250ms',
    '--log-level', 'warn',
  ];
  const [command, argv] = inNamespace(member.ns, process.execPath, args);
  const child = res.spawn(command, argv, ucxEnv());
  const log: string[] = [];
  const keep = (data: Buffer): void => {
    log.push(...data.toString('utf8').split('\n').filter((l) => l.length > 0));
    if (log.length > 40) log.splice(0, log.length - 40);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  for (let i = 0; ; i++) {
    try {
      const client = await RelayClient.connect({ socketPath, name: 'bench-broadcast' });
      return { id: member.id, address: member.address, root, child, client, log };
    } catch (err) {
      if (i > 400 || child.exitCode !== null) {
        const exit = child.exitCode ?? child.signalCode;
        throw new RelayStartError(`relay ${member.id} did not start (exit ${exit ?? 'none'}): ${(err as Error).message}\n${log.join('\n')}`);
      }
      await delay(50);
    }
  }
}

/** A relay that died before it served its socket (a crash at start-up): the round is retried. */
class RelayStartError extends Error {}

/** Runs a round; a relay crashing at start-up is reported and the round run again (twice at most). */
async function retried<T>(what: string, crashes: string[], say: (text: string) => void, round: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await round();
    } catch (err) {
      if (!(err instanceof RelayStartError) || attempt >= 2) throw err;
      const first = err.message.split('\n').find((l) => /signal|Segmentation|Error/i.test(l)) ?? err.message.split('\n')[0]!;
      crashes.push(`${what}: ${first.slice(0, 200)}`);
      say(`  a relay died at start-up, running the round again: ${err.message.split('\n')[0]}`);
    }
  }
}

async function stopRelays(res: Resources, relays: RelayProc[]): Promise<void> {
  for (const r of relays) r.client.close();
  for (const r of relays) r.child.kill('SIGTERM');
  await Promise.all(
    relays.map(async (r) => {
      if (!(await exited(r.child, 10_000))) r.child.kill('SIGKILL');
      await exited(r.child, 5_000);
      rmSync(r.root, { recursive: true, force: true });
      res.dirs.delete(r.root);
    }),
  );
}

async function waitUntil(what: string, timeoutMs: number, check: () => Promise<boolean>, relays: RelayProc[]): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) {
      const logs = relays.map((r) => `--- ${r.id}\n${r.log.slice(-10).join('\n')}`).join('\n');
      throw new Error(`timed out waiting for ${what}\n${logs}`);
    }
    await delay(50);
  }
}

/** Waits until each relay of `chain` sends to the next one. */
async function waitForChain(chain: RelayProc[]): Promise<void> {
  await waitUntil(
    'the chain to connect',
    30_000,
    async () => {
      const statuses = await Promise.all(chain.slice(0, -1).map((r) => r.client.status()));
      return statuses.every((s, i) => s.broadcast?.downstream?.id === chain[i + 1]!.id);
    },
    chain,
  );
}

/**
 * Watches `relay` for `version` of the bench model: `ready` once the watch is registered at the
 * relay, `done` with the time (performance.now()) at which the relay reported it complete.
 */
function watchFor(relay: RelayProc, version: number, signal: AbortSignal): { ready: Promise<unknown>; done: Promise<number> } {
  const iterator = relay.client.watch({ model: MODEL, replay: true, signal })[Symbol.asyncIterator]();
  const done = (async () => {
    for (;;) {
      const next = await iterator.next();
      if (next.done) throw new Error(`the watch on ${relay.id} ended before version ${version} completed`);
      if (next.value.version >= version) return performance.now();
    }
  })();
  done.catch(() => undefined);
  // Requests on one connection are handled in order: once status answers, the watch is in place.
  return { ready: relay.client.status(), done };
}

interface Source {
  tensors: Tensors;
  bytes: number;
}

function makeSource(size: number): Source {
  return { tensors: makeTensors(size), bytes: size };
}

interface Round {
  /** Seconds from publish() returning to the last relay complete (chain: the second version). */
  seconds: number;
  /** Chain rounds: the same for the first version, into relays that never held one. */
  firstSeconds?: number;
  /** Per receiving relay (r1, r2, ...): seconds from publish() returning to complete. */
  arrivals: number[];
  cpu: CpuUse;
}

interface Host {
  id: string;
  /** "ip" in a testbed namespace (a port is given per round), "ip:port" on loopback. */
  address: string;
  ns: string | null;
}

function freshPorts(hosts: Host[]): Host[] {
  const port = nextRelayPort++;
  return hosts.map((h) => (h.ns === null ? h : { ...h, address: `${h.address}:${port}` }));
}

/**
 * Chain broadcasts over `hosts` (master first), on fresh relays: version 1 into relays that
 * never held a version, then, once every relay is idle with its spare segment ready, version 2
 * (the steady state of training, where a version of the same size arrives every step).
 */
async function chainRound(res: Resources, settings: RelaySettings, hostsIn: Host[], source: Source, timeoutMs: number): Promise<Round> {
  const hosts = freshPorts(hostsIn);
  const peers = hosts.map(({ id, address }) => ({ id, address }));
  const relays = await Promise.all(hosts.map((h) => startRelay(res, settings, h, peers)));
  const abort = new AbortController();
  setMaxListeners(0, abort.signal); // one watch per relay and version
  try {
    await waitForChain(relays);
    const first = await timedVersion(relays, 1, source, timeoutMs, abort.signal);
    await waitUntil('every relay idle with a spare segment', timeoutMs, async () => {
      const statuses = await Promise.all(relays.map((r) => r.client.status()));
      return statuses.every((s) => s.spares.count >= 1 && s.spares.warming === 0 && !s.broadcast?.receiving.length && !s.broadcast?.downstream?.sending.length);
    }, relays);
    const steady = await timedVersion(relays, 2, source, timeoutMs, abort.signal);
    return { ...steady, firstSeconds: first.seconds };
  } finally {
    abort.abort();
    await stopRelays(res, relays);
  }
}

/** Publishes `version` at the master and times it to the last relay (the bytes differ per version). */
async function timedVersion(relays: RelayProc[], version: number, source: Source, timeoutMs: number, signal: AbortSignal): Promise<Round> {
  const watches = relays.slice(1).map((r) => watchFor(r, version, signal));
  await Promise.all(watches.map((w) => w.ready));
  for (const t of source.tensors) t.data[0] = version;
  await relays[0]!.client.publish({ model: MODEL, version, tensors: source.tensors });
  const t0 = performance.now();
  const sample = cpuSampler(relays.map((r) => r.child.pid));
  const ends = await withTimeout(Promise.all(watches.map((w) => w.done)), timeoutMs, `the chain broadcast of version ${version}`, relays);
  const cpu = sample();
  const arrivals = ends.map((t) => (t - t0) / 1e3);
  return { seconds: Math.max(...arrivals), arrivals, cpu };
}

/**
 * The naive star: the master sends the version to r1 (plan [master, r1]), then to r2 (plan
 * [master, r2] under a newer epoch), and so on; each relay knows only the master.
 */
async function starRound(res: Resources, settings: RelaySettings, hostsIn: Host[], source: Source, timeoutMs: number): Promise<Round> {
  const hosts = freshPorts(hostsIn);
  const master = hosts[0]!;
  const peersOf = (h: Host): { id: string; address: string }[] =>
    h === master ? [{ id: master.id, address: master.address }] : [{ id: master.id, address: master.address }, { id: h.id, address: h.address }];
  const relays = await Promise.all(hosts.map((h) => startRelay(res, settings, h, peersOf(h))));
  const abort = new AbortController();
  const planFor = (i: number): { epoch: number; relays: { id: string; address: string }[] } => ({
    epoch: i + 1,
    relays: [
      { id: master.id, address: master.address },
      { id: hosts[i]!.id, address: hosts[i]!.address },
    ],
  });
  try {
    await relays[0]!.client.setPlan(planFor(1));
    await waitForChain([relays[0]!, relays[1]!]);
    const watches = relays.slice(1).map((r) => watchFor(r, 1, abort.signal));
    await Promise.all(watches.map((w) => w.ready));
    await relays[0]!.client.publish({ model: MODEL, version: 1, tensors: source.tensors });
    const t0 = performance.now();
    const sample = cpuSampler(relays.map((r) => r.child.pid));
    const arrivals: number[] = [];
    for (let i = 1; i < relays.length; i++) {
      if (i > 1) await relays[0]!.client.setPlan(planFor(i));
      const end = await withTimeout(watches[i - 1]!.done, timeoutMs, `the star transfer to ${relays[i]!.id}`, relays);
      arrivals.push((end - t0) / 1e3);
    }
    const cpu = sample();
    return { seconds: arrivals[arrivals.length - 1]!, arrivals, cpu };
  } finally {
    abort.abort();
    await stopRelays(res, relays);
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string, relays: RelayProc[]): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(async () => {
      const statuses = await Promise.all(relays.map((r) => r.client.status().then((s) => JSON.stringify(s.broadcast), (e: Error) => e.message)));
      const detail = relays.map((r, i) => `--- ${r.id}: ${statuses[i]}\n${r.log.slice(-10).join('\n')}`).join('\n');
      reject(new Error(`${what} took more than ${Math.round(ms / 1e3)} s\n${detail}`));
    }, ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// ---- ucx_perftest -----------------------------------------------------------------------------

interface PerftestResult {
  iterations: number;
  /** Latency columns, microseconds (one-way for tag_lat: half the round trip). */
  typicalUs: number;
  averageUs: number;
  /** Overall bandwidth, bytes per second. */
  bandwidth: number;
}

/**
 * Runs ucx_perftest: a server in `serverNs`, a client in `clientNs` connecting to `host`. The
 * server exits after one test, so each call starts its own. "Final:" fields are iterations,
 * typical/average/overall latency (usec), average/overall bandwidth (MiB/s), message rates.
 */
async function perftest(res: Resources, serverNs: string | null, clientNs: string | null, host: string, port: number, args: string[]): Promise<PerftestResult> {
  let lastError = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const [scmd, sargs] = inNamespace(serverNs, 'ucx_perftest', ['-p', String(port)]);
    const server = res.spawn(scmd, sargs, ucxEnv(), 'ignore');
    await delay(300 + attempt * 300);
    const [ccmd, cargs] = inNamespace(clientNs, 'ucx_perftest', [host, '-p', String(port), ...args]);
    const client = res.spawn(ccmd, cargs, ucxEnv());
    let out = '';
    client.stdout?.on('data', (d: Buffer) => (out += d.toString('utf8')));
    client.stderr?.on('data', (d: Buffer) => (out += d.toString('utf8')));
    if (!(await exited(client, 300_000))) client.kill('SIGKILL');
    await exited(client, 5_000);
    if (!(await exited(server, 5_000))) server.kill('SIGKILL');
    const final = /^Final:\s+(.+)$/m.exec(out);
    if (final) {
      const f = final[1]!.trim().split(/\s+/).map(Number);
      return { iterations: f[0]!, typicalUs: f[1]!, averageUs: f[2]!, bandwidth: f[5]! * 2 ** 20 };
    }
    lastError = out.slice(-2000);
  }
  throw new Error(`ucx_perftest ${args.join(' ')} gave no result:\n${lastError}`);
}

/** perftest's tag bandwidth for `total` bytes in messages of `message` bytes, `window` in flight. */
function bandwidthArgs(total: number, message: number, window: number): string[] {
  const iterations = Math.max(16, Math.ceil(total / message));
  const warmup = Math.max(2, Math.ceil(iterations / 8));
  return ['-t', 'tag_bw', '-s', String(message), '-n', String(iterations), '-w', String(warmup), '-O', String(window)];
}

const LATENCY_ARGS = ['-t', 'tag_lat', '-s', '8', '-n', '5000', '-w', '500'];

// ---- plain kernel TCP, the floor under UCX --------------------------------------------------------

const TCP_SERVER = `const net = require('net');
const srv = net.createServer((s) => {
  let n = 0, t0 = 0;
  s.on('data', (d) => { if (!t0) t0 = performance.now(); n += d.length; });
  s.on('end', () => { console.log(JSON.stringify({ bytes: n, seconds: (performance.now() - t0) / 1e3 })); s.end(); srv.close(); });
});
srv.listen(Number(process.argv[1]), '0.0.0.0', () => console.log('listening'));`;

const TCP_CLIENT = `const net = require('net');
const [host, port, total] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3])];
const buf = Buffer.alloc(4 << 20, 7);
let left = total;
const s = net.connect(port, host, () => {
  const pump = () => {
    while (left > 0) {
      const n = Math.min(buf.length, left);
      left -= n;
      if (!s.write(buf.subarray(0, n))) return void s.once('drain', pump);
    }
    s.end();
  };
  pump();
});
s.resume();`;

/** Bytes per second of one plain TCP stream of `bytes` (Node's net, blocking in the kernel). */
async function tcpStream(res: Resources, serverNs: string | null, clientNs: string | null, host: string, port: number, bytes: number): Promise<number> {
  const [scmd, sargs] = inNamespace(serverNs, process.execPath, ['-e', TCP_SERVER, String(port)]);
  const server = res.spawn(scmd, sargs, process.env);
  let out = '';
  const listening = new Promise<void>((resolve) => {
    server.stdout?.on('data', (d: Buffer) => {
      out += d.toString('utf8');
      if (out.includes('listening')) resolve();
    });
  });
  await Promise.race([listening, delay(10_000)]);
  const [ccmd, cargs] = inNamespace(clientNs, process.execPath, ['-e', TCP_CLIENT, host, String(port), String(bytes)]);
  const client = res.spawn(ccmd, cargs, process.env, 'ignore');
  if (!(await exited(server, 300_000))) server.kill('SIGKILL');
  if (!(await exited(client, 5_000))) client.kill('SIGKILL');
  const line = out.split('\n').find((l) => l.startsWith('{'));
  if (line === undefined) throw new Error(`the TCP stream gave no result: ${out}`);
  const { bytes: got, seconds } = JSON.parse(line) as { bytes: number; seconds: number };
  if (got !== bytes) throw new Error(`the TCP stream moved ${got} bytes of ${bytes}`);
  return got / seconds;
}

// ---- the run ----------------------------------------------------------------------------------

interface Stat {
  median: number;
  min: number;
  max: number;
  all: number[];
}

function stat(xs: number[]): Stat {
  return { median: median(xs), min: Math.min(...xs), max: Math.max(...xs), all: xs };
}


function rangeText(s: Stat, digits = 2, scale = 1): string {
  return `${(s.min * scale).toFixed(digits)}-${(s.max * scale).toFixed(digits)}`;
}

function checkEnvironment(): string | null {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces): run as root';
  if (spawnSync('ucx_perftest', ['-h'], { stdio: 'ignore' }).error) return 'ucx_perftest not found (Debian package ucx-utils)';
  if (!existsSync(TESTBED)) return `testbed script not found at ${TESTBED}`;
  return null;
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      size: { type: 'string', default: '1GiB' },
      rate: { type: 'string', default: '2gbit' },
      delay: { type: 'string', default: '0ms' },
      mtu: { type: 'string', default: '1500' },
      relays: { type: 'string', default: '2,4,8' },
      'chunk-size': { type: 'string', default: '32MiB' },
      window: { type: 'string', default: '4' },
      rounds: { type: 'string', default: '3' },
      skip: { type: 'string', default: '' },
      shm: { type: 'string', default: 'huge' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const size = parseBytes(values.size!);
  const linkRate = parseRate(values.rate!);
  // p = 2 (one hop) is T_p2p, the reference of every ratio: always measured.
  const ps = [...new Set([2, ...values.relays!.split(',').map((s) => Number(s.trim()))])].sort((a, b) => a - b);
  if (ps.some((p) => !Number.isInteger(p) || p < 2 || p > 64)) throw new Error(`--relays: chain lengths are integers 2..64 (the master included), got ${values.relays}`);
  const window = Number(values.window);
  const rounds = Number(values.rounds);
  if (!(Number.isInteger(window) && window >= 1) || !(Number.isInteger(rounds) && rounds >= 1)) throw new Error('--window and --rounds are positive integers');
  // scripts/testbed.sh refuses an MTU outside 576-65535 before it builds anything.
  const mtu = Number(values.mtu);
  if (values.shm !== 'huge' && values.shm !== 'plain') throw new Error(`--shm is huge or plain, got ${values.shm}`);
  const skip = new Set(values.skip!.split(',').map((s) => s.trim()).filter((s) => s.length > 0));
  const problem = checkEnvironment();
  if (problem !== null) {
    process.stderr.write(`broadcast bench: ${problem}\n`);
    process.exitCode = 2;
    return;
  }

  const res = new Resources();
  const onSignal = (signal: NodeJS.Signals): void => {
    process.stderr.write(`broadcast bench: ${signal}: stopping relays, removing the testbed\n`);
    res.releaseAll();
    process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGHUP' ? 1 : 15));
  };
  const onExit = (): void => res.releaseAll();
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(s, onSignal);
  process.on('exit', onExit);
  const started = performance.now();
  const say = (text: string): void => void process.stderr.write(`[${((performance.now() - started) / 1e3).toFixed(0)} s] ${text}\n`);

  try {
    const maxP = ps[ps.length - 1]!;
    const bed = `bc${process.pid % 10000}`;
    res.beds.add(bed);
    say(`testbed ${bed}: ${maxP} hosts, ${values.rate}, delay ${values.delay}, mtu ${values.mtu}`);
    const up = spawnSync('bash', [TESTBED, 'up', bed, String(maxP), '--rate', values.rate!, '--delay', values.delay!, '--mtu', values.mtu!], { encoding: 'utf8' });
    if (up.status !== 0) throw new Error(`testbed up failed: ${up.stderr}`);
    const hosts: Host[] = Array.from({ length: maxP }, (_, i) => ({ id: `r${i}`, address: `10.77.0.${i + 1}`, ns: `lmr-${bed}-${i + 1}` }));

    const work = res.tempDir('/dev/shm/laminar-bench-bcast-');
    const secretFile = join(work, 'secret');
    writeFileSync(secretFile, randomBytes(32).toString('hex'), { mode: 0o600 });

    // The raw link: ucx_perftest from host 2 to host 1, like a relay's hop, same message size
    // as the relays' chunks when given, 32 MiB otherwise.
    const chunkOption = values['chunk-size']!;
    const perftestMessage = chunkOption === 'auto' ? Math.min(32 * 2 ** 20, size) : Math.min(parseBytes(chunkOption), size);
    const bwArgs = bandwidthArgs(size, perftestMessage, window);
    const linkBw: number[] = [];
    const linkLat: number[] = [];
    const linkLatAvg: number[] = [];
    const linkTcp: number[] = [];
    for (let r = 0; r < rounds; r++) {
      say(`ucx_perftest over the link, round ${r + 1}/${rounds}: ${bwArgs.join(' ')}`);
      linkBw.push((await perftest(res, hosts[0]!.ns, hosts[1]!.ns, '10.77.0.1', PERFTEST_PORT, bwArgs)).bandwidth);
      const lat = await perftest(res, hosts[0]!.ns, hosts[1]!.ns, '10.77.0.1', PERFTEST_PORT, LATENCY_ARGS);
      linkLat.push(lat.typicalUs);
      linkLatAvg.push(lat.averageUs);
      say(`plain TCP stream over the link, round ${r + 1}/${rounds}`);
      linkTcp.push(await tcpStream(res, hosts[0]!.ns, hosts[1]!.ns, '10.77.0.1', PERFTEST_PORT + 1 + r, size));
    }
    const bw = stat(linkBw);
    const lat = stat(linkLat);
    const hugeBase = values.shm === 'huge' ? res.hugeTmpfs() : null;
    if (values.shm === 'huge' && hugeBase === null) say('could not mount a tmpfs with huge=within_size: relays use /dev/shm (4 KiB pages)');
    const shm = hugeBase === null ? 'plain' : 'huge';
    // Generous: ten times the transfer at the nominal rate, plus start-up.
    const timeoutFor = (hops: number): number => 60_000 + (10 * hops * size * 1e3) / linkRate;
    const crashes: string[] = [];

    let probe: ChunkProbeResult | null = null;
    if (chunkOption === 'auto') {
      // A relay's own cost per chunk, which perftest's latency leaves out (laminar chunk-size --probe).
      probe = await probeChunkCost({
        bytes: Math.min(size, PROBE_BYTES),
        rounds,
        window,
        shmBase: hugeBase ?? '/dev/shm',
        env: ucxEnv(),
        onProgress: (text) => say(`per-chunk cost probe: ${text}`),
        track: { child: (c) => res.children.add(c), dir: (d) => res.dirs.add(d) },
      });
      say(`  a relay's cost per chunk: ${(probe.perChunk * 1e6).toFixed(0)} us`);
    }
    const link: LinkModel = { bandwidth: bw.median, startup: lat.median * 1e-6 + (probe?.perChunk ?? 0) };
    const chunkSize = chunkOption === 'auto' ? optimalChunkSize(maxP, size, link, 64 * 2 ** 20) : parseBytes(chunkOption);
    const chunks = Math.ceil(size / chunkSize);
    const settings: RelaySettings = { chunkSize, window, secretFile, shmBase: hugeBase ?? '/dev/shm' };
    const source = makeSource(size);

    const measure = async (kind: 'chain' | 'star', roundFn: typeof chainRound): Promise<Map<number, Round[]>> => {
      const out = new Map<number, Round[]>();
      for (const p of ps) {
        const list: Round[] = [];
        for (let r = 0; r < rounds; r++) {
          say(`${kind} p=${p}, round ${r + 1}/${rounds}`);
          list.push(await retried(`${kind} p=${p}`, crashes, say, () => roundFn(res, settings, hosts.slice(0, p), source, timeoutFor(p))));
          say(`  ${list[list.length - 1]!.seconds.toFixed(3)} s`);
        }
        out.set(p, list);
      }
      return out;
    };
    const chain = await measure('chain', chainRound);
    const star = skip.has('star') ? new Map<number, Round[]>() : await measure('star', starRound);
    spawnSync('bash', [TESTBED, 'down', bed], { stdio: 'ignore' });
    res.beds.delete(bed);

    // Loopback: no namespaces, no shaping, UCX over TCP on 127.0.0.1.
    let loop: Loopback | null = null;
    if (!skip.has('loopback')) {
      const relayBw: number[] = [];
      const firstBw: number[] = [];
      const plainBw: number[] = [];
      const perfBw: number[] = [];
      const tcpBw: number[] = [];
      const loArgs = bandwidthArgs(size, Math.min(chunkSize, size), window);
      const hop = async (hopSettings: RelaySettings): Promise<Round> =>
        retried('loopback', crashes, say, async () => {
          const [a, b] = [await freePort(), await freePort()];
          const loHosts: Host[] = [
            { id: 'r0', address: `127.0.0.1:${a}`, ns: null },
            { id: 'r1', address: `127.0.0.1:${b === a ? b + 1 : b}`, ns: null },
          ];
          return chainRound(res, hopSettings, loHosts, source, timeoutFor(1));
        });
      for (let r = 0; r < rounds; r++) {
        say(`loopback relay hop (${shm} shm), round ${r + 1}/${rounds}`);
        const main = await hop(settings);
        relayBw.push(size / main.seconds);
        firstBw.push(size / main.firstSeconds!);
        if (shm === 'huge') {
          say(`loopback relay hop (/dev/shm), round ${r + 1}/${rounds}`);
          plainBw.push(size / (await hop({ ...settings, shmBase: '/dev/shm' })).seconds);
        }
        say(`loopback ucx_perftest, round ${r + 1}/${rounds}: ${loArgs.join(' ')}`);
        perfBw.push((await perftest(res, null, null, '127.0.0.1', await freePort(), loArgs)).bandwidth);
        tcpBw.push(await tcpStream(res, null, null, '127.0.0.1', await freePort(), size));
      }
      loop = { relay: stat(relayBw), first: stat(firstBw), plain: plainBw.length ? stat(plainBw) : null, perftest: stat(perfBw), tcp: stat(tcpBw) };
    }

    report({ shm, size, linkRate, rate: values.rate!, delay: values.delay!, mtu, ps, rounds, window, chunkSize, chunks, perftestMessage, bwArgs, bw, tcp: stat(linkTcp), lat, latAvg: stat(linkLatAvg), link, probe, chain, star, loop, crashes, wallS: (performance.now() - started) / 1e3 });
  } finally {
    res.releaseAll();
    for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.off(s, onSignal);
    process.off('exit', onExit);
  }
}

interface Loopback {
  /** Steady state (second version) on the shm of the run, and its first version. */
  relay: Stat;
  first: Stat;
  /** Steady state on /dev/shm, when the run used a huge-page tmpfs. */
  plain: Stat | null;
  perftest: Stat;
  tcp: Stat;
}

interface Results {
  size: number;
  linkRate: number;
  rate: string;
  delay: string;
  mtu: number;
  ps: number[];
  rounds: number;
  window: number;
  chunkSize: number;
  chunks: number;
  perftestMessage: number;
  bwArgs: string[];
  bw: Stat;
  tcp: Stat;
  lat: Stat;
  latAvg: Stat;
  /** T_start = perftest's latency plus, with --chunk-size auto, the probed per-chunk cost. */
  link: LinkModel;
  probe: ChunkProbeResult | null;
  chain: Map<number, Round[]>;
  star: Map<number, Round[]>;
  loop: Loopback | null;
  /** huge: the relays' segments on a tmpfs with huge=within_size; plain: /dev/shm. */
  shm: 'huge' | 'plain';
  /** Relays that died at start-up (rounds run again). */
  crashes: string[];
  wallS: number;
}

function report(r: Results): void {
  const MB = 1e6;
  const model = (p: number): number => broadcastTime(p, r.chunks, r.size, r.link);
  const starModel = (p: number): number => (p - 1) * broadcastTime(2, r.chunks, r.size, r.link);
  // One chunk step of the model: what each hop beyond the first should add to the chain.
  const chunkStep = r.size / r.chunks / r.link.bandwidth + r.link.startup;
  const chainStat = new Map([...r.chain].map(([p, rounds]) => [p, stat(rounds.map((x) => x.seconds))]));
  const firstStat = new Map([...r.chain].map(([p, rounds]) => [p, stat(rounds.map((x) => x.firstSeconds!))]));
  const p2pFirst = firstStat.get(2) ?? null;
  const starStat = new Map([...r.star].map(([p, rounds]) => [p, stat(rounds.map((x) => x.seconds))]));
  const p2p = chainStat.get(2) ?? null;
  const maxP = r.ps[r.ps.length - 1]!;
  const chainMax = chainStat.get(maxP)!;
  const cpuText = (rounds: Round[]): string => {
    const busy = median(rounds.map((x) => x.cpu.machineBusy));
    const soft = median(rounds.map((x) => x.cpu.machineSoftirq));
    const sys = median(rounds.map((x) => x.cpu.machineSystem));
    const master = median(rounds.map((x) => x.cpu.relays[0]!));
    const others = median(rounds.map((x) => (x.cpu.relays.length > 1 ? Math.max(...x.cpu.relays.slice(1)) : 0)));
    return `machine ${(busy * 100).toFixed(0)}% (sys ${(sys * 100).toFixed(0)}%, softirq ${(soft * 100).toFixed(0)}%), master ${(master * 100).toFixed(0)}%, busiest relay ${(others * 100).toFixed(0)}%`;
  };

  printTable(`link: ucx_perftest (UCX_TLS=tcp) ${formatBytes(r.perftestMessage)} messages, ${r.window} in flight, host 2 -> host 1, tc rate ${r.rate}, MTU ${r.mtu}; median (range) of ${r.rounds}`, [
    ['bandwidth (tag_bw overall)', `${(r.bw.median / MB).toFixed(1)} MB/s (${rangeText(r.bw, 1, 1 / MB)})`, `nominal ${(r.linkRate / MB).toFixed(0)} MB/s`, r.bwArgs.join(' ')],
    ['plain TCP stream (Node net), same bytes', `${(r.tcp.median / MB).toFixed(1)} MB/s (${rangeText(r.tcp, 1, 1 / MB)})`, 'the kernel\'s limit under UCX', ''],
    ['latency (tag_lat, 8 B, median one-way)', `${r.lat.median.toFixed(1)} us (${rangeText(r.lat, 1)})`, `average ${r.latAvg.median.toFixed(1)} us`, LATENCY_ARGS.join(' ')],
    ...(r.probe
      ? [[
          "a relay's cost per chunk (loopback hop probe)",
          `${(r.probe.perChunk * 1e6).toFixed(0)} us`,
          r.probe.timings.map((t) => `${formatBytes(r.probe!.bytes)} in ${t.chunks} x ${formatBytes(t.chunkSize)}: ${t.median.toFixed(3)} s (${rangeText(stat(t.seconds), 3)})`).join('; '),
          'T_start of the model = latency + this',
        ]]
      : []),
  ]);

  const rows: string[][] = [['broadcast', 'p (relays incl. master)', 'hops', 'median s', 'range s', 'size/T MB/s', 'model s', 'meas/model', 's per extra hop', 'CPU during the broadcast (median; 100% = one core)']];
  for (const p of r.ps) {
    const s = chainStat.get(p)!;
    rows.push([p === 2 ? 'chain, steady (p=2: T_p2p)' : 'chain, steady', String(p), String(p - 1), s.median.toFixed(3), rangeText(s, 3), (r.size / s.median / MB).toFixed(1), model(p).toFixed(3), (s.median / model(p)).toFixed(2), p > 2 && p2p ? ((s.median - p2p.median) / (p - 2)).toFixed(3) : '-', cpuText(r.chain.get(p)!)]);
  }
  for (const p of r.ps) {
    const s = firstStat.get(p)!;
    rows.push(['chain, first version', String(p), String(p - 1), s.median.toFixed(3), rangeText(s, 3), (r.size / s.median / MB).toFixed(1), model(p).toFixed(3), (s.median / model(p)).toFixed(2), p > 2 && p2pFirst ? ((s.median - p2pFirst.median) / (p - 2)).toFixed(3) : '-', '']);
  }
  for (const p of r.ps) {
    const s = starStat.get(p);
    if (s === undefined) continue;
    rows.push(['star (one after the other)', String(p), String(p - 1), s.median.toFixed(3), rangeText(s, 3), (r.size / s.median / MB).toFixed(1), starModel(p).toFixed(3), (s.median / starModel(p)).toFixed(2), p > 2 && p2p ? ((s.median - p2p.median) / (p - 2)).toFixed(3) : '-', cpuText(r.star.get(p)!)]);
  }
  printTable(
    `broadcast of ${formatBytes(r.size)} in k=${r.chunks} chunks of ${formatBytes(r.chunkSize)}, window ${r.window}; p counts the master (p=2 is one hop); ` +
      `model T(p,k) = (p+k-2)(M/k T_byte + T_start) with T_byte = 1/${(r.link.bandwidth / MB).toFixed(1)} MB/s, T_start = ${(r.link.startup * 1e6).toFixed(1)} us${r.probe ? ' (latency + a relay\'s cost per chunk)' : ''}; ` +
      `each hop beyond the first should add one chunk step M/k T_byte + T_start = ${chunkStep.toFixed(3)} s; ` +
      'steady: the second version, into relays that hold a spare segment (as every step of training); first: version 1 into fresh relays',
    rows,
  );

  const arrivalRows: string[][] = [['broadcast', 'p', 'arrival of r1..r(p-1), s after publish (median round)']];
  const medianRound = (rounds: Round[]): Round => [...rounds].sort((a, b) => a.seconds - b.seconds)[Math.floor((rounds.length - 1) / 2)]!;
  for (const [kind, map] of [['chain', r.chain], ['star', r.star]] as const) {
    for (const [p, rounds] of map) arrivalRows.push([kind, String(p), medianRound(rounds).arrivals.map((a) => a.toFixed(2)).join('  ')]);
  }
  printTable('arrivals per relay', arrivalRows);

  const optimal = r.ps.map((p) => {
    const c = optimalChunkSize(p, r.size, r.link, 64 * 2 ** 20);
    return `p=${p}: ${formatBytes(c)} -> ${broadcastTime(p, Math.ceil(r.size / c), r.size, r.link).toFixed(3)} s`;
  });
  printTable('the model\'s optimal chunk size with this link', [[optimal.join(', ')]]);

  const chainOverP2p = p2p ? chainMax.median / p2p.median : null;
  const linkEfficiency = p2p ? r.size / p2p.median / r.bw.median : null;
  const starMax = starStat.get(maxP);
  // The star runs on fresh relays: compare it with the chain's first version.
  const starOverChain = starMax ? starMax.median / firstStat.get(maxP)!.median : null;
  const loopRatio = r.loop ? r.loop.relay.median / r.loop.perftest.median : null;
  const loopFirstRatio = r.loop ? r.loop.first.median / r.loop.perftest.median : null;
  const firstOverP2p = p2pFirst ? firstStat.get(maxP)!.median / p2pFirst.median : null;
  const fmt = (x: number | null, d = 2): string => (x === null ? 'n/a' : x.toFixed(d));
  const met = (ok: boolean | null): string => (ok === null ? 'not measured' : ok ? 'met' : 'MISSED');
  const goalRows: string[][] = [
    [`T_chain(${maxP}) / T_p2p, steady state`, fmt(chainOverP2p), '<= 1.10', met(chainOverP2p === null ? null : chainOverP2p <= 1.1)],
    [`T_chain(${maxP}) / T_p2p, first version`, fmt(firstOverP2p), '(shown)', '-'],
    ['link efficiency: size / T_p2p / perftest bandwidth', fmt(linkEfficiency), '>= 0.90', met(linkEfficiency === null ? null : linkEfficiency >= 0.9)],
    [`T_star(${maxP}) / T_chain(${maxP}), both on fresh relays`, fmt(starOverChain), `~${maxP - 1} (shown)`, '-'],
    ['loopback: relay hop / perftest (UCX_TLS=tcp, 127.0.0.1), steady state', fmt(loopRatio), '>= 0.80', met(loopRatio === null ? null : loopRatio >= 0.8)],
    ['loopback: relay hop / perftest, first version', fmt(loopFirstRatio), '(shown)', '-'],
  ];
  printTable('goals (medians)', goalRows);
  if (r.loop) {
    printTable(`loopback (127.0.0.1, UCX_TLS=tcp, no shaping, relay segments on ${r.shm === 'huge' ? 'a huge=within_size tmpfs' : '/dev/shm'}); median (range) of ${r.rounds}`, [
      ['relay hop (size / time), steady state', `${(r.loop.relay.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.relay, 1, 1 / MB)})`],
      ['relay hop, first version', `${(r.loop.first.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.first, 1, 1 / MB)})`],
      ...(r.loop.plain ? [['relay hop, steady state, segments on /dev/shm (4 KiB pages)', `${(r.loop.plain.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.plain, 1, 1 / MB)})`]] : []),
      ['ucx_perftest tag_bw, same messages and window', `${(r.loop.perftest.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.perftest, 1, 1 / MB)})`],
      ['plain TCP stream (Node net)', `${(r.loop.tcp.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.tcp, 1, 1 / MB)})`],
    ]);
  }
  if (r.crashes.length > 0) printTable(`relays that died at start-up (their rounds were run again): ${r.crashes.length}`, r.crashes.map((c) => [c]));
  process.stdout.write(`took ${r.wallS.toFixed(0)} s\n\n`);

  const byP = <T>(f: (p: number) => T | undefined): Record<string, T> => {
    const out: Record<string, T> = {};
    for (const p of r.ps) {
      const v = f(p);
      if (v !== undefined) out[String(p)] = v;
    }
    return out;
  };
  const ucxVars = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('UCX_') && k !== 'UCX_TLS'));
  const result = {
    bench: 'broadcast',
    size_bytes: r.size,
    link_gbit: round((r.linkRate * 8) / 1e9, 3),
    delay: r.delay,
    mtu: r.mtu,
    perftest_MBps: round(r.bw.median / MB, 1),
    perftest_MBps_range: [round(r.bw.min / MB, 1), round(r.bw.max / MB, 1)],
    perftest_args: r.bwArgs.join(' '),
    tcp_MBps: round(r.tcp.median / MB, 1),
    link_efficiency_vs_tcp: p2p ? round(r.size / p2p.median / r.tcp.median) : null,
    tstart_us: round(r.lat.median, 1),
    per_chunk_us: r.probe ? round(r.probe.perChunk * 1e6, 1) : null,
    model_tstart_us: round(r.link.startup * 1e6, 1),
    t_p2p_s: p2p ? round(p2p.median) : null,
    t_chain_s: byP((p) => round(chainStat.get(p)!.median)),
    t_chain_first_s: byP((p) => round(firstStat.get(p)!.median)),
    t_star_s: byP((p) => (starStat.has(p) ? round(starStat.get(p)!.median) : undefined)),
    model_s: byP((p) => round(model(p))),
    model_star_s: byP((p) => round(starModel(p))),
    model_chunk_step_s: round(chunkStep),
    extra_hop_s: byP((p) => (p > 2 && p2p ? round((chainStat.get(p)!.median - p2p.median) / (p - 2)) : undefined)),
    t_chain_range_s: byP((p) => [round(chainStat.get(p)!.min), round(chainStat.get(p)!.max)]),
    t_star_range_s: byP((p) => (starStat.has(p) ? [round(starStat.get(p)!.min), round(starStat.get(p)!.max)] : undefined)),
    arrivals_s: byP((p) => medianRound(r.chain.get(p)!).arrivals.map((a) => round(a))),
    chain8_over_p2p: chainStat.has(8) && p2p ? round(chainStat.get(8)!.median / p2p.median) : null,
    chain_max_over_p2p: chainOverP2p === null ? null : round(chainOverP2p),
    chain_max_over_p2p_first: firstOverP2p === null ? null : round(firstOverP2p),
    star_over_chain: starOverChain === null ? null : round(starOverChain, 2),
    link_efficiency: linkEfficiency === null ? null : round(linkEfficiency),
    loopback_relay_MBps: r.loop ? round(r.loop.relay.median / MB, 1) : null,
    loopback_perftest_MBps: r.loop ? round(r.loop.perftest.median / MB, 1) : null,
    loopback_over_perftest: loopRatio === null ? null : round(loopRatio),
    loopback_first_over_perftest: loopFirstRatio === null ? null : round(loopFirstRatio),
    loopback_plain_shm_over_perftest: r.loop?.plain ? round(r.loop.plain.median / r.loop.perftest.median) : null,
    shm: r.shm,
    loopback_tcp_MBps: r.loop ? round(r.loop.tcp.median / MB, 1) : null,
    cpu_machine_busy: byP((p) => round(median(r.chain.get(p)!.map((x) => x.cpu.machineBusy)), 2)),
    cpu_machine_sys: byP((p) => round(median(r.chain.get(p)!.map((x) => x.cpu.machineSystem)), 2)),
    cpu_relays_cores: byP((p) => medianRound(r.chain.get(p)!).cpu.relays.map((c) => round(c, 2))),
    chunk_bytes: r.chunkSize,
    chunks: r.chunks,
    window: r.window,
    rounds: r.rounds,
    ucx_env: { UCX_TLS: 'tcp', ...ucxVars },
    relay_start_crashes: r.crashes.length,
    wall_s: round(r.wallS, 0),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
