/**
 * The mechanisms of issue #48, each on its own (src/simulate/mechanisms.ts): the parallel
 * trainer's time (communication on the paper's interconnect, data-parallel stragglers, the
 * pipeline bubble, attention's FLOPs), attention's KV read derived from the hardware, AReaL's partial rollout, and
 * the switches that turn each off.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { ALL_MECHANISMS, mechanismsWithout, NO_MECHANISMS } from '../../src/simulate/mechanisms.js';
import { runScenario } from '../../src/simulate/run.js';
import { eagerFloorMs, engineProfileFor, weightBytes } from '../../src/simulate/scenario/derive.js';
import { parseScenario, type Scenario } from '../../src/simulate/scenario/load.js';
import type { ScenarioInput } from '../../src/simulate/scenario/schema.js';
import {
  dataParallelGroups,
  fsdpCommMs,
  megatronAllReduceMs,
  slowestGroupTokens,
  attentionWidth,
  trainIterationMs,
  withAttentionFlops,
  type TrainLayout,
} from '../../src/simulate/trainer/parallel-step.js';
import { arealLoadMs, arealSaveMs, colocatedSwitchMs, trainStepMs } from '../../src/simulate/trainer/time-model.js';
import { colocatedProfile, colocatedWeightSyncMs } from '../../src/simulate/systems/colocated-engine.js';
import { claimTrajectories } from '../../src/simulate/systems/laminar.js';
import { Simulation } from '../../src/simulate/core/simulation.js';
import { EngineActor } from '../../src/simulate/engine/engine-actor.js';
import { ToolCallLoop } from '../../src/simulate/fleet/tool-calls.js';
import type { Workload } from '../../src/simulate/workload/workload.js';
import { tinyScenario } from './tiny-scenario.js';

function shipped(name: string): Scenario {
  const path = fileURLToPath(new URL(`../../src/simulate/scenarios/${name}.json`, import.meta.url));
  return parseScenario(JSON.parse(readFileSync(path, 'utf8')) as ScenarioInput, name);
}

const math7b = shipped('math-7b');
const math72b = shipped('math-72b');
const fsdp7b: TrainLayout = { kind: 'fsdp', ...math7b.trainer.layout! };

/** A batch of 8,192 long-tailed lengths (log-normal, median 3,500, p99/median 10, capped at 16K), fixed by a seed. */
function longTailBatch(n = 8192): Float64Array {
  let state = 12345;
  const uniform = (): number => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return (state + 0.5) / 2 ** 32;
  };
  const sigma = Math.log(10) / 2.326;
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const z = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
    out[i] = 256 + Math.min(16384, Math.round(3500 * Math.exp(sigma * z)));
  }
  return out;
}

const batch = longTailBatch();
const total = batch.reduce((a, b) => a + b, 0);

describe('the parallel trainer (trainer/parallel-step.ts)', () => {
  it('with no layout, or with both mechanisms off, is the linear formula', () => {
    const linear = trainStepMs(math7b, total, 192);
    expect(trainIterationMs(math7b, batch, 192, 16, null, ALL_MECHANISMS)).toBeCloseTo(linear, 6);
    expect(trainIterationMs(math7b, batch, 192, 16, fsdp7b, NO_MECHANISMS)).toBeCloseTo(linear, 6);
  });

  it('stragglers: equal lengths cost nothing, a long tail costs more the more groups share a mini-batch', () => {
    const equal = new Float64Array(8192).fill(4000);
    expect(slowestGroupTokens(equal, 32, 16).tokens).toBe(8192 * 4000);
    // 8,192 over 48 groups: 170 or 171 each, so a mini-batch waits for a group with one more.
    expect(slowestGroupTokens(equal, 48, 16).tokens).toBeGreaterThan(8192 * 4000);
    const factor = (groups: number): number => slowestGroupTokens(batch, groups, 16).tokens / total;
    expect(factor(1)).toBe(1);
    expect(factor(2)).toBeLessThan(1.05);
    expect(factor(48)).toBeGreaterThan(1.3);
    expect(factor(96)).toBeGreaterThan(factor(48));
    // A group of appendix A.3's layout is its sequence-parallel GPUs: 192 GPUs of SP 4 are 48 groups.
    expect(dataParallelGroups(fsdp7b, 192)).toBe(48);
    expect(dataParallelGroups({ kind: 'megatron', tp: 4, pp: 4 }, 640)).toBe(40);
  });

  it("FSDP's collectives: inside a machine over NVLink, across machines over its share of the NICs", () => {
    // 7B, FSDP 8 on one machine: 2 gathers + a reduce-scatter of 15.2 GB × 7/8 at 400 GB/s, no replicas on 8 GPUs.
    const one = fsdpCommMs(math7b, { fsdp: 8 }, 8);
    expect(one.hideable).toBeCloseTo(((4 * 15.2e9 * 7) / 8 / 400e9) * 1e3, 3);
    expect(one.exposed).toBe(0);
    // 24 replicas: the FP32 shard (2 × 15.2 GB / 8) all-reduced, 2 × 23/24 of it at 50 GB/s.
    expect(fsdpCommMs(math7b, { fsdp: 8 }, 192).exposed).toBeCloseTo(((2 * (23 / 24) * ((2 * 15.2e9) / 8)) / 50e9) * 1e3, 3);
    // 72B, FSDP 32 spans 4 machines: the gathers run at the inter-machine rate.
    const wide = fsdpCommMs(math72b, { fsdp: 32 }, 32);
    expect(wide.hideable).toBeCloseTo(((4 * math72b.model.weightBytes! * 31) / 32 / 50e9) * 1e3, 3);
  });

  it("Megatron's pipeline bubble: none at PP 1, (PP - 1) micro-batches over those a group runs", () => {
    const commOnly = { trainerCommunication: true, dataParallelStragglers: false, trainingAttention: false };
    const linear = trainStepMs(math7b, total, 128);
    const pp1 = { tp: 2, pp: 1 };
    const pp4 = { tp: 2, pp: 4 };
    expect(trainIterationMs(math7b, batch, 128, 16, { kind: 'megatron', ...pp1 }, commOnly)).toBeCloseTo(
      linear + 16 * megatronAllReduceMs(math7b, pp1, 128),
      6,
    );
    // 512 sequences a mini-batch over 16 groups of TP 2 × PP 4: 32 micro-batches each, a bubble of 3/32.
    expect(trainIterationMs(math7b, batch, 128, 16, { kind: 'megatron', ...pp4 }, commOnly)).toBeCloseTo(
      linear * (1 + 3 / 32) + 16 * megatronAllReduceMs(math7b, pp4, 128),
      6,
    );
    // The gradient all-reduce: the FP32 shard over TP × PP, 2 (d − 1)/d of it across d = 16 groups at 50 GB/s.
    expect(megatronAllReduceMs(math7b, pp4, 128)).toBeCloseTo(((2 * (15 / 16) * ((2 * 15.2e9) / 8)) / 50e9) * 1e3, 6);
  });

  it("attention's FLOPs: a sequence of T tokens costs T (1 + layers × width × T / params) tokens of the linear formula", () => {
    const attentionOnly = { ...NO_MECHANISMS, trainingAttention: true };
    // 7B (28 layers, 28 heads × 128): 8,192 sequences of 4,000 tokens cost 1 + 28 × 3,584 × 4,000 / 7.62e9 = 1.0527 times.
    const equal = new Float64Array(8192).fill(4000);
    const linear = trainStepMs(math7b, 8192 * 4000, 192);
    expect(trainIterationMs(math7b, equal, 192, 16, fsdp7b, attentionOnly) / linear).toBeCloseTo(1 + (28 * 3584 * 4000) / 7.62e9, 9);
    // Quadratic: a 16 K sequence costs 1.22 times its tokens, a 1 K one 1.01.
    expect(withAttentionFlops(math7b, [16384, 1024])[0]! / 16384).toBeCloseTo(1 + (28 * 3584 * 16384) / 7.62e9, 9);
    expect(withAttentionFlops(math7b, [16384, 1024])[1]! / 1024).toBeLessThan(1.014);
    // So the long tail weighs more than its tokens: the long-tailed batch's attention share is above
    // the one of as many tokens in equal sequences, and more again with the stragglers on.
    const tailShare = trainIterationMs(math7b, batch, 192, 16, fsdp7b, attentionOnly) / trainStepMs(math7b, total, 192);
    const meanShare = 1 + (28 * 3584 * (total / 8192)) / 7.62e9;
    expect(tailShare).toBeGreaterThan(meanShare + 0.03);
    const stragglers = { ...NO_MECHANISMS, dataParallelStragglers: true };
    const both = { ...stragglers, trainingAttention: true };
    expect(trainIterationMs(math7b, batch, 192, 16, fsdp7b, both) / trainIterationMs(math7b, batch, 192, 16, fsdp7b, stragglers)).toBeGreaterThan(tailShare);
    // The width: the scenario's (Qwen2.5-7B: 28 × 128), else a dense transformer's of its size.
    expect(attentionWidth(math7b)).toBe(3584);
    const unstated = { model: { ...math7b.model, attentionWidth: undefined } };
    expect(attentionWidth(unstated)).toBeCloseTo(Math.sqrt(7.62e9 / (12 * 28)), 6);
    // With no layout the trainer keeps the linear formula, as for the other trainer mechanisms.
    expect(trainIterationMs(math7b, equal, 192, 16, null, attentionOnly)).toBeCloseTo(linear, 6);
  });

  it('makes strong scaling sub-linear: 24 times the GPUs give much less than 24 times the speed', () => {
    const speedup = (mech: typeof ALL_MECHANISMS): number =>
      trainIterationMs(math7b, batch, 8, 16, fsdp7b, mech) / trainIterationMs(math7b, batch, 192, 16, fsdp7b, mech);
    expect(speedup(NO_MECHANISMS)).toBeCloseTo(24, 6);
    const withAll = speedup(ALL_MECHANISMS);
    expect(withAll).toBeLessThan(24 * 0.8);
    expect(withAll).toBeGreaterThan(8);
    expect(speedup(mechanismsWithout(['dataParallelStragglers']))).toBeGreaterThan(withAll);
    expect(speedup(mechanismsWithout(['trainerCommunication']))).toBeGreaterThan(withAll);
  });
});

describe("attention's KV read (scenario/derive.ts)", () => {
  it('is the KV bytes of a token over TP at the achieved HBM bandwidth, 0 when switched off, the scenario’s own value when it gives one', () => {
    const perGpu = (tp: number): number => ((1e6 * 57344) / tp / (3.35e12 * 0.65)) * 1e3;
    expect(engineProfileFor(math7b, 1).kvReadMsPerMToken).toBeCloseTo(perGpu(1), 6);
    expect(engineProfileFor(math7b, 2).kvReadMsPerMToken).toBeCloseTo(perGpu(2), 6);
    expect(engineProfileFor(math7b, 1, NO_MECHANISMS).kvReadMsPerMToken).toBe(0);
    const own = tinyScenario((s) => {
      s.engine = { ...s.engine, kvReadMsPerMToken: 7 };
    });
    expect(engineProfileFor(own, 1, NO_MECHANISMS).kvReadMsPerMToken).toBe(7);
  });
});

describe('the switches', () => {
  it('an unknown mechanism is refused with ERR_INVALID_ARG', () => {
    expect(() => mechanismsWithout(['warpDrive'])).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
    expect(mechanismsWithout([])).toEqual(ALL_MECHANISMS);
  });

  it('each mechanism, switched on alone, slows a run down', () => {
    const scenario = tinyScenario((s) => {
      s.trainer = { ...s.trainer, layout: { fsdp: 8, sequenceParallel: 4 } };
    });
    const base = runScenario(scenario, 'sync', { steps: 4, mechanisms: NO_MECHANISMS });
    for (const name of ['attentionKvRead', 'dataParallelStragglers', 'trainerCommunication', 'colocatedEngine', 'trainingAttention', 'eagerDecode'] as const) {
      const on = runScenario(scenario, 'sync', { steps: 4, mechanisms: { ...NO_MECHANISMS, [name]: true } });
      expect(on.virtualS, name).toBeGreaterThan(base.virtualS);
    }
  });
});

describe("verl's colocated engine (systems/colocated-engine.ts)", () => {
  const math32b = shipped('math-32b');

  it("gives sync's engine the memory share verl's gpu_memory_utilization leaves it beside the trainer", () => {
    // 7B on TP 2: (80 GB × 0.5 − 3 GB reserve − 7.6 GB of weights) per GPU, two GPUs, 57,344 bytes a token.
    const colocated = Math.floor((2 * ((80 * 0.5 - 3) * 1e9 - 15.2e9 / 2)) / 57344);
    expect(colocatedProfile(math7b, 2, ALL_MECHANISMS).kvCapacityTokens).toBe(colocated);
    expect(colocatedProfile(math7b, 2, NO_MECHANISMS).kvCapacityTokens).toBe(engineProfileFor(math7b, 2).kvCapacityTokens);
    expect(colocated / engineProfileFor(math7b, 2).kvCapacityTokens).toBeCloseTo(29.4 / 61.4, 2);
  });

  it("synchronises weights by the FSDP group's gather on its link and the engine's wake and sleep over PCIe", () => {
    const ms = (bytes: number, GBs: number): number => (bytes / (GBs * 1e9)) * 1e3;
    // 7B: FSDP 8 inside a machine, over NVLink; TP 2's shard out and back over PCIe.
    expect(colocatedWeightSyncMs(math7b, 2, 8, 256, ALL_MECHANISMS)).toBeCloseTo(ms((15.2e9 * 7) / 8, 400) + ms((2 * 15.2e9) / 2, 40), 6);
    // 72B: FSDP 32 spans four machines, so its gather runs at 50 GB/s per GPU: 2.8 s of the 3.7 s.
    const w72 = math72b.model.weightBytes!;
    const at72 = colocatedWeightSyncMs(math72b, 8, 32, 1024, ALL_MECHANISMS);
    expect(at72).toBeCloseTo(ms((w72 * 31) / 32, 50) + ms((2 * w72) / 8, 40), 6);
    expect(at72).toBeGreaterThan(3000);
    // A trainer smaller than its FSDP group gathers over the GPUs it has; with the mechanism off, the old switch.
    expect(colocatedWeightSyncMs(math32b, 4, 16, 8, ALL_MECHANISMS)).toBeCloseTo(
      ms((math32b.model.weightBytes! * 7) / 8, 400) + ms((2 * math32b.model.weightBytes!) / 4, 40),
      6,
    );
    expect(colocatedWeightSyncMs(math72b, 8, 32, 1024, NO_MECHANISMS)).toBeCloseTo(colocatedSwitchMs(math72b, 8), 6);
  });

  it("slows sync's generation where a replica's share of the batch outgrows the smaller cache (7B on 16 GPUs)", () => {
    const on = runScenario(math7b, 'sync', { gpus: 16, steps: 2, warmupSteps: 1 });
    const off = runScenario(math7b, 'sync', { gpus: 16, steps: 2, warmupSteps: 1, mechanisms: { colocatedEngine: false } });
    expect(on.engines.kvCapacityTokens).toBeLessThan(off.engines.kvCapacityTokens / 2);
    expect(on.throughput.tokensPerS).toBeLessThan(off.throughput.tokensPerS * 0.95);
  });

  it("refuses a memory share that leaves sync's engine no room for the longest request", () => {
    const input = JSON.parse(readFileSync(fileURLToPath(new URL('../../src/simulate/scenarios/math-72b.json', import.meta.url)), 'utf8')) as ScenarioInput;
    input.sync = { gpuMemoryUtilisation: 0.27 };
    expect(() => parseScenario(input, 'math-72b')).toThrow(
      expect.objectContaining({ code: ErrorCodes.BAD_SCENARIO, details: { path: 'math-72b', field: 'sync.gpuMemoryUtilisation' } }),
    );
  });
});

describe("verl's eager vLLM (eagerDecode, scenario/derive.ts)", () => {
  it('floors a decode step at its fixed overhead plus the launches of every layer', () => {
    // 3 ms of overhead and 0.3 ms of launches per layer: 28 layers for 7B, 80 for 72B.
    expect(eagerFloorMs(math7b)).toBeCloseTo(3 + 0.3 * 28, 9);
    expect(eagerFloorMs(math72b)).toBeCloseTo(3 + 0.3 * 80, 9);
    // Above the graphed step of a small batch (the weights' read and TP's all-reduces)...
    const graphed7b = engineProfileFor(math7b, 2).decodeStepMs;
    expect(graphed7b).toBeCloseTo(3 + (15.2e9 / 2 / (3.35e12 * 0.65)) * 1e3 + 0.04 * 28, 6);
    expect(eagerFloorMs(math7b)).toBeGreaterThan(graphed7b * 1.4);
    // ...and below a full cache's step, where the GPU's work hides the launches: a 7B TP-1 engine
    // holding 900 K tokens reads their KV for 24 ms a step.
    const full = engineProfileFor(math7b, 1);
    expect(full.decodeStepMs + (full.kvReadMsPerMToken! * 900_000) / 1e6).toBeGreaterThan(eagerFloorMs(math7b) * 2);
  });

  it("slows the verl-based baselines' barrier, bound by a replica's last long response, and leaves laminar and AReaL as they were", () => {
    const run = (system: 'sync' | 'stream' | 'laminar' | 'areal', on: boolean, gpus = 256): ReturnType<typeof runScenario> =>
      runScenario(math7b, system, { gpus, steps: 3, warmupSteps: 1, mechanisms: { eagerDecode: on } });
    const sync = run('sync', true);
    expect(sync.throughput.tokensPerS).toBeLessThan(run('sync', false).throughput.tokensPerS * 0.97);
    expect(run('stream', true).throughput.tokensPerS).toBeLessThan(run('stream', false).throughput.tokensPerS * 0.97);
    // A replica's 16K response decodes alone at the end: no iteration of sync is shorter than 16,384 floored steps.
    const floorS = (16384 * eagerFloorMs(math7b)) / 1e3;
    for (let i = 1; i < sync.stepEndsS.length; i++) expect(sync.stepEndsS[i]! - sync.stepEndsS[i - 1]!).toBeGreaterThan(floorS);
    for (const system of ['laminar', 'areal'] as const) {
      const on = run(system, true, 16);
      const off = run(system, false, 16);
      expect(on.events, system).toBe(off.events);
      expect(on.virtualS, system).toBe(off.virtualS);
    }
  });

  it('runs eagerly only the systems the scenario names', () => {
    const graphed = tinyScenario((s) => {
      s.eager = { systems: [], launchMsPerLayer: 0.3 };
    });
    const on = runScenario(graphed, 'sync', { steps: 3 });
    const off = runScenario(graphed, 'sync', { steps: 3, mechanisms: { eagerDecode: false } });
    expect(on.virtualS).toBe(off.virtualS);
  });
});

describe("GRPO groups share their prompt's difficulty (workload/workload.ts)", () => {
  it('gathers the long tail on fewer replicas: sync on 7B, 256 GPUs, leaves more GPUs idle at its barrier and trains slower', () => {
    // On CUDA graphs (eagerDecode off), where a replica's steps are slower the more KV it holds.
    const run = (on: boolean, eager = false): ReturnType<typeof runScenario> =>
      runScenario(math7b, 'sync', { gpus: 256, steps: 3, warmupSteps: 1, mechanisms: { groupLengthCorrelation: on, eagerDecode: eager } });
    const on = run(true);
    const off = run(false);
    // Alone, nearly every replica of 64 responses holds one at the 16K cap and they finish together.
    expect(off.idleGpuShare).toBeLessThan(0.08);
    expect(on.idleGpuShare).toBeGreaterThan(off.idleGpuShare + 0.05);
    expect(on.throughput.tokensPerS).toBeLessThan(off.throughput.tokensPerS * 0.95);
    // Eager, every replica's tail decodes at the floor, so a 16K response takes as long wherever it
    // is and the replicas finish closer together; the groups still leave more idle.
    expect(run(true, true).idleGpuShare).toBeGreaterThan(run(false, true).idleGpuShare + 0.01);
  });
});

describe('AReaL (systems/areal.ts)', () => {
  const scenario = tinyScenario();
  const areal = runScenario(scenario, 'areal', { steps: 8 });

  it('interrupts every rollout at each version and re-prefills what they had generated', () => {
    // Prefill covers every claimed prompt once, and on top the tokens of the interrupted trajectories.
    const claimedPromptTokens = areal.ledger.claimed * 128;
    expect(areal.engines.prefillTokens).toBeGreaterThan(claimedPromptTokens * 1.5);
    expect(areal.ledger.moving).toBe(0);
  });

  it('keeps trajectories of several versions in flight without a bound; max_head_offpolicyness admits only what stays within it', () => {
    expect(areal.staleness.consumption.p90).toBeGreaterThan(1);
    const bounded = (bound: number): ReturnType<typeof runScenario> =>
      runScenario(
        tinyScenario((s) => {
          s.areal = { maxHeadOffpolicyness: bound };
        }),
        'areal',
        { steps: 8 },
      );
    // η = 0 is synchronous: nothing starts before the trainer has the version it is trained at.
    expect(bounded(0).staleness.consumption.max).toBe(0);
    // η = 1: the batches are admitted within one version; a long trajectory may still finish later
    // than its batch (the trainer takes completed trajectories in order), as AReaL's admission allows.
    const one = bounded(1);
    expect(one.staleness.consumption.p50).toBeLessThanOrEqual(1);
    expect(one.staleness.consumption.mean).toBeLessThan(areal.staleness.consumption.mean);
  });
});

describe("AReaL's weights through storage (arealDiskWeights, systems/areal.ts)", () => {
  const run = (on: boolean, edit?: (s: ScenarioInput) => void): ReturnType<typeof runScenario> =>
    runScenario(tinyScenario(edit), 'areal', { steps: 8, mechanisms: { arealDiskWeights: on } });

  it('takes the storage rates of §4.1: a shard serialised and written by each trainer writer, read by each server rank', () => {
    const scenario = tinyScenario();
    const gb = weightBytes(scenario) / 1e9; // 7B in BF16: 15.2 GB
    expect(arealSaveMs(scenario, 2)).toBeCloseTo((gb / 2) * (2 + 3.75) * 1e3, 6);
    expect(arealLoadMs(scenario, 1)).toBeCloseTo(gb * 3.75 * 1e3, 6);
    expect(arealLoadMs(scenario, 4)).toBeCloseTo(arealLoadMs(scenario, 1) / 4, 6);
  });

  it('holds the trainer for its save at every step while the servers go on generating, then pauses them for the reload', () => {
    const on = run(true);
    const off = run(false);
    // The tiny scenario's trainer has no layout: one writer, 87 s a version against its 3-s steps.
    const saveS = arealSaveMs(tinyScenario(), 1) / 1e3;
    const gaps = on.stepEndsS.slice(1).map((t, i) => t - on.stepEndsS[i]!);
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(saveS);
    expect(Math.max(...off.stepEndsS.slice(1).map((t, i) => t - off.stepEndsS[i]!))).toBeLessThan(saveS / 10);
    expect(on.throughput.tokensPerS).toBeLessThan(off.throughput.tokensPerS / 10);
    // Generation does not wait for the trainer: completed trajectories pile up in its buffer.
    expect(on.ledger.buffered).toBeGreaterThan(off.ledger.buffered * 10);
    expect(on.ledger.moving).toBe(0);
    expect(on.ledger.generating + on.ledger.buffered + on.ledger.consumed).toBe(on.ledger.claimed);
  });

  it('loads a version saved during a reload right after it, the trajectories resumed once', () => {
    // Eight writers and a slow storage read: a save takes an eighth of a reload, so versions come
    // faster than the servers load them.
    const slowRead = (s: ScenarioInput): void => {
      s.trainer = { ...s.trainer, megatron: { tp: 4, pp: 2 } };
      s.areal = { maxHeadOffpolicyness: null, storage: { serialiseSPerGB: 0, transferSPerGB: 1 } };
    };
    const scenario = tinyScenario(slowRead);
    expect(arealLoadMs(scenario, 1)).toBeGreaterThan(arealSaveMs(scenario, 8) * 7);
    const r = run(true, slowRead);
    expect(r.stepEndsS).toHaveLength(8);
    // Every trajectory is somewhere: the run ends with the servers in a reload (held: moving).
    expect(r.ledger.moving).toBeGreaterThan(0);
    expect(r.ledger.generating + r.ledger.moving + r.ledger.buffered + r.ledger.consumed).toBe(r.ledger.claimed);
  });

  it('changes no other system', () => {
    for (const system of ['laminar', 'sync', 'one-step'] as const) {
      const with_ = runScenario(tinyScenario(), system, { steps: 6, mechanisms: { arealDiskWeights: true } });
      const without = runScenario(tinyScenario(), system, { steps: 6, mechanisms: { arealDiskWeights: false } });
      expect(with_.events).toBe(without.events);
      expect(with_.stepEndsS).toEqual(without.stepEndsS);
    }
  });
});

describe("verl's batched multi-turn loop (turnLockstep, fleet/tool-calls.ts) and the sandbox (fleet/sandbox.ts)", () => {
  /**
   * Two trajectories on one engine, 100 tokens each: trajectory 0 calls its tool after 10 tokens
   * (5 s), trajectory 1 after 50 (1 s). The loop reads only these functions of the workload.
   */
  const twoCalls = {
    outputTokens: () => 100,
    callsOf: (id: number) => [id === 0 ? 10 : 50],
    promptOf: (id: number) => id,
    promptTokens: () => 64,
    toolLatencyMs: (id: number) => (id === 0 ? 5_000 : 1_000),
  };

  /** When each trajectory's turns were admitted, and when each completed (the sandbox unbounded, or of `slots`). */
  function drive(lockstep: boolean, slots: number | null = null): { admitted: [number, number][]; done: [number, number][]; loop: ToolCallLoop } {
    const sim = new Simulation();
    const workload = {
      ...twoCalls,
      toolCalls: { maxCalls: 1, meanCalls: 1, latencyMedianS: 1, latencyP99OverMedian: 1, sandboxSlots: slots },
    } as unknown as Workload;
    const loop = new ToolCallLoop(sim, workload, lockstep);
    const admitted: [number, number][] = [];
    const done: [number, number][] = [];
    const actor: EngineActor = new EngineActor(sim, engineProfileFor(tinyScenario(), 1, ALL_MECHANISMS), {
      finished: (id, atMs) => {
        if (!loop.turnEnded(actor, id)) done.push([id, atMs]);
        loop.turnSettled(actor);
      },
      admitted: (id, atMs) => admitted.push([id, atMs]),
    });
    actor.submit([0, 1].map((id) => ({ id, promptTokens: 64, generated: 0, targetTokens: twoCalls.callsOf(id)[0]! })));
    sim.run();
    return { admitted, done, loop };
  }

  it('runs the tool calls of a turn together when the engine has finished the turn, the next turn when the slowest is back', () => {
    const own = drive(false);
    const step = drive(true);
    // Each trajectory's first turn ends at the same time either way (the same engine, the same requests).
    const back = (r: ReturnType<typeof drive>, id: number): number => r.admitted.filter(([i]) => i === id)[1]![1];
    const firstAdmit = own.admitted[0]![1];
    expect(step.admitted[0]![1]).toBe(firstAdmit);
    // On its own, each comes back its own latency after its own turn's end: trajectory 1 (1 s) first.
    expect(back(own, 1)).toBeLessThan(back(own, 0));
    // In lockstep both come back together, 5 s (the slowest call) after the later turn's end.
    expect(back(step, 0)).toBe(back(step, 1));
    expect(back(step, 0)).toBeGreaterThan(back(own, 0));
    expect(back(step, 0) - back(own, 1)).toBeCloseTo(4_000, 6);
    expect(step.loop.toolPhases).toBe(1);
    expect(step.loop.toolPhaseMs).toBeCloseTo(5_000, 6);
    expect(own.loop.toolPhases).toBe(0);
    // Both complete, each after its second turn, with one call each.
    for (const r of [own, step]) {
      expect(r.done.map(([id]) => id).sort()).toEqual([0, 1]);
      expect(r.loop.calls).toBe(2);
      expect(r.loop.inCall).toBe(0);
    }
  });

  it('a sandbox of fixed slots queues the calls that find them busy, first come first served', () => {
    const back = (r: ReturnType<typeof drive>, id: number): number => r.admitted.filter(([i]) => i === id)[1]![1];
    const open = drive(false);
    const one = drive(false, 1);
    // Trajectory 0's 5-s call holds the only slot when trajectory 1 calls: 1's 1-s call starts when 0's ends.
    expect(back(one, 0)).toBeCloseTo(back(open, 0), 6);
    expect(back(one, 1)).toBeCloseTo(back(open, 0) + 1_000, 6);
    expect(one.loop.sandbox.queued).toBe(1);
    expect(open.loop.sandbox.queued).toBe(0);
    // In lockstep the round's two calls run one after the other: the phase is 6 s, not 5.
    const stepOne = drive(true, 1);
    expect(stepOne.loop.toolPhaseMs).toBeCloseTo(6_000, 6);
    expect(back(stepOne, 0)).toBe(back(stepOne, 1));
    // Two slots are as good as unbounded for two calls.
    expect(drive(true, 2).admitted).toEqual(drive(true).admitted);
  });

  it('slows the verl-based baselines on the tool-call task and leaves laminar and AReaL as they were', () => {
    const scenario = tinyScenario((s) => {
      s.workload = { ...s.workload, task: 'tool-call', toolCalls: { maxCalls: 8, meanCalls: 3, latencyMedianS: 2, latencyP99OverMedian: 10 } };
    });
    for (const system of ['sync', 'one-step', 'stream', 'laminar', 'areal'] as const) {
      const on = runScenario(scenario, system, { steps: 4 });
      const off = runScenario(scenario, system, { steps: 4, mechanisms: { turnLockstep: false } });
      expect(on.ledger.consumed, system).toBe(off.ledger.consumed);
      if (system === 'laminar' || system === 'areal') {
        expect(on.virtualS, system).toBe(off.virtualS);
        continue;
      }
      // The same calls, made later: the replicas wait for each turn's longest segment and slowest call.
      expect(on.throughput.tokensPerS, system).toBeLessThan(off.throughput.tokensPerS * 0.9);
      expect(on.idleGpuShare, system).toBeGreaterThan(off.idleGpuShare);
    }
  });
});

describe("a rollout's batch as its share of the global batch (rolloutBatchShare, systems/laminar.ts)", () => {
  it('claims the batch over the rollouts in whole groups, A.3’s 1,024 its limit', () => {
    // 7B on 16 GPUs (8 rollouts): 8,192 / 8 = 1,024, the limit itself.
    expect(claimTrajectories(1024, 8192, 16, 8, true)).toBe(1024);
    // 32B on 128 GPUs (16 rollouts of TP 4): 512, the batch of the paper's Figure 9.
    expect(claimTrajectories(1024, 8192, 16, 16, true)).toBe(512);
    // 7B on 64 GPUs (24 rollouts): 512 prompts / 24, rounded up to 22 whole groups.
    expect(claimTrajectories(1024, 8192, 16, 24, true)).toBe(352);
    // 7B on 256 GPUs (64 rollouts): 128; 32B on 32 GPUs (4 rollouts): 2,048 capped at 1,024.
    expect(claimTrajectories(1024, 8192, 16, 64, true)).toBe(128);
    expect(claimTrajectories(1024, 8192, 16, 4, true)).toBe(1024);
    // Off: the limit, whatever the fleet.
    expect(claimTrajectories(1024, 8192, 16, 64, false)).toBe(1024);
  });

  it('holds one batch in flight, so trajectories complete fewer versions stale; the baselines and a fleet at the limit do not change', () => {
    const run = (share: boolean, system: 'laminar' | 'sync', gpus: number): ReturnType<typeof runScenario> =>
      runScenario(math7b, system, { gpus, steps: 5, warmupSteps: 2, mechanisms: { rolloutBatchShare: share } });
    const on = run(true, 'laminar', 64);
    const off = run(false, 'laminar', 64);
    expect(on.staleness.inherent.mean).toBeLessThan(off.staleness.inherent.mean);
    expect(on.staleness.inherent.max).toBeLessThan(off.staleness.inherent.max);
    // Fewer trajectories per engine leave its KV cache emptier.
    expect(on.kvUtilisation).toBeLessThan(off.kvUtilisation);
    // 8 rollouts on 16 GPUs: their share is the limit, so the run is the same to the event.
    expect(run(true, 'laminar', 16).events).toBe(run(false, 'laminar', 16).events);
    expect(run(true, 'sync', 64).virtualS).toBe(run(false, 'sync', 64).virtualS);
  });
});

describe('a repack move hands over the trajectories at their tools (repackAtTools, systems/laminar.ts)', () => {
  const toolCall = tinyScenario((s) => {
    s.workload = { ...s.workload, task: 'tool-call', toolCalls: { maxCalls: 8, meanCalls: 3, latencyMedianS: 2, latencyP99OverMedian: 10 } };
  });
  const run = (scenario: Scenario, system: 'laminar' | 'laminar-no-repack', on: boolean): ReturnType<typeof runScenario> =>
    runScenario(scenario, system, { steps: 6, mechanisms: { repackAtTools: on } });

  it('releases the sources on the tool-call task, so repack pays; without it a source keeps what is at its tools and repack gains little', () => {
    const on = run(toolCall, 'laminar', true);
    const off = run(toolCall, 'laminar', false);
    const noRepack = run(toolCall, 'laminar-no-repack', true);
    expect(on.ledger.consumed).toBe(off.ledger.consumed);
    expect(on.ledger.generating + on.ledger.moving + on.ledger.buffered + on.ledger.consumed).toBe(on.ledger.claimed);
    // Each move also takes what waits at the source's tools: more trajectories per move.
    expect(on.repack.movedTrajectories / on.repack.moves).toBeGreaterThan(off.repack.movedTrajectories / off.repack.moves);
    // A released source takes the newest weights and claims again: its engine does not idle
    // waiting for its own calls to come back.
    expect(on.throughput.tokensPerS).toBeGreaterThan(off.throughput.tokensPerS * 1.2);
    expect(on.kvUtilisation).toBeGreaterThan(off.kvUtilisation);
    expect(off.throughput.tokensPerS).toBeLessThan(noRepack.throughput.tokensPerS * 1.2);
  });

  it('changes nothing without repack or without tool calls', () => {
    expect(run(toolCall, 'laminar-no-repack', true).events).toBe(run(toolCall, 'laminar-no-repack', false).events);
    const math = tinyScenario();
    expect(run(math, 'laminar', true).events).toBe(run(math, 'laminar', false).events);
    expect(run(math, 'laminar', true).stepEndsS).toEqual(run(math, 'laminar', false).stepEndsS);
  });
});
