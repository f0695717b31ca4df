/** Remaining-length prediction for agentic trajectories (issue #49, Heddle §4.1) against the group-median baseline. */
import { describe, expect, it } from 'vitest';
import { seededRandom } from '../../src/common/random.js';
import { GroupMedianBaseline } from '../../src/manager/agentic/group-median-baseline.js';
import { LengthPredictor } from '../../src/manager/agentic/length-predictor.js';
import { replayPredictions, type TrajectoryTrace } from '../../src/manager/agentic/prediction-replay.js';
import type { RemainingLengthPredictor } from '../../src/manager/agentic/remaining-length.js';
import { resolveScenarioPath } from '../../src/simulate/files.js';
import { loadScenario } from '../../src/simulate/scenario/load.js';
import { turnTraces } from '../../src/simulate/workload/turn-traces.js';
import { Workload } from '../../src/simulate/workload/workload.js';

const toolCallWorkload = (): Workload => new Workload(loadScenario(resolveScenarioPath('toolcall-7b')));

/** Runs whole groups through a predictor: each member starts, makes one call at `callAt`, finishes at `total`. */
function feedGroups(p: RemainingLengthPredictor, groups: { totals: number[]; callAt: (total: number) => number }[], prefix = 'g'): void {
  groups.forEach(({ totals, callAt }, g) => {
    const group = `${prefix}${g}`;
    totals.forEach((total, i) => {
      const id = `${group}-${i}`;
      p.observe({ id, group, tokens: 0, turns: 0 });
      p.observe({ id, group, tokens: callAt(total), turns: 1 });
    });
    totals.forEach((total, i) => p.finish(`${group}-${i}`, { tokens: total, turns: 2 }));
  });
}

describe('LengthPredictor', () => {
  it("beats the group's median so far on the simulator's tool-call workload", () => {
    const traces = turnTraces(toolCallWorkload(), 3, 64);
    const predictor = replayPredictions(traces, new LengthPredictor(), 1);
    const baseline = replayPredictions(traces, new GroupMedianBaseline(), 1);
    expect(predictor.predictions).toBe(baseline.predictions);
    expect(predictor.predictions).toBeGreaterThan(5000);
    // 0.754 and 0.648 at this size (the bench's full batch: 0.753, 0.648); issue #49 asks for <= 0.8.
    expect(predictor.tokensMae / baseline.tokensMae).toBeLessThan(0.8);
    expect(predictor.afterFirstTurn.tokensMae / baseline.afterFirstTurn.tokensMae).toBeLessThan(0.7);
    expect(predictor.turnsMae).toBeLessThan(baseline.turnsMae);
  });

  it('tells a trajectory that has run long from one that will end soon, where the median cannot', () => {
    // Half of every group ends at 1,000 tokens, half at 10,000; all call a tool halfway.
    const history = Array.from({ length: 64 }, () => ({
      totals: [...Array<number>(8).fill(1000), ...Array<number>(8).fill(10_000)],
      callAt: (t: number) => t / 2,
    }));
    const predictor = new LengthPredictor();
    const baseline = new GroupMedianBaseline();
    feedGroups(predictor, history);
    feedGroups(baseline, history);
    predictor.observe({ id: 'short', group: 'new', tokens: 0, turns: 0 });
    predictor.observe({ id: 'long', group: 'new', tokens: 0, turns: 0 });
    expect(predictor.observe({ id: 'short', group: 'new', tokens: 500, turns: 1 }).tokens).toBeCloseTo(500, -1);
    expect(predictor.observe({ id: 'long', group: 'new', tokens: 5000, turns: 1 }).tokens).toBeCloseTo(5000, -2);
    expect(predictor.observe({ id: 'long', group: 'new', tokens: 5000, turns: 1 }).turns).toBe(1);
    // The baseline's median total is 5,500 for both: 5,000 and 500 remaining, the wrong way round.
    baseline.observe({ id: 'long', group: 'new', tokens: 0, turns: 0 });
    expect(baseline.observe({ id: 'long', group: 'new', tokens: 5000, turns: 1 }).tokens).toBe(500);
  });

  it('learns to trust a group only when prompts differ in length', () => {
    const random = seededRandom(7);
    const logNormal = (median: number): number =>
      Math.round(median * Math.exp(0.5 * Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random())));
    const groups = (scaleOf: (g: number) => number) =>
      Array.from({ length: 96 }, (_, g) => ({ totals: Array.from({ length: 16 }, () => logNormal(scaleOf(g))), callAt: (t: number) => Math.floor(t / 2) }));
    const alike = new LengthPredictor();
    feedGroups(
      alike,
      groups(() => 3000),
    );
    const different = new LengthPredictor();
    feedGroups(
      different,
      groups((g) => (g % 2 === 0 ? 1000 : 8000)),
    );
    expect(alike.groupWeight(8)).toBeLessThan(0.2);
    expect(different.groupWeight(8)).toBeGreaterThan(0.8);
    // With half a long group finished, its members are predicted from the group's scale.
    for (let i = 0; i < 16; i++) different.observe({ id: `x${i}`, group: 'long', tokens: 0, turns: 0 });
    for (let i = 0; i < 8; i++) different.finish(`x${i}`, { tokens: 8000, turns: 2 });
    expect(different.observe({ id: 'x15', group: 'long', tokens: 0, turns: 0 }).tokens).toBeGreaterThan(5000);
  });

  it('a member that leaves unfinished (moved, given back) no longer holds its group out of the history', () => {
    for (const p of [new LengthPredictor(), new GroupMedianBaseline()]) {
      for (let i = 0; i < 4; i++) p.observe({ id: `a${i}`, group: 'a', tokens: 0, turns: 0 });
      for (let i = 0; i < 3; i++) p.finish(`a${i}`, { tokens: 500, turns: 2 });
      // a3 is still running: group a is not history yet, and a new group has nothing to go by.
      expect(p.observe({ id: 'b0', group: 'b', tokens: 0, turns: 0 }).tokens).toBe(0);
      p.forget('a3');
      p.forget('a3'); // twice, or an unknown id: nothing
      expect(p.observe({ id: 'c0', group: 'c', tokens: 0, turns: 0 }).tokens).toBe(500);
    }
  });

  it('is told finishes before the predictions made at the same moment', () => {
    const seen: string[] = [];
    const recorder: RemainingLengthPredictor = {
      observe: (p) => (seen.push(`observe ${p.id} ${p.tokens}`), { tokens: 0, turns: 1 }),
      finish: (id) => void seen.push(`finish ${id}`),
      forget: (id) => void seen.push(`forget ${id}`),
    };
    const traces: TrajectoryTrace[] = [
      { id: 'a', group: 'g', step: 0, callsAt: [], callTimesMs: [], startMs: 0, totalTokens: 10, finishMs: 100 },
      { id: 'b', group: 'g', step: 0, callsAt: [5], callTimesMs: [100], startMs: 0, totalTokens: 10, finishMs: 300 },
    ];
    const e = replayPredictions(traces, recorder);
    expect(seen).toEqual(['observe a 0', 'observe b 0', 'finish a', 'observe b 5', 'finish b']);
    expect(e.predictions).toBe(3);
    expect(e.afterFirstTurn.predictions).toBe(1);
  });
});

describe('turnTraces', () => {
  it("replays the workload's own draws: calls, lengths and steps one after another", () => {
    const workload = toolCallWorkload();
    const traces = turnTraces(workload, 2, 4);
    expect(traces).toHaveLength(2 * 4 * workload.groupSize);
    for (const t of traces) {
      const n = Number(t.id.slice(1));
      expect(t.totalTokens).toBe(workload.outputTokens(n));
      expect(t.callsAt).toEqual(workload.callsOf(n));
      expect(t.group).toBe(`g${workload.promptOf(n)}`);
      expect(t.callTimesMs.every((at, k) => k === 0 || at > t.callTimesMs[k - 1]!)).toBe(true);
      expect(t.finishMs).toBeGreaterThan(t.callTimesMs.at(-1) ?? t.startMs);
    }
    const stepEnd = Math.max(...traces.filter((t) => t.step === 0).map((t) => t.finishMs));
    expect(traces.filter((t) => t.step === 1).every((t) => t.startMs === stepEnd)).toBe(true);
    // Step 1's prompts are nominal step 1's, so lengths drift as in the simulator.
    expect(traces.find((t) => t.step === 1)!.group).toBe(`g${workload.promptsPerStep}`);
  });
});
