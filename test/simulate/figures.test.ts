/**
 * The paper's figures as tests (issue #27: "each reproduced figure is a test with its tolerance,
 * so a change that breaks the agreement with the paper fails CI"). The smaller settings of the
 * shipped scenarios run here, a few steps each: math-7b on 16 and 64 GPUs under laminar and the
 * four Figure 11 baselines (AReaL included), math-32b on 128 GPUs with and without repack (Table 1, §8.4,
 * Figure 15), math-72b for the analytic rows (broadcast, actor stall, chain repair and master
 * election on 128 relays), failure-32b-128 whole (§8.5: a rollout machine killed and replaced) and
 * toolcall-7b on 16 and 32 GPUs under laminar and the four baselines (Figure 12). The 1,024-GPU
 * settings run in `npm run bench -- simulate`.
 *
 * - Every comparison row within its tolerance on these runs today (WITHIN_TODAY) must stay so,
 *   checked against the tolerance in src/simulate/paper-figures.json itself.
 * - Every other row must carry a reason from known-deviations.ts, not the "no known reason"
 *   fallback; a row that comes within belongs in WITHIN_TODAY (the test says so), so the list
 *   only ever tightens.
 * - Every run conserves its trajectories, and the repack rows depend on the real planner: a
 *   planted planner that never moves turns laminar's Table 1 figures into laminar-no-repack's.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildResults } from '../../src/simulate/report/results.js';
import type { ComparisonRow } from '../../src/simulate/report/paper-comparison.js';
import { runScenario } from '../../src/simulate/run.js';
import { loadScenario, type Scenario } from '../../src/simulate/scenario/load.js';
import type { SystemName } from '../../src/simulate/scenario/schema.js';
import type { ScenarioRunResult } from '../../src/simulate/systems/run-context.js';

const STEPS = 6;
const BASELINES_AND_LAMINAR = ['laminar', 'one-step', 'stream', 'sync', 'areal'] as const;
const WARMUP = 3;
const FALLBACK = 'no known reason';

const scenarioFile = (name: string): string => fileURLToPath(new URL(`../../src/simulate/scenarios/${name}.json`, import.meta.url));
const figures = (
  JSON.parse(readFileSync(fileURLToPath(new URL('../../src/simulate/paper-figures.json', import.meta.url)), 'utf8')) as {
    figures: { id: string; tolerance?: number | null }[];
  }
).figures;

/**
 * The rows within their tolerance (or bound) on these runs as of 2026-11-29. Issue #48's mechanisms
 * (attention's KV read above all) moved fig11.avg_speedup.one_step and .stream, Figure 10's p90,
 * Figure 15's gain and §8.5's generation ratios out, each with its reason in known-deviations.ts,
 * and fig11.scaling_efficiency.laminar.max and fig12.scaling_efficiency in; attention's FLOPs in
 * training (trainingAttention) moved fig11.avg_speedup.small_scale_all_baselines in (1.22 of 1.41).
 * A rollout's batch as its share of the global batch (rolloutBatchShare, 2026-11-30) moved Figure
 * 10's p90 (3 → 1), Table 1's KV utilisation without repack (0.88 → 0.77, the paper's 0.72) and
 * Figure 15's generation gain (1.04 → 1.08, 0.86 of the paper's 1.26, near the edge) in,
 * and §8.5's generation during the outage out (0.84 → 0.74 of before, the bound 0.85 of the
 * paper's 0.875: a shorter, deeper cycle per engine, whose phases the windows compare). Measured
 * against the same windows of the run without the failure (2026-11-30), it is back in (0.84, 0.96
 * of the paper's), and the recovery 0.995.
 */
const WITHIN_TODAY = [
  'fig10.inherent_staleness_typical',
  'fig11.scaling_efficiency.laminar.max',
  'sec8_1.max_inherent_staleness',
  'tab1.kv_util.with_repack',
  'tab1.kv_util.without_repack',
  'sec8_4.kv_util_gain',
  'fig15.gen_throughput_gain',
  'sec4_2.broadcast_72b_127',
  'sec8_3.actor_stall.32B',
  'sec8_3.actor_stall.72B',
  'sec4_3.chain_repair',
  'sec4_3.master_reelection',
  'sec8_5.training_unaffected',
  'sec8_5.generation_drop',
  'sec8_5.generation_recovered',
  'fig12.speedup_range.tool_call_7b.max',
  'fig12.scaling_efficiency',
  'fig11.avg_speedup.small_scale_all_baselines',
];

/** The figure of paper-figures.json a row checks (a row id may add a suffix: tab1.kv_util.with_repack). */
function figureOf(rowId: string): { id: string; tolerance?: number | null } {
  const parts = rowId.split('.');
  for (let n = parts.length; n > 0; n--) {
    const f = figures.find((x) => x.id === parts.slice(0, n).join('.'));
    if (f) return f;
  }
  throw new Error(`paper-figures.json has no figure for row ${rowId}`);
}

let s7: Scenario;
let s32: Scenario;
let s72: Scenario;
let failure: Scenario;
let tools: Scenario;
const runs: ScenarioRunResult[] = [];
let rows: ComparisonRow[] = [];
const rowOf = (id: string): ComparisonRow => {
  const r = rows.find((x) => x.id === id);
  if (!r) throw new Error(`no comparison row ${id}`);
  return r;
};
const runOf = (scenario: string, gpus: number, system: SystemName): ScenarioRunResult =>
  runs.find((r) => r.scenario === scenario && r.gpus === gpus && r.system === system)!;
const describeRow = (r: ComparisonRow): string => `${r.id}: simulated ${r.simulated}, paper ${r.paper}, ratio ${r.ratio}; ${r.why ?? ''}`;

beforeAll(() => {
  s7 = loadScenario(scenarioFile('math-7b'));
  s32 = loadScenario(scenarioFile('math-32b'));
  s72 = loadScenario(scenarioFile('math-72b'));
  const options = (gpus: number) => ({ gpus, steps: STEPS, warmupSteps: WARMUP });
  for (const gpus of [16, 64]) for (const system of BASELINES_AND_LAMINAR) runs.push(runScenario(s7, system, options(gpus)));
  for (const system of ['laminar', 'laminar-no-repack'] as const) runs.push(runScenario(s32, system, options(128)));
  failure = loadScenario(scenarioFile('failure-32b-128'));
  runs.push(runScenario(failure, 'laminar', {}));
  tools = loadScenario(scenarioFile('toolcall-7b'));
  for (const gpus of [16, 32]) for (const system of BASELINES_AND_LAMINAR) runs.push(runScenario(tools, system, options(gpus)));
  rows = buildResults([s7, s32, s72, failure, tools], runs, 0).comparison;
}, 600_000);

describe('the paper comparison on the smaller settings', () => {
  it.each(WITHIN_TODAY)('%s stays within its tolerance', (id) => {
    const r = rowOf(id);
    expect(r.simulated, describeRow(r)).not.toBeNull();
    expect(r.within, describeRow(r)).toBe(true);
    if (r.check === 'tolerance') {
      // Against the file's own tolerance, not only the comparison's verdict.
      const tolerance = figureOf(id).tolerance;
      expect(tolerance, id).toBeGreaterThan(0);
      expect(Math.abs(r.simulated! / r.paper - 1), describeRow(r)).toBeLessThanOrEqual(tolerance! + 1e-12);
    }
  });

  it('the staleness bounds hold as the paper states them on these settings (max ≤ 4; Figure 10 p90 at most 3)', () => {
    const max = rowOf('sec8_1.max_inherent_staleness');
    expect(max.simulated!).toBeLessThanOrEqual(max.paper);
    for (const r of runs.filter((x) => x.system === 'laminar')) expect(r.staleness.inherent.max, `${r.scenario}@${r.gpus}`).toBeLessThanOrEqual(max.paper);
    // "typically below 3": the simulated p90 sits on the bound (known-deviations.ts says why).
    const fig10 = rowOf('fig10.inherent_staleness_typical');
    expect(fig10.simulated!).toBeLessThanOrEqual(fig10.paper);
  });

  it('every other row gives a known reason (known-deviations.ts), not the fallback', () => {
    const others = rows.filter((r) => !WITHIN_TODAY.includes(r.id));
    expect(others.length).toBeGreaterThan(0);
    for (const r of others) {
      expect(r.within, `${describeRow(r)}: within now, so add it to WITHIN_TODAY`).not.toBe(true);
      expect(r.why, r.id).toBeTruthy();
      expect(r.why!, describeRow(r)).not.toContain(FALLBACK);
      expect(r.why!, r.id).not.toBe('not in these runs');
    }
  });
});

describe('the runs behind the figures', () => {
  it('conserve every trajectory: each batch trained once, nothing lost or made twice', () => {
    expect(runs).toHaveLength(23);
    for (const r of runs) {
      const name = `${r.scenario}@${r.gpus} ${r.system}`;
      const scenario = [s7, s32, failure, tools].find((s) => s.name === r.scenario)!;
      const steps = scenario === failure ? failure.run.steps : STEPS;
      expect(r.steps, name).toBe(steps);
      const { workload } = scenario;
      expect(r.ledger.consumed, name).toBe(steps * workload.prompts * workload.groupSize);
      const l = r.ledger;
      expect(l.generating + l.moving + l.orphaned + l.returned + l.buffered + l.consumed + l.dropped, name).toBe(l.claimed);
      expect(r.staleness.inherent.count, name).toBe(r.ledger.buffered + r.ledger.consumed + r.ledger.dropped);
      expect(r.staleness.consumption.count, name).toBe(r.ledger.consumed);
    }
    expect(runOf('math-32b', 128, 'laminar').repack.moves).toBeGreaterThan(0);
    // The machine failure orphaned trajectories, and every one of them was resumed or given back.
    const [killed] = runOf('failure-32b-128', 128, 'laminar').failures;
    expect(killed!.orphaned).toBeGreaterThan(0);
    expect(killed!.resumed + killed!.returned).toBe(killed!.orphaned);
    expect(runOf('toolcall-7b', 16, 'laminar').toolCalls).toBeGreaterThan(0);
  });

  it('the repack figures come from the real planner: one that never moves makes laminar laminar-no-repack', () => {
    const planted = runScenario(s32, 'laminar', { gpus: 128, steps: STEPS, warmupSteps: WARMUP, components: { planRepack: () => [] } });
    const without = runOf('math-32b', 128, 'laminar-no-repack');
    expect(planted.repack.rounds).toBeGreaterThan(0);
    expect(planted.repack.moves).toBe(0);
    expect(planted.kvUtilisation).toBe(without.kvUtilisation);
    expect(planted.generationTokensPerS).toBe(without.generationTokensPerS);
    const plantedRows = buildResults([s7, s32, s72], [...runs.filter((r) => !(r.scenario === 'math-32b' && r.system === 'laminar')), planted], 0).comparison;
    const gain = plantedRows.find((r) => r.id === 'fig15.gen_throughput_gain')!;
    expect(gain.simulated).toBe(1);
    expect(gain.within).toBe(false);
    expect(plantedRows.find((r) => r.id === 'sec8_4.kv_util_gain')!.simulated).toBe(1);
    expect(plantedRows.find((r) => r.id === 'tab1.kv_util.with_repack')!.simulated).not.toBe(rowOf('tab1.kv_util.with_repack').simulated);
  });
});
