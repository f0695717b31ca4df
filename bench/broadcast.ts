/**
 * `npm run bench -- broadcast [--size 1GiB] [--rate 2gbit] [--relays 2,4,8] [--chunk-size <bytes>|auto]
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
 *               counts; with no --chunk-size, the per-chunk cost the relays' own model used.
 * Chunk size: with no --chunk-size the relays choose (their default, `--chunk-size auto` of
 * `laminar relay`: the chunk model for each chain with the link they measured on their own sends,
 * so the first version of a round is cut with the defaults and the second with the master's
 * measured first hop); the chunk the master chose for each p is reported. `--chunk-size auto`
 * is this bench's own choice instead (the probe above and perftest's link, one size for every p),
 * and a size fixes it for every relay.
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
 *
 * This file parses the options and runs the parts in order; they live in bench/broadcast/:
 * testbed.ts (namespaces, processes, clean-up on exit), relays.ts (the relay processes),
 * rounds.ts (the timed chain and star runs), raw-link.ts (ucx_perftest and a TCP stream),
 * cpu.ts (CPU accounting) and report.ts (the tables and the JSON line).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { optimalChunkSize, type LinkModel } from '../src/relay/broadcast/chunk-model.js';
import { probeChunkCost, type ChunkProbeResult } from '../src/cli/chunk-probe.js';
import { parseBytes } from '../src/common/units.js';
import { freePort } from '../src/services/ports.js';
import { LATENCY_ARGS, bandwidthArgs, perftest, tcpStream } from './broadcast/raw-link.js';
import { retried, type RelaySettings } from './broadcast/relays.js';
import { report, stat, type Loopback } from './broadcast/report.js';
import { chainRound, makeSource, starRound, type Host, type Round } from './broadcast/rounds.js';
import { Resources, TESTBED, ucxEnv } from './broadcast/testbed.js';

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
  --chunk-size <bytes>  chunk size of the version (relay --chunk-size, for every p), or "auto":
                        the model's optimum for the longest chain with the link measured here,
                        T_start being perftest's latency plus a relay's own cost per chunk,
                        probed first on loopback (one hop of 1 GiB, at most --size, in 1 MiB
                        and in 16 MiB chunks)
                        (default: none, the relays choose as they do by default: the chunk
                        model for each chain and the link they measure; reported per p)
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

/** A tc rate ("2gbit", "500mbit", "100kbit", "1000000bit") in bytes per second. */
function parseRate(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)bit\s*$/i.exec(text);
  if (!m) throw new Error(`--rate: a tc rate such as 2gbit or 500mbit, got ${JSON.stringify(text)}`);
  return (Number(m[1]) * { '': 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12 }[m[2]!.toLowerCase() as '' | 'k' | 'm' | 'g' | 't']) / 8;
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
      'chunk-size': { type: 'string' },
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
  const size = parseBytes(values.size);
  const linkRate = parseRate(values.rate);
  // p = 2 (one hop) is T_p2p, the reference of every ratio: always measured.
  const ps = [...new Set([2, ...values.relays.split(',').map((s) => Number(s.trim()))])].sort((a, b) => a - b);
  if (ps.some((p) => !Number.isInteger(p) || p < 2 || p > 64))
    throw new Error(`--relays: chain lengths are integers 2..64 (the master included), got ${values.relays}`);
  const window = Number(values.window);
  const rounds = Number(values.rounds);
  if (!(Number.isInteger(window) && window >= 1) || !(Number.isInteger(rounds) && rounds >= 1)) throw new Error('--window and --rounds are positive integers');
  // scripts/testbed.sh refuses an MTU outside 576-65535 before it builds anything.
  const mtu = Number(values.mtu);
  if (values.shm !== 'huge' && values.shm !== 'plain') throw new Error(`--shm is huge or plain, got ${values.shm}`);
  const skip = new Set(
    values.skip
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s.length > 0),
  );
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
    const up = spawnSync('bash', [TESTBED, 'up', bed, String(maxP), '--rate', values.rate, '--delay', values.delay, '--mtu', values.mtu], {
      encoding: 'utf8',
    });
    if (up.status !== 0) throw new Error(`testbed up failed: ${up.stderr}`);
    const hosts: Host[] = Array.from({ length: maxP }, (_, i) => ({ id: `r${i}`, address: `10.77.0.${i + 1}`, ns: `lmr-${bed}-${i + 1}` }));

    const work = res.tempDir('/dev/shm/laminar-bench-bcast-');
    const secretFile = join(work, 'secret');
    writeFileSync(secretFile, randomBytes(32).toString('hex'), { mode: 0o600 });

    // The raw link: ucx_perftest from host 2 to host 1, like a relay's hop, same message size
    // as the relays' chunks when given, 32 MiB otherwise. No option: the relays choose.
    const chunkOption = values['chunk-size'] ?? null;
    const fixedChunk = chunkOption === null || chunkOption === 'auto' ? null : parseBytes(chunkOption);
    const perftestMessage = Math.min(fixedChunk ?? 32 * 2 ** 20, size);
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
    const probedLink: LinkModel = { bandwidth: bw.median, startup: lat.median * 1e-6 + (probe?.perChunk ?? 0) };
    // null: the relays choose (no --chunk-size given to them).
    const chunkSize = chunkOption === 'auto' ? optimalChunkSize(maxP, size, probedLink, 64 * 2 ** 20) : fixedChunk;
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
      const loArgs = bandwidthArgs(size, Math.min(chunkSize ?? 32 * 2 ** 20, size), window);
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

    // With the relays choosing, the model's T_start counts the per-chunk cost their model used.
    const relayCost = chunkSize === null ? (chain.get(maxP)?.find((round) => round.chunking?.inputs)?.chunking?.inputs?.chunkCost ?? 0) : 0;
    const link: LinkModel = { ...probedLink, startup: probedLink.startup + relayCost };
    report({
      shm,
      size,
      linkRate,
      rate: values.rate,
      delay: values.delay,
      mtu,
      ps,
      rounds,
      window,
      chunkSize,
      chunkMode: chunkOption === null ? 'relays' : chunkOption === 'auto' ? 'bench-auto' : 'fixed',
      perftestMessage,
      bwArgs,
      bw,
      tcp: stat(linkTcp),
      lat,
      latAvg: stat(linkLatAvg),
      link,
      probe,
      chain,
      star,
      loop,
      crashes,
      wallS: (performance.now() - started) / 1e3,
    });
  } finally {
    res.releaseAll();
    for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.off(s, onSignal);
    process.off('exit', onExit);
  }
}
