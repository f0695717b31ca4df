/**
 * The simulated relay chain (src/simulate/fleet/relay-chain.ts) on its own: a clean broadcast
 * follows the chunk model hop by hop; a relay that dies mid-broadcast cuts off every relay after
 * it until the repaired plan (the manager's arrangeChain: a splice) is in force, and they resume
 * from what they held; a dead master's place goes to the relay holding the most of the version,
 * which gets the rest from the trainer; and the broadcast study's repairs show the delay they cost.
 */
import { describe, expect, it } from 'vitest';
import { arrangeChain } from '../../src/manager/chain.js';
import { Simulation } from '../../src/simulate/core/simulation.js';
import { broadcastStudy } from '../../src/simulate/fleet/broadcast-study.js';
import { RelayChain } from '../../src/simulate/fleet/relay-chain.js';
import { loadScenario } from '../../src/simulate/scenario/load.js';
import { resolveScenarioPath } from '../../src/simulate/files.js';

/** 100 chunks of 1 ms a hop: T(p) = (p + 98) ms. */
const CHUNKS = 100;
const CHUNK_MS = 1;
const DETECT_MS = 60;
const PUBLISH_MS = 40;
const PUSH_MS = 100;

function chainOf(relays: number) {
  const sim = new Simulation();
  const held = new Map<number, number>();
  const chain = new RelayChain({
    sim,
    bytes: 1e9,
    chunks: CHUNKS,
    broadcastTime: (p) => ((p + CHUNKS - 2) * CHUNK_MS) / 1e3,
    pushMs: PUSH_MS,
    detectMs: DETECT_MS,
    publishMs: PUBLISH_MS,
    arrange: arrangeChain,
    onHolds: (machine, version) => {
      if (version === 1) held.set(machine, sim.now);
    },
  });
  for (let m = 0; m < relays; m++) chain.add(m, 0);
  chain.replan();
  return { sim, chain, held };
}

describe('the simulated relay chain', () => {
  it('a clean broadcast: the relay h hops down holds the version at T(h + 1)', () => {
    const { sim, chain, held } = chainOf(8);
    chain.publish(1);
    sim.run({ maxEvents: 10_000 });
    chain.order.forEach((id, hop) => {
      const machine = chain.relays.find((r) => r.id === id)!.machine;
      expect(held.get(machine), id).toBeCloseTo(hop === 0 ? 0 : (hop + 1 + CHUNKS - 2) * CHUNK_MS, 9);
    });
  });

  it('a relay dying mid-broadcast cuts off the relays after it until the splice is in force; they resume from what they held', () => {
    const { sim, chain, held } = chainOf(8);
    const order = [...chain.order];
    const victim = chain.relays.find((r) => r.id === order[3])!;
    chain.publish(1);
    // Halfway (T(8) = 106 ms): the repair, 100 ms later, comes after the clean broadcast would have ended.
    const failAt = 53;
    let hwmAtRepair: number[] = [];
    sim.at(failAt, { fire: () => chain.fail(victim.machine) });
    // Just before the plan is in force: the relays after the dead one still hold what they held at the fault.
    sim.at(failAt + DETECT_MS + PUBLISH_MS - 0.5, {
      fire: () => (hwmAtRepair = chain.views().flatMap((v) => (order.indexOf(v.id) > 3 ? [v.receiving[0]?.hwm ?? -1] : []))),
    });
    sim.run({ maxEvents: 10_000 });

    const [repair] = chain.repairs;
    expect(repair!.repairS).toBeCloseTo((DETECT_MS + PUBLISH_MS) / 1e3, 9);
    expect(repair!.orderAfter).toEqual(order.filter((id) => id !== victim.id));
    // At the fault the relay h hops down held 53 − (h − 1) chunks: 50, 49, 48, 47 for hops 4-7.
    expect(hwmAtRepair).toEqual([50, 49, 48, 47]);
    // The relays before the dead one were not touched; the ones after complete after the repair.
    for (const [hop, id] of order.entries()) {
      const machine = chain.relays.find((r) => r.id === id)!.machine;
      if (hop < 3) expect(held.get(machine), id).toBeLessThan(failAt + DETECT_MS + PUBLISH_MS);
      else if (hop > 3) expect(held.get(machine), id).toBeGreaterThan(failAt + DETECT_MS + PUBLISH_MS);
      else expect(held.has(machine)).toBe(false);
    }
    expect(repair!.relaysDelayed).toBe(4);
    // The first relay cut off resumes from its 50 chunks at the repair: 50 more, one per chunk time.
    const successor = chain.relays.find((r) => r.id === order[4])!;
    expect(held.get(successor.machine)).toBeCloseTo(failAt + DETECT_MS + PUBLISH_MS + (CHUNKS - 50) * CHUNK_MS, 9);
  });

  it('a dead master: the relay holding the most of the version leads, and the trainer pushes it the rest', () => {
    const { sim, chain, held } = chainOf(4);
    const order = [...chain.order];
    chain.publish(1);
    sim.at(20, { fire: () => chain.fail(chain.relays.find((r) => r.id === order[0])!.machine) });
    sim.run({ maxEvents: 10_000 });
    const [repair] = chain.repairs;
    expect(repair!.wasMaster).toBe(true);
    // At 20 ms the relay one hop down held 20 chunks, the next 19: the first is elected.
    expect(repair!.orderAfter[0]).toBe(order[1]);
    const master = chain.relays.find((r) => r.id === order[1])!;
    expect(held.get(master.machine)).toBeCloseTo(20 + DETECT_MS + PUBLISH_MS + (PUSH_MS * (CHUNKS - 20)) / CHUNKS, 9);
  });

  it('the broadcast study: a relay dying halfway delays the last relay by about the repair', () => {
    for (const name of ['math-7b', 'math-72b']) {
      const study = broadcastStudy(loadScenario(resolveScenarioPath(name)));
      for (const r of [study.relayRepair, study.masterRepair]) {
        expect(r.splice || r.failedHop === 0, name).toBe(true);
        expect(r.lastRelayS, name).toBeGreaterThanOrEqual(r.atS + r.repairS);
        expect(r.lastRelayS - r.lastRelayWithoutFailureS, name).toBeGreaterThan(0);
      }
    }
  });
});
