/**
 * The simulator end to end on a tiny scenario (tiny-scenario.ts): every system conserves its
 * trajectories, laminar beats synchronous generation on a long-tailed workload, the staleness each
 * system records is the one its mechanics imply, and the result depends on the real repack
 * planner and the relays' chunk model (a planted change moves it: issue #27).
 */
import { describe, expect, it } from 'vitest';
import { planRepack } from '../../src/manager/repack/planner.js';
import { repackRoundGroups } from '../../src/manager/repack/round.js';
import { broadcastTime } from '../../src/relay/broadcast/chunk-model.js';
import { chooseChunkSize } from '../../src/relay/chunking/chunk-choice.js';
import { mustEmptyFirst, promptsToClaim } from '../../src/rollout/claim-policy.js';
import { REAL_COMPONENTS } from '../../src/simulate/components.js';
import { runScenario, SIMULATED_SYSTEMS } from '../../src/simulate/run.js';
import type { ScenarioInput } from '../../src/simulate/scenario/schema.js';
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
    expect(r.ledger.dropped).toBe(0);
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
    expect(REAL_COMPONENTS.repackRoundGroups).toBe(repackRoundGroups);
    expect(REAL_COMPONENTS.broadcastTime).toBe(broadcastTime);
    expect(REAL_COMPONENTS.chooseChunkSize).toBe(chooseChunkSize);
    expect(REAL_COMPONENTS.mustEmptyFirst).toBe(mustEmptyFirst);
    expect(REAL_COMPONENTS.promptsToClaim).toBe(promptsToClaim);
  });

  it('a planner that never moves changes laminar into laminar-no-repack', () => {
    const planted = runScenario(scenario, 'laminar', { steps: 8, components: { planRepack: () => [] } });
    expect(planted.repack.moves).toBe(0);
    expect(planted.stepEndsS).not.toEqual(run('laminar').stepEndsS);
    expect(planted.stepEndsS).toEqual(run('laminar-no-repack').stepEndsS);
  });

  it('a round that forgets the previous round’s KV (C_prev) finds no rollout ramping down', () => {
    const forgetful: typeof repackRoundGroups = (rollouts, _kvAtLastRound, limits, byModel) => repackRoundGroups(rollouts, new Map(), limits, byModel);
    const planted = runScenario(scenario, 'laminar', { steps: 8, components: { repackRoundGroups: forgetful } });
    expect(planted.repack.rounds).toBeGreaterThan(0);
    expect(planted.repack.moves).toBe(0);
    expect(planted.stepEndsS).not.toEqual(run('laminar').stepEndsS);
  });

  it('a round that also plans rollouts already in a move changes the moves and the run', () => {
    const eager: typeof repackRoundGroups = (rollouts, kv, limits, byModel) =>
      repackRoundGroups(
        rollouts.map((r) => ({ ...r, available: true })),
        kv,
        limits,
        byModel,
      );
    const planted = runScenario(scenario, 'laminar', { steps: 8, components: { repackRoundGroups: eager } });
    expect(planted.repack).not.toEqual(run('laminar').repack);
    expect(planted.stepEndsS).not.toEqual(run('laminar').stepEndsS);
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

  it("laminar's rollouts claim by the rollout agent's rule: a planted rule that claims half as much changes the run", () => {
    const half: typeof promptsToClaim = (policy, inFlight, perPrompt) => Math.max(1, Math.floor(promptsToClaim(policy, inFlight, perPrompt) / 2));
    // A claim of maxConcurrency (16, 4 prompts): with rolloutBatchShare this batch's share is one
    // prompt a rollout, which half of leaves as it is.
    const whole = { rolloutBatchShare: false };
    const planted = runScenario(scenario, 'laminar', { steps: 8, mechanisms: whole, components: { promptsToClaim: half } });
    const plain = runScenario(scenario, 'laminar', { steps: 8, mechanisms: whole });
    expect(planted.ledger.consumed).toBe(plain.ledger.consumed);
    expect(planted.stepEndsS).not.toEqual(plain.stepEndsS);
  });

  it("continuous claims (the agent's --max-in-flight) refill a rollout as trajectories finish: a different, still conserving and deterministic run", () => {
    const continuous = tinyScenario((x) => void (x.claimMode = 'continuous'));
    // Up to maxConcurrency (16) in flight: with rolloutBatchShare a rollout's share of this batch
    // is one prompt of 4, and a claim fills at least a quarter of it, so the modes would coincide.
    const whole = { rolloutBatchShare: false };
    const a = runScenario(continuous, 'laminar', { steps: 8, mechanisms: whole });
    const b = runScenario(continuous, 'laminar', { steps: 8, mechanisms: whole });
    const batch = runScenario(scenario, 'laminar', { steps: 8, mechanisms: whole });
    expect(b.stepEndsS).toEqual(a.stepEndsS);
    expect(b.staleness).toEqual(a.staleness);
    expect(a.ledger.consumed).toBe(batch.ledger.consumed);
    expect(a.ledger.generating + a.ledger.moving + a.ledger.buffered + a.ledger.consumed).toBe(a.ledger.claimed);
    expect(a.stepEndsS).not.toEqual(batch.stepEndsS);
  });

  it('a chunk model with a costlier chunk changes when versions reach the rollouts', () => {
    const slow: typeof broadcastTime = (p, k, bytes, link) => broadcastTime(p, k, bytes, { ...link, startup: link.startup + 5 });
    const planted = runScenario(scenario, 'laminar-no-repack', { steps: 8, components: { broadcastTime: slow } });
    expect(planted.stepEndsS).not.toEqual(run('laminar-no-repack').stepEndsS);
  });
});

describe('the trainer samples through the real strategies', () => {
  const withTrainer = (trainer: Partial<Pick<ScenarioInput['trainer'], 'strategy' | 'maxStaleness'>>): ScenarioRunResult =>
    runScenario(
      tinyScenario((x) => void (x.trainer = { ...x.trainer, ...trainer })),
      'laminar',
      { steps: 8 },
    );

  it('a staleness bound caps consumption staleness, and the ledger counts what it drops', () => {
    const fifo = run('laminar');
    const r = withTrainer({ maxStaleness: 2 });
    expect(fifo.staleness.consumption.max).toBeGreaterThan(2);
    expect(r.staleness.consumption.max).toBeLessThanOrEqual(2);
    expect(r.steps).toBe(8);
    expect(r.ledger.dropped).toBeGreaterThan(0);
    // Consumed or dropped, never lost: every completion is in the buffer, trained on or dropped.
    expect(r.ledger.generating + r.ledger.moving + r.ledger.buffered + r.ledger.consumed + r.ledger.dropped).toBe(r.ledger.claimed);
    expect(r.staleness.inherent.count).toBe(r.ledger.buffered + r.ledger.consumed + r.ledger.dropped);
    expect(r.staleness.consumption.count).toBe(r.ledger.consumed);
  });

  it.each(['groups', 'uniform'] as const)('%s: trains every step and accounts for every trajectory', (strategy) => {
    const r = withTrainer({ strategy });
    expect(r.steps).toBe(8);
    expect(r.ledger.dropped).toBe(0);
    expect(r.ledger.consumed).toBe(8 * scenario.workload.prompts * scenario.workload.groupSize);
    expect(r.ledger.generating + r.ledger.moving + r.ledger.buffered + r.ledger.consumed).toBe(r.ledger.claimed);
  });

  it('whole groups wait for a group’s last member, so the trainer consumes differently from fifo', () => {
    expect(withTrainer({ strategy: 'groups' }).staleness.consumption).not.toEqual(run('laminar').staleness.consumption);
  });
});
