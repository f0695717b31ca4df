/**
 * The broadcast figures of a scenario (paper §4.2, §4.3, appendix C; docs/design/simulator.md,
 * "Outputs": the broadcast table), from the same parts a laminar run uses:
 * - T(p) for chains of p = 2 … 128 relays, from the relays' chunk model (broadcastTime) at the
 *   scenario's relay link and chunk size (or chooseChunkSize's for each p with `auto`);
 * - the relay bandwidth that would make T(128) exactly the paper's 1.6 s (the paper does not
 *   give the bandwidth a relay gets);
 * - a repair: a chain of 128 relays (RelayChain, ordered by the manager's arrangeChain) carrying
 *   a version, the relay 64 hops down dying halfway through: the repair time (failure → the new
 *   plan in force, its successor receiving again), the order after it (a splice), and when the
 *   last relay holds the version, against the same broadcast without a failure;
 * - the same with the master dying halfway: the relay arrangeChain elects, and the delay.
 */
import { Simulation } from '../core/simulation.js';
import type { SimComponents } from '../components.js';
import { REAL_COMPONENTS } from '../components.js';
import { weightBytes } from '../scenario/derive.js';
import type { Scenario } from '../scenario/schema.js';
import { pushToMasterMs } from '../trainer/time-model.js';
import { chainTiming, linkOf } from './broadcast.js';
import { RelayChain } from './relay-chain.js';

export const STUDY_RELAYS = [2, 4, 8, 16, 32, 64, 128] as const;
/** The paper's bound for 127 relays (§4.2); the implied bandwidth is printed against it. */
const PAPER_BOUND_S = 1.6;

export interface RepairStudy {
  relays: number;
  /** The relay that dies (its hop in the chain; 0: the master) and when, s after the push ended. */
  failedHop: number;
  atS: number;
  repairS: number;
  /** The plan after the repair is the plan before without the dead relay (arrangeChain's splice). */
  splice: boolean;
  /** The master after the repair (for the master's death: the relay holding the most of the version). */
  masterAfter: string;
  /** When the chain's last relay holds the version, with the failure and without. */
  lastRelayS: number;
  lastRelayWithoutFailureS: number;
}

export interface BroadcastStudy {
  model: string;
  bytes: number;
  bandwidthGBs: number;
  startupUs: number;
  points: Array<{ relays: number; chunkBytes: number; chunks: number; seconds: number }>;
  /** The relay bandwidth (GB/s) for which T(128) is exactly 1.6 s at the scenario's chunk size. */
  bandwidthFor1p6GBs: number;
  relayRepair: RepairStudy;
  masterRepair: RepairStudy;
}

type Parts = Pick<SimComponents, 'broadcastTime' | 'chooseChunkSize' | 'arrangeChain'>;

export function broadcastStudy(s: Scenario, parts: Parts = REAL_COMPONENTS): BroadcastStudy {
  const bytes = weightBytes(s);
  const link = linkOf(s);
  const points = STUDY_RELAYS.map((relays) => {
    const t = chainTiming(s, relays, parts);
    return { relays, chunkBytes: t.chunkBytes, chunks: t.chunks, seconds: relays < 2 ? 0 : t.completeAfterMs[relays - 1]! / 1e3 };
  });
  const at128 = points[points.length - 1]!;
  // (p + k − 2)(M/k/B + s) = 1.6  ⇒  B = (M/k) / (1.6/(p + k − 2) − s)
  const perChunk = PAPER_BOUND_S / (128 + at128.chunks - 2) - link.startup;
  const bandwidthFor1p6GBs = perChunk > 0 ? bytes / at128.chunks / perChunk / 1e9 : Number.POSITIVE_INFINITY;
  return {
    model: s.model.name,
    bytes,
    bandwidthGBs: s.hardware.relayLink.bandwidthGBs,
    startupUs: s.hardware.relayLink.startupUs,
    points,
    bandwidthFor1p6GBs,
    relayRepair: repairStudy(s, parts, 128, 64),
    masterRepair: repairStudy(s, parts, 128, 0),
  };
}

/** One version down a chain of `relays`, the relay `failedHop` hops down dying halfway through. */
function repairStudy(s: Scenario, parts: Parts, relays: number, failedHop: number): RepairStudy {
  const run = (fail: boolean): { lastMs: number; chain: RelayChain } => {
    const sim = new Simulation();
    const bytes = weightBytes(s);
    const link = linkOf(s);
    const timing = chainTiming(s, relays, parts);
    let lastMs = 0;
    const chain = new RelayChain({
      sim,
      bytes,
      chunks: timing.chunks,
      broadcastTime: (p) => parts.broadcastTime(p, timing.chunks, bytes, link),
      pushMs: pushToMasterMs(s),
      detectMs: s.manager.relayFailureDetectS * 1e3,
      publishMs: s.manager.planPublishS * 1e3,
      arrange: parts.arrangeChain,
      onHolds: (_machine, version) => {
        if (version === 1) lastMs = Math.max(lastMs, sim.now);
      },
    });
    for (let m = 0; m < relays; m++) chain.add(m, 0);
    chain.replan();
    chain.publish(1);
    if (fail) {
      const victim = chain.relays.find((r) => r.id === chain.order[failedHop])!;
      sim.at(timing.completeAfterMs[relays - 1]! / 2, { fire: () => chain.fail(victim.machine) });
    }
    sim.run({ maxEvents: 1_000_000 });
    return { lastMs, chain };
  };
  const without = run(false);
  const withFailure = run(true);
  const repair = withFailure.chain.repairs[0]!;
  const expected = repair.orderBefore.filter((id) => id !== repair.relay);
  return {
    relays,
    failedHop,
    atS: repair.atS,
    repairS: repair.repairS,
    splice: expected.length === repair.orderAfter.length && expected.every((id, i) => repair.orderAfter[i] === id),
    masterAfter: repair.orderAfter[0] ?? '',
    lastRelayS: withFailure.lastMs / 1e3,
    lastRelayWithoutFailureS: without.lastMs / 1e3,
  };
}
