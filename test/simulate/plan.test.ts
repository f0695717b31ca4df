/**
 * `laminar plan`'s parts without the CLI: the flags (each bad one ERR_INVALID_ARG), the model
 * sizes and their scaling, the scenario built from the flags, the grid of splits and the trainer's
 * ceiling, the choice of the best split, the repack-interval rule, and the whole search on a tiny
 * scenario, whose chunk size is the relays' chooseChunkSize for the best split's chain (a planted
 * chunk-size function changes the answer and the runs).
 */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { chooseChunkSize } from '../../src/relay/chunking/chunk-choice.js';
import { linkOf } from '../../src/simulate/fleet/broadcast.js';
import { chooseSplit, repackIntervalFor, trainerStepS, type SplitOutcome } from '../../src/simulate/plan/choice.js';
import { trainerCeiling, trainerMachineGrid } from '../../src/simulate/plan/grid.js';
import { nearestShipped, parseModel, scaleModel } from '../../src/simulate/plan/model-size.js';
import { planScenario } from '../../src/simulate/plan/plan-scenario.js';
import { planJob, type PlanResult } from '../../src/simulate/plan/plan.js';
import { DEFAULT_SPLITS, DEFAULT_STEPS, parsePlanFlags, type PlanFlags } from '../../src/simulate/plan/request.js';
import { weightBytes } from '../../src/simulate/scenario/derive.js';
import { trainStepMs } from '../../src/simulate/trainer/time-model.js';
import { tinyScenario } from './tiny-scenario.js';

/** `fn` throws ERR_INVALID_ARG with a message matching `message`. */
function expectInvalidArg(fn: () => unknown, message: RegExp): void {
  expect(fn).toThrow(message);
  try {
    fn();
  } catch (err) {
    expect((err as { code?: string }).code).toBe(ErrorCodes.INVALID_ARG);
  }
}
const request = (flags: PlanFlags) => parsePlanFlags({ model: '7B', gpus: '64', ...flags });

describe('laminar plan: flags', () => {
  it('takes the defaults the help states', () => {
    const r = request({});
    expect(r).toMatchObject({ model: { kind: 'shipped', name: '7B' }, gpus: 64, linkGbit: null, medianTokens: null, toolCalls: false });
    expect([r.steps, r.splits]).toEqual([DEFAULT_STEPS, DEFAULT_SPLITS]);
    expect([DEFAULT_STEPS, DEFAULT_SPLITS]).toEqual([10, 8]);
  });

  it.each<[PlanFlags, RegExp]>([
    [{ model: undefined }, /--model is required/],
    [{ gpus: 'many' }, /--gpus takes an integer >= 1, got "many"/],
    [{ gpus: '0' }, /--gpus takes an integer >= 1/],
    [{ steps: '1' }, /--steps takes an integer >= 2/],
    [{ splits: '0' }, /--splits takes an integer >= 1/],
    [{ linkGbit: '0' }, /--link-gbit takes a number > 0/],
    [{ p99Ratio: '0.5' }, /--p99-ratio takes a number >= 1/],
    [{ maxTokens: '1.5' }, /--max-tokens takes an integer >= 1/],
    [{ medianTokens: '' }, /--median-tokens takes an integer >= 1/],
    [{ model: '14' }, /--model takes 7B, 32B, 72B or a parameter count such as 14B or 14e9/],
    [{ model: 'big' }, /--model takes/],
  ])('%j is ERR_INVALID_ARG', (flags, message) => {
    expectInvalidArg(() => request(flags), message);
  });

  it('a bad combination is ERR_INVALID_ARG naming the flag to change', () => {
    expectInvalidArg(() => planScenario(request({ gpus: '60' })), /--gpus 60: .* a multiple of 8, at least 16/);
    expectInvalidArg(() => planScenario(request({ gpus: '8' })), /--gpus 8: /);
    expectInvalidArg(() => planScenario(request({ medianTokens: '20000' })), /--median-tokens 20000 is above the longest output, 16,384 tokens/);
    expectInvalidArg(() => planScenario(request({ maxTokens: '2048' })), /--max-tokens 2048 is below the base's output median \(up to 4,500 tokens\)/);
    expectInvalidArg(() => planScenario(request({ model: '400B' })), /does not fit one machine of 8 × 80 GB/);
  });
});

describe('laminar plan: model sizes', () => {
  it('names the shipped sizes, reads other sizes in billions or as a count', () => {
    expect(parseModel('72b')).toEqual({ kind: 'shipped', name: '72B' });
    expect(parseModel('14B')).toEqual({ kind: 'params', params: 14e9 });
    expect(parseModel('1.5b')).toEqual({ kind: 'params', params: 1.5e9 });
    expect(parseModel('14e9')).toEqual({ kind: 'params', params: 14e9 });
  });

  it('scales from the shipped model nearest in log scale', () => {
    const shipped = { '7B': 7.62e9, '32B': 32.8e9, '72B': 72.7e9 };
    expect(nearestShipped(14e9, shipped)).toBe('7B');
    expect(nearestShipped(20e9, shipped)).toBe('32B');
    expect(nearestShipped(50e9, shipped)).toBe('72B');
    expect(nearestShipped(1e9, shipped)).toBe('7B');
    const base = { name: 'base', model: { name: 'M', params: 10e9, layers: 40, kvBytesPerToken: 100 * 1024, weightBytes: 20e9 } };
    const { model, derived } = scaleModel(base, 80e9);
    // r = 8: layers × 2, KV bytes × 4, weights × 8.
    expect(model).toEqual({ name: '80B (scaled from M)', params: 80e9, layers: 80, kvBytesPerToken: 400 * 1024, weightBytes: 160e9 });
    expect(derived.map((d) => d.field)).toEqual(['model.params', 'model.weightBytes', 'model.layers', 'model.kvBytesPerToken']);
    // A base that states attention's width: × r^(1/3), to whole heads of 128.
    const wide = scaleModel({ ...base, model: { ...base.model, attentionWidth: 3584 } }, 80e9);
    expect(wide.model.attentionWidth).toBe(7168);
    expect(wide.derived.map((d) => d.field)).toContain('model.attentionWidth');
  });

  it("builds the plan's scenario on the shipped one, saying what it changed", () => {
    const plain = planScenario(request({}));
    expect(plain.base).toBe('math-7b');
    expect(plain.derived.map((d) => d.field)).toEqual(['broadcast.chunkBytes']);
    expect(plain.scenario.systems).toEqual(['laminar']);
    expect(plain.scenario.broadcast.chunkBytes).toBe('auto');

    const scaled = planScenario(request({ model: '14B', linkGbit: '400', medianTokens: '1000', p99Ratio: '5', maxTokens: '8192' }));
    expect(scaled.base).toBe('math-7b');
    expect(scaled.scenario.model).toMatchObject({ params: 14e9, layers: 34, attentionWidth: 4352 });
    expect(scaled.scenario.hardware.relayLink.bandwidthGBs).toBe(50);
    expect(scaled.scenario.hardware.trainerToMasterGBs).toBe(50);
    expect(scaled.scenario.workload.outputTokens).toEqual({ median: [{ step: 0, tokens: 1000 }], p99OverMedian: 5, max: 8192, promptShare: 0.5 });
    expect(scaled.derived.map((d) => d.field)).toEqual(
      expect.arrayContaining(['model.layers', 'hardware.relayLink.bandwidthGBs, hardware.trainerToMasterGBs', 'workload.outputTokens.median']),
    );

    expect(planScenario(request({ toolCalls: true })).base).toBe('toolcall-7b');
    const tools32 = planScenario(request({ model: '32B', toolCalls: true }));
    expect(tools32.base).toBe('math-32b');
    expect(tools32.scenario.workload.task).toBe('tool-call');
    expect(tools32.derived.map((d) => d.field)).toContain('workload.toolCalls');

    // A request longer than a TP-1 cache holds (938 K tokens of 7B) raises the TP.
    const long = planScenario(request({ maxTokens: '1000000' }));
    expect(long.scenario.rolloutTp.laminar).toBe(2);
    expect(long.derived.find((d) => d.field === 'rolloutTp.laminar')?.value).toBe('2');
  });

  it('--set changes the base before the flags: listed, seen by what the flags derive, judged by the schema', () => {
    const slow = planScenario(request({ set: ['trainer.mfu=0.25', 'workload.outputTokens.promptShare=0'], medianTokens: '2000' }));
    expect(slow.scenario.trainer.mfu).toBe(0.25);
    expect(slow.scenario.workload.outputTokens.promptShare).toBe(0);
    expect(slow.scenario.workload.outputTokens.median).toEqual([{ step: 0, tokens: 2000 }]);
    expect(slow.derived.filter((d) => d.how === '--set')).toEqual([
      { field: 'trainer.mfu', value: '0.25', how: '--set' },
      { field: 'workload.outputTokens.promptShare', value: '0', how: '--set' },
    ]);
    expect(slow.scenario.notes).toContain('laminar plan: trainer.mfu = 0.25: --set.');
    // The rollout TP that fits follows a longest response --set made longer.
    const long = planScenario(request({ set: ['workload.outputTokens.max=1000000'] }));
    expect(long.scenario.rolloutTp.laminar).toBe(2);
    expect(() => planScenario(request({ set: ['trainer.mfuu=0.25'] }))).toThrow(
      expect.objectContaining({ code: ErrorCodes.BAD_SCENARIO, details: { path: 'laminar plan', field: 'trainer' } }),
    );
    expect(() => request({ set: ['trainer.mfu'] })).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
    // Lengths by their quantiles in place of the log-normal; --p99-ratio puts a log-normal back.
    const table = '[{"p":0.5,"ofMedian":1},{"p":0.9,"ofMedian":2},{"p":0.99,"ofMedian":4}]';
    const sets = ['workload.outputTokens.p99OverMedian=null', `workload.outputTokens.quantiles=${table}`];
    const quantiles = planScenario(request({ set: sets }));
    expect(quantiles.scenario.workload.outputTokens.quantiles).toEqual(JSON.parse(table));
    expect(quantiles.scenario.workload.outputTokens.p99OverMedian).toBeNull();
    const back = planScenario(request({ set: sets, p99Ratio: '8' }));
    expect(back.scenario.workload.outputTokens.quantiles).toBeUndefined();
    expect(back.scenario.workload.outputTokens.p99OverMedian).toBe(8);
    expect(back.derived.filter((d) => d.field === 'workload.outputTokens.p99OverMedian').map((d) => d.how)).toEqual([
      '--set',
      '--p99-ratio (the base: its quantiles)',
    ]);
  });
});

describe('laminar plan: grid, ceiling, choice, repack interval', () => {
  it('spreads at most `splits` trainer sizes over 1 … machines − 1, most first', () => {
    expect(trainerMachineGrid(8, 8)).toEqual([7, 6, 5, 4, 3, 2, 1]);
    expect(trainerMachineGrid(2, 8)).toEqual([1]);
    expect(trainerMachineGrid(32, 8)).toEqual([31, 27, 22, 18, 14, 10, 5, 1]);
    expect(trainerMachineGrid(128, 1)).toEqual([64]);
    expect(() => trainerMachineGrid(1, 8)).toThrow(RangeError);
  });

  it("a trainer's ceiling is its time model's rate", () => {
    const s = tinyScenario();
    expect(trainerCeiling(s, 16)).toBeCloseTo(5e6 / (trainStepMs(s, 5e6, 16) / 1e3), 6);
    expect(trainerCeiling(s, 32)).toBeCloseTo(2 * trainerCeiling(s, 16), 6);
  });

  const outcome = (trainGpus: number, tokensPerS: number, inherentMax = 3, rolloutGpus = 64 - trainGpus): SplitOutcome => ({
    trainGpus,
    rolloutGpus,
    tokensPerS,
    inherent: { p50: 1, p90: 2, max: inherentMax },
    consumption: { p50: 1, p90: 2, max: 4 },
  });

  it('chooses the highest throughput; within 2 % the least stale; then the fewest rollout GPUs', () => {
    const clear = chooseSplit([outcome(56, 90_000), outcome(40, 220_000), outcome(48, 180_000)]);
    expect(clear.best.trainGpus).toBe(40);
    expect(clear.reason).toBe('the highest training throughput, 220,000 tokens/s (the next: 180,000 at 48 trainer GPUs)');
    const tie = chooseSplit([outcome(40, 220_000, 2), outcome(32, 222_000, 4)]);
    expect(tie.best.trainGpus).toBe(40);
    expect(tie.reason).toMatch(
      /^within 2 % of the highest throughput \(222,000 tokens\/s at 32 trainer GPUs\), and less stale: inherent p50\/p90\/max 1\/2\/2 against 1\/2\/4/,
    );
    const outside = chooseSplit([outcome(40, 200_000, 2), outcome(32, 222_000, 4)]);
    expect(outside.best.trainGpus).toBe(32);
    const same = chooseSplit([outcome(32, 222_000), outcome(40, 222_000)]);
    expect(same.best.trainGpus).toBe(40);
    expect(same.ties.map((o) => o.trainGpus)).toEqual([32]);
  });

  it('repacks every 5 s, or a tenth of a trainer step shorter than 50 s', () => {
    expect(repackIntervalFor(50)).toBe(5);
    expect(repackIntervalFor(600)).toBe(5);
    expect(repackIntervalFor(49)).toBe(4.9);
    expect(repackIntervalFor(12.3456)).toBe(1.235);
    expect(repackIntervalFor(0.001)).toBe(0.001);
    expect(() => repackIntervalFor(0)).toThrow(RangeError);
    // The trainer step: the median interval between actor updates after the warm-up (the first 100 s left out).
    expect(trainerStepS([0, 100, 110, 130, 150], 2)).toBe(20);
    expect(trainerStepS([10, 30], 0)).toBe(20);
  });
});

describe('laminar plan: the search on a tiny scenario', () => {
  // 32 GPUs in 4 machines of 8: trainer sizes 24, 16, 8; short steps, so a repack interval under 5 s.
  const scenario = tinyScenario((s) => {
    s.systems = ['laminar'];
    s.broadcast = { chunkBytes: 'auto' };
  });
  const plan = planJob(scenario, { steps: 4, splits: 8 });

  it('simulates the grid most trainer GPUs first, never a split its ceiling rules out', () => {
    expect(plan.rows.map((r) => r.placement.trainGpus)).toEqual([24, 16, 8]);
    expect(plan.gridSize).toBe(3);
    for (const row of plan.rows) {
      if (row.result !== null) expect(row.result.throughput.tokensPerS).toBeLessThanOrEqual(row.ceilingTokensPerS);
      else expect(row.ceilingTokensPerS).toBeLessThan(plan.best.result.throughput.tokensPerS);
      expect(row.rolloutsPerTrainGpu).toBe(row.placement.rollouts / row.placement.trainGpus);
    }
    const simulated = plan.rows.filter((r) => r.result !== null);
    const top = Math.max(...simulated.map((r) => r.result!.throughput.tokensPerS));
    expect(plan.best.result.throughput.tokensPerS).toBeGreaterThanOrEqual(top * 0.98);
  });

  it("recommends chooseChunkSize's chunk for the best split's chain and a tenth of a short step, and runs that configuration", () => {
    const relays = plan.best.placement.rolloutMachines;
    expect(plan.chunk.relays).toBe(relays);
    expect(plan.chunk.bytes).toBe(chooseChunkSize(weightBytes(scenario), relays, linkOf(scenario)).chunkSize);
    expect(plan.trainerStepS).toBeLessThan(50);
    expect(plan.repackIntervalS).toBe(repackIntervalFor(plan.trainerStepS));
    expect(plan.confirmed).toBe(true);
    expect(plan.final).not.toBe(plan.best.result);
    expect(plan.final.placement.trainGpus).toBe(plan.best.placement.trainGpus);
  });

  it('refines around the best to whole machines, from a grid of one split', () => {
    const coarse = planJob(scenario, { steps: 4, splits: 1 });
    expect(coarse.gridSize).toBe(1);
    expect(coarse.rows.map((r) => [r.placement.trainGpus, r.stage])).toEqual([
      [24, 'refine'],
      [16, 'grid'],
      [8, 'refine'],
    ]);
  });

  it('leaves out the splits whose trainer cannot reach the best, and says so', () => {
    // A trainer at 1 % MFU is the bottleneck of every split: after the first, the smaller trainers cannot win.
    const slow = tinyScenario((s) => {
      s.systems = ['laminar'];
      s.trainer.mfu = 0.01;
    });
    const events: string[] = [];
    const p = planJob(slow, { steps: 3, splits: 8, progress: (e) => events.push(`${e.kind} ${e.row.placement.trainGpus}`) });
    // Then the best again with a repack interval of a tenth of its step (under 50 s here).
    expect(events).toEqual(['simulated 24', 'skipped 16', 'skipped 8', 'confirmed 24']);
    expect(p.best.placement.trainGpus).toBe(24);
    expect(p.rows.filter((r) => r.result === null).every((r) => r.ceilingTokensPerS < p.best.result.throughput.tokensPerS)).toBe(true);
  });

  it('a planted chunk-size function changes the answer and the runs', () => {
    const asked: number[] = [];
    const planted: typeof chooseChunkSize = (bytes, p, link) => {
      asked.push(p);
      return { ...chooseChunkSize(bytes, p, link), chunkSize: 4096, chunks: Math.ceil(bytes / 4096) };
    };
    const replanned: PlanResult = planJob(scenario, { steps: 4, splits: 1, components: { chooseChunkSize: planted } });
    expect(replanned.chunk.bytes).toBe(4096);
    expect(replanned.chunk.bytes).not.toBe(plan.chunk.bytes);
    // The runs' broadcasts asked it too, for their chains (one relay per rollout machine).
    expect(asked).toContain(replanned.best.placement.rolloutMachines);
    expect(asked.length).toBeGreaterThan(1);
  });
});
