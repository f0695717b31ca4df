/**
 * The simulator end to end on a tiny scenario (tiny-scenario.ts): every system conserves its
 * trajectories, laminar beats synchronous generation on a long-tailed workload, the staleness each
 * system records is the one its mechanics imply, and the result depends on the real repack
 * planner and the relays' chunk model (a planted change moves it: issue #27).
 */
import { describe, expect, it } from 'vitest';
import { planRepack } from '../../src/manager/repack/planner.js';
import { broadcastTime } from '../../src/relay/broadcast/chunk-model.js';
import { chooseChunkSize } from '../../src/relay/chunking/chunk-choice.js';
import { REAL_COMPONENTS } from '../../src/simulate/components.js';
import { runScenario, SIMULATED_SYSTEMS } from '../../src/simulate/run.js';
import type { ScenarioRunResult } from '../../src/simulate/systems/run-context.js';
import { tinyScenario } from './tiny-scenario.js';

const scenario = tinyScenario();
const results = new Map<string, ScenarioRunResult>();
const run = (system: (typeof SIMULATED_SYSTEMS)[number]): ScenarioRunResult => {
  if (!results.has(system)) results.set(system, runScenario(scenario, system, { steps: 8 }));
  return results.get(system)!;
};

describe('runScenario on a tiny scenario', () => {
  it.each(SIMULATED_SYSTEMS)('%s: every trajectory claimed is accounted for, each batch consumed once', (system) => {
    const r = run(system);
    const batch = scenario.workload.prompts * scenario.workload.groupSize;
    expect(r.steps).toBe(8);
    expect(r.ledger.consumed).toBe(8 * batch);
    expect(r.ledger.generating + r.ledger.moving + r.ledger.buffered + r.ledger.consumed).toBe(r.ledger.claimed);
    // Every completion was recorded once with its inherent staleness, every consumption once.
    expect(r.staleness.inherent.count).toBe(r.ledger.buffered + r.ledger.consumed);
    expect(r.staleness.consumption.count).toBe(r.ledger.consumed);
    expect(r.throughput.tokensPerS).toBeGreaterThan(0);
    expect(r.kvUtilisation).toBeGreaterThan(0);
    expect(r.kvUtilisation).toBeLessThanOrEqual(1);
  });

  it('is deterministic: the same scenario and system give the same result', () => {
    const again = runScenario(scenario, 'laminar', { steps: 8 });
    expect(again.stepEndsS).toEqual(run('laminar').stepEndsS);
    expect(again.staleness).toEqual(run('laminar').staleness);
  });

  it('laminar outruns synchronous generation on a long-tailed workload', () => {
    expect(run('laminar').throughput.tokensPerS).toBeGreaterThan(1.5 * run('sync').throughput.tokensPerS);
    expect(run('laminar').throughput.tokensPerS).toBeGreaterThan(run('one-step').throughput.tokensPerS);
    expect(run('laminar').throughput.tokensPerS).toBeGreaterThan(run('stream').throughput.tokensPerS);
  });

  it('records the staleness each system implies', () => {
    for (const which of ['inherent', 'consumption'] as const) {
      expect(run('sync').staleness[which].max).toBe(0);
      // stream trains batch i from version i (its bound of 1 is in mini-batch updates).
      expect(run('stream').staleness[which].max).toBe(0);
    }
    // one-step: batch i (i >= 1) generated with W(i-1), trained into W(i+1).
    expect(run('one-step').staleness.consumption.max).toBe(1);
    const lam = run('laminar').staleness;
    expect(lam.consumption.max).toBeGreaterThan(0);
    // A trajectory is trained on no earlier than it completes, so consumption staleness bounds inherent.
    expect(lam.consumption.max).toBeGreaterThanOrEqual(lam.inherent.max);
    // Figure 10's ranges partition the completions, and each range's maximum is within the whole run's.
    expect(lam.inherentByVersion.reduce((n, r) => n + r.count, 0)).toBe(lam.inherent.count);
    expect(Math.max(...lam.inherentByVersion.map((r) => r.max))).toBe(lam.inherent.max);
  });

  it('repacks with the real planner, losing no trajectory through the moves and filling the KV caches better', () => {
    const r = run('laminar');
    expect(r.repack.moves).toBeGreaterThan(0);
    expect(r.repack.movedTrajectories).toBeGreaterThan(0);
    expect(run('laminar-no-repack').repack.moves).toBe(0);
    // Table 1's direction: consolidating the tails keeps the KV caches fuller.
    expect(r.kvUtilisation).toBeGreaterThan(run('laminar-no-repack').kvUtilisation);
  });
});

describe('the simulator drives the real components', () => {
  it('defaults to the very functions the manager and the relays import', () => {
    expect(REAL_COMPONENTS.planRepack).toBe(planRepack);
    expect(REAL_COMPONENTS.broadcastTime).toBe(broadcastTime);
    expect(REAL_COMPONENTS.chooseChunkSize).toBe(chooseChunkSize);
  });

  it('a planner that never moves changes laminar into laminar-no-repack', () => {
    const planted = runScenario(scenario, 'laminar', { steps: 8, components: { planRepack: () => [] } });
    expect(planted.repack.moves).toBe(0);
    expect(planted.stepEndsS).not.toEqual(run('laminar').stepEndsS);
    expect(planted.stepEndsS).toEqual(run('laminar-no-repack').stepEndsS);
  });

  it('a scenario with repackIntervalS 0 runs laminar without any round, as the manager does', () => {
    const off = runScenario(
      tinyScenario((x) => void (x.manager = { ...x.manager, repackIntervalS: 0 })),
      'laminar',
      { steps: 8 },
    );
    expect(off.repack.rounds).toBe(0);
    expect(off.stepEndsS).toEqual(run('laminar-no-repack').stepEndsS);
  });

  it('a chunk model with a costlier chunk changes when versions reach the rollouts', () => {
    const slow: typeof broadcastTime = (p, k, bytes, link) => broadcastTime(p, k, bytes, { ...link, startup: link.startup + 5 });
    const planted = runScenario(scenario, 'laminar-no-repack', { steps: 8, components: { broadcastTime: slow } });
    expect(planted.stepEndsS).not.toEqual(run('laminar-no-repack').stepEndsS);
  });
});
