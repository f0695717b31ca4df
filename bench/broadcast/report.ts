/**
 * The broadcast bench's report: the tables (the link, the broadcasts against the model of
 * appendix C, arrivals, the optimal chunk size, the goals, loopback) and the JSON line that ends
 * stdout. Separate from the measurements so that the output format is defined in one place.
 */
import { broadcastTime, optimalChunkSize, type LinkModel } from '../../src/relay/broadcast/chunk-model.js';
import type { ChunkProbeResult } from '../../src/cli/chunk-probe.js';
import { formatBytes } from '../../src/common/units.js';
import { describeChoice } from '../../src/relay/chunking/describe.js';
import { DEFAULT_CHUNK_SIZE } from '../../src/relay/protocol/defaults.js';
import { median, printTable, round } from '../support.js';
import { LATENCY_ARGS } from './raw-link.js';
import type { Round } from './rounds.js';

export interface Stat {
  median: number;
  min: number;
  max: number;
  all: number[];
}

export function stat(xs: number[]): Stat {
  return { median: median(xs), min: Math.min(...xs), max: Math.max(...xs), all: xs };
}

function rangeText(s: Stat, digits = 2, scale = 1): string {
  return `${(s.min * scale).toFixed(digits)}-${(s.max * scale).toFixed(digits)}`;
}

export interface Loopback {
  /** Steady state (second version) on the shm of the run, and its first version. */
  relay: Stat;
  first: Stat;
  /** Steady state on /dev/shm, when the run used a huge-page tmpfs. */
  plain: Stat | null;
  perftest: Stat;
  tcp: Stat;
}

export interface Results {
  size: number;
  linkRate: number;
  rate: string;
  delay: string;
  mtu: number;
  ps: number[];
  rounds: number;
  window: number;
  /** The chunk size every relay was given, or null when the relays chose (reported per round). */
  chunkSize: number | null;
  /** relays: no --chunk-size (the relays' default); bench-auto: --chunk-size auto (this bench's probe); fixed: a size. */
  chunkMode: 'relays' | 'bench-auto' | 'fixed';
  perftestMessage: number;
  bwArgs: string[];
  bw: Stat;
  tcp: Stat;
  lat: Stat;
  latAvg: Stat;
  /** T_start = perftest's latency plus the probed per-chunk cost (auto) or the relays' (relays). */
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

/** The chunk size the rounds ran with: the one given, or the median of what the master chose in each. */
function chunkOf(r: Results, rounds: Round[] | undefined, first = false): number {
  if (r.chunkSize !== null) return r.chunkSize;
  const chosen = (rounds ?? []).map((x) => (first ? x.firstChunking : x.chunking)?.chunkSize).filter((c): c is number => c !== undefined);
  return chosen.length > 0 ? median(chosen) : DEFAULT_CHUNK_SIZE;
}

export function report(r: Results): void {
  const MB = 1e6;
  const chunkAt = (p: number, first = false): number => chunkOf(r, r.chain.get(p), first);
  const chunksAt = (p: number, first = false): number => Math.ceil(r.size / chunkAt(p, first));
  const model = (p: number, first = false): number => broadcastTime(p, chunksAt(p, first), r.size, r.link);
  const starChunks = (p: number): number => Math.ceil(r.size / chunkOf(r, r.star.get(p)));
  const starModel = (p: number): number => (p - 1) * broadcastTime(2, starChunks(p), r.size, r.link);
  const maxP = r.ps[r.ps.length - 1]!;
  // One chunk step of the model at the longest chain: what each hop beyond the first should add to it.
  const chunkStep = chunkAt(maxP) / r.link.bandwidth + r.link.startup;
  const chainStat = new Map([...r.chain].map(([p, rounds]) => [p, stat(rounds.map((x) => x.seconds))]));
  const firstStat = new Map([...r.chain].map(([p, rounds]) => [p, stat(rounds.map((x) => x.firstSeconds!))]));
  const p2pFirst = firstStat.get(2) ?? null;
  const starStat = new Map([...r.star].map(([p, rounds]) => [p, stat(rounds.map((x) => x.seconds))]));
  const p2p = chainStat.get(2) ?? null;
  const chainMax = chainStat.get(maxP)!;
  const cpuText = (rounds: Round[]): string => {
    const busy = median(rounds.map((x) => x.cpu.machineBusy));
    const soft = median(rounds.map((x) => x.cpu.machineSoftirq));
    const sys = median(rounds.map((x) => x.cpu.machineSystem));
    const master = median(rounds.map((x) => x.cpu.relays[0]!));
    const others = median(rounds.map((x) => (x.cpu.relays.length > 1 ? Math.max(...x.cpu.relays.slice(1)) : 0)));
    return `machine ${(busy * 100).toFixed(0)}% (sys ${(sys * 100).toFixed(0)}%, softirq ${(soft * 100).toFixed(0)}%), master ${(master * 100).toFixed(0)}%, busiest relay ${(others * 100).toFixed(0)}%`;
  };

  printTable(
    `link: ucx_perftest (UCX_TLS=tcp) ${formatBytes(r.perftestMessage)} messages, ${r.window} in flight, host 2 -> host 1, tc rate ${r.rate}, MTU ${r.mtu}; median (range) of ${r.rounds}`,
    [
      [
        'bandwidth (tag_bw overall)',
        `${(r.bw.median / MB).toFixed(1)} MB/s (${rangeText(r.bw, 1, 1 / MB)})`,
        `nominal ${(r.linkRate / MB).toFixed(0)} MB/s`,
        r.bwArgs.join(' '),
      ],
      [
        'plain TCP stream (Node net), same bytes',
        `${(r.tcp.median / MB).toFixed(1)} MB/s (${rangeText(r.tcp, 1, 1 / MB)})`,
        "the kernel's limit under UCX",
        '',
      ],
      [
        'latency (tag_lat, 8 B, median one-way)',
        `${r.lat.median.toFixed(1)} us (${rangeText(r.lat, 1)})`,
        `average ${r.latAvg.median.toFixed(1)} us`,
        LATENCY_ARGS.join(' '),
      ],
      ...(r.probe
        ? [
            [
              "a relay's cost per chunk (loopback hop probe)",
              `${(r.probe.perChunk * 1e6).toFixed(0)} us`,
              r.probe.timings
                .map(
                  (t) =>
                    `${formatBytes(r.probe!.bytes)} in ${t.chunks} x ${formatBytes(t.chunkSize)}: ${t.median.toFixed(3)} s (${rangeText(stat(t.seconds), 3)})`,
                )
                .join('; '),
              'T_start of the model = latency + this',
            ],
          ]
        : []),
    ],
  );

  const rows: string[][] = [
    [
      'broadcast',
      'p (relays incl. master)',
      'hops',
      'median s',
      'range s',
      'size/T MB/s',
      'chunk',
      'model s',
      'meas/model',
      's per extra hop',
      'CPU during the broadcast (median; 100% = one core)',
    ],
  ];
  // One row per (shape, p): the time against the model, and the cost of each hop beyond the first.
  const row = (label: string, p: number, s: Stat, chunk: number, modelS: number, base: Stat | null, cpu: string): string[] => [
    label,
    String(p),
    String(p - 1),
    s.median.toFixed(3),
    rangeText(s, 3),
    (r.size / s.median / MB).toFixed(1),
    formatBytes(chunk),
    modelS.toFixed(3),
    (s.median / modelS).toFixed(2),
    p > 2 && base ? ((s.median - base.median) / (p - 2)).toFixed(3) : '-',
    cpu,
  ];
  for (const p of r.ps) {
    rows.push(row(p === 2 ? 'chain, steady (p=2: T_p2p)' : 'chain, steady', p, chainStat.get(p)!, chunkAt(p), model(p), p2p, cpuText(r.chain.get(p)!)));
  }
  for (const p of r.ps) rows.push(row('chain, first version', p, firstStat.get(p)!, chunkAt(p, true), model(p, true), p2pFirst, ''));
  for (const p of r.ps) {
    const s = starStat.get(p);
    if (s !== undefined) rows.push(row('star (one after the other)', p, s, chunkOf(r, r.star.get(p)), starModel(p), p2p, cpuText(r.star.get(p)!)));
  }
  const chunkText =
    r.chunkMode === 'relays'
      ? "chunks as each chain's master chose them (the relays' default, --chunk-size auto of laminar relay)"
      : `chunks of ${formatBytes(r.chunkSize!)}${r.chunkMode === 'bench-auto' ? " (this bench's --chunk-size auto)" : ''}`;
  printTable(
    `broadcast of ${formatBytes(r.size)} in ${chunkText}, window ${r.window}; p counts the master (p=2 is one hop); ` +
      `model T(p,k) = (p+k-2)(M/k T_byte + T_start) with T_byte = 1/${(r.link.bandwidth / MB).toFixed(1)} MB/s, T_start = ${(r.link.startup * 1e6).toFixed(1)} us${r.probe || r.chunkMode === 'relays' ? " (latency + a relay's cost per chunk)" : ''}; ` +
      `each hop beyond the first should add one chunk step M/k T_byte + T_start = ${chunkStep.toFixed(3)} s at p=${maxP}; ` +
      'steady: the second version, into relays that hold a spare segment (as every step of training); first: version 1 into fresh relays',
    rows,
  );

  const arrivalRows: string[][] = [['broadcast', 'p', 'arrival of r1..r(p-1), s after publish (median round)']];
  const medianRound = (rounds: Round[]): Round => [...rounds].sort((a, b) => a.seconds - b.seconds)[Math.floor((rounds.length - 1) / 2)]!;
  for (const [kind, map] of [
    ['chain', r.chain],
    ['star', r.star],
  ] as const) {
    for (const [p, rounds] of map)
      arrivalRows.push([
        kind,
        String(p),
        medianRound(rounds)
          .arrivals.map((a) => a.toFixed(2))
          .join('  '),
      ]);
  }
  printTable('arrivals per relay', arrivalRows);

  if (r.chunkMode === 'relays') {
    const choiceRows: string[][] = [['p', 'version', "the master's choice (median round)"]];
    for (const [p, rounds] of r.chain) {
      const m = medianRound(rounds);
      for (const [label, choice] of [
        ['first', m.firstChunking],
        ['steady', m.chunking],
      ] as const) {
        choiceRows.push([String(p), label, choice ? `${formatBytes(choice.chunkSize)} (${describeChoice('auto', choice)})` : '-']);
      }
    }
    printTable("chunk size chosen by the relays (first version: defaults; steady: the master's first hop measured)", choiceRows);
  }

  const optimal = r.ps.map((p) => {
    const c = optimalChunkSize(p, r.size, r.link, 64 * 2 ** 20);
    return `p=${p}: ${formatBytes(c)} -> ${broadcastTime(p, Math.ceil(r.size / c), r.size, r.link).toFixed(3)} s`;
  });
  printTable("the model's optimal chunk size with this link", [[optimal.join(', ')]]);

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
    printTable(
      `loopback (127.0.0.1, UCX_TLS=tcp, no shaping, relay segments on ${r.shm === 'huge' ? 'a huge=within_size tmpfs' : '/dev/shm'}); median (range) of ${r.rounds}`,
      [
        ['relay hop (size / time), steady state', `${(r.loop.relay.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.relay, 1, 1 / MB)})`],
        ['relay hop, first version', `${(r.loop.first.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.first, 1, 1 / MB)})`],
        ...(r.loop.plain
          ? [
              [
                'relay hop, steady state, segments on /dev/shm (4 KiB pages)',
                `${(r.loop.plain.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.plain, 1, 1 / MB)})`,
              ],
            ]
          : []),
        ['ucx_perftest tag_bw, same messages and window', `${(r.loop.perftest.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.perftest, 1, 1 / MB)})`],
        ['plain TCP stream (Node net)', `${(r.loop.tcp.median / MB).toFixed(1)} MB/s (${rangeText(r.loop.tcp, 1, 1 / MB)})`],
      ],
    );
  }
  if (r.crashes.length > 0)
    printTable(
      `relays that died at start-up (their rounds were run again): ${r.crashes.length}`,
      r.crashes.map((c) => [c]),
    );
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
    chunk_mode: r.chunkMode,
    // The chunk of the headline (the longest chain, steady); per p below.
    chunk_bytes: chunkAt(maxP),
    chunks: chunksAt(maxP),
    chunk_bytes_by_p: byP((p) => chunkAt(p)),
    chunk_bytes_first_by_p: byP((p) => chunkAt(p, true)),
    relay_chunk_inputs:
      r.chunkMode === 'relays'
        ? byP((p) => {
            const choice = medianRound(r.chain.get(p)!).chunking;
            return choice?.inputs
              ? {
                  p: choice.p,
                  bandwidth_MBps: round(choice.inputs.bandwidth / MB, 1),
                  bandwidth_source: choice.inputs.bandwidthSource,
                  chunk_cost_us: round(choice.inputs.chunkCost * 1e6, 1),
                  chunk_cost_source: choice.inputs.chunkCostSource,
                }
              : undefined;
          })
        : null,
    window: r.window,
    rounds: r.rounds,
    ucx_env: { UCX_TLS: 'tcp', ...ucxVars },
    relay_start_crashes: r.crashes.length,
    wall_s: round(r.wallS, 0),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
