/**
 * Values a scenario does not state but implies: a model's weight bytes, and the simulated
 * engine's profile (src/stand-ins/engine-core.ts) for the model on `tp` GPUs of the scenario's kind.
 * Each formula is docs/design/simulator.md's ("Workload and hardware models"); a scenario can
 * override the derived KV capacity and decode step with `engine.kvCapacityTokens` and
 * `engine.decodeStepMs`.
 *
 * - KV capacity: what vLLM's gpu_memory_utilization leaves on each GPU after the weight shard and
 *   the reserve, over the KV bytes of one token (sharded over TP like the weights);
 * - decode step: memory-bound, so the time to read one GPU's weight shard at the achieved HBM
 *   bandwidth, plus a fixed overhead, plus TP's all-reduces (two per layer);
 * - prefill: compute-bound, 2 FLOPs per parameter and token over the TP group's peak at an MFU;
 * - an eager engine's floor (mechanism eagerDecode): without CUDA graphs each GPU's process
 *   launches a step's kernels from the CPU, the scenario's `eager.launchMsPerLayer` for each
 *   decoder layer; the launches overlap the GPU's work (the weights' and the KV's read), so a step
 *   takes the fixed overhead plus the longer of the two: at least overhead + launches.
 */
import type { EngineProfile } from '../../stand-ins/engine-core.js';
import { ALL_MECHANISMS, type Mechanisms } from '../mechanisms.js';
import type { Scenario } from './schema.js';

type Inputs = Pick<Scenario, 'hardware' | 'model' | 'engine'>;

export function weightBytes(s: Pick<Scenario, 'model'>): number {
  return s.model.weightBytes ?? s.model.params * 2;
}

/** Bytes each GPU of a TP group has for KV after weights and the reserve (may be <= 0: no room). */
export function kvBytesPerGpu(s: Inputs, tp: number): number {
  return (s.hardware.gpu.memoryGB * s.engine.memoryUtilisation - s.engine.reserveGBPerGpu) * 1e9 - weightBytes(s) / tp;
}

export function kvCapacityTokens(s: Inputs, tp: number): number {
  if (s.engine.kvCapacityTokens !== undefined) return s.engine.kvCapacityTokens;
  return Math.max(0, Math.floor((tp * kvBytesPerGpu(s, tp)) / s.model.kvBytesPerToken));
}

export function decodeStepMs(s: Inputs, tp: number): number {
  if (s.engine.decodeStepMs !== undefined) return s.engine.decodeStepMs;
  const weightReadMs = (weightBytes(s) / tp / (s.hardware.gpu.hbmTBs * 1e12 * s.engine.hbmEfficiency)) * 1e3;
  const tpMs = tp > 1 ? s.engine.tpCommMsPerLayer * s.model.layers : 0;
  return s.engine.stepOverheadMs + weightReadMs + tpMs;
}

export function prefillMsPerToken(s: Inputs, tp: number): number {
  return ((2 * s.model.params) / (tp * s.hardware.gpu.bf16Tflops * 1e12 * s.engine.prefillMfu)) * 1e3;
}

/**
 * Attention's KV read per decode step, ms per million resident tokens: each GPU of the TP group
 * reads its shard of every running request's K and V once per step, at the achieved HBM bandwidth
 * (the same hbmEfficiency as the weights' read). A scenario's own value wins; 0 with the
 * mechanism off.
 */
export function kvReadMsPerMToken(s: Inputs, tp: number, mech: Pick<Mechanisms, 'attentionKvRead'> = ALL_MECHANISMS): number {
  if (s.engine.kvReadMsPerMToken !== undefined) return s.engine.kvReadMsPerMToken;
  if (!mech.attentionKvRead) return 0;
  return ((1e6 * s.model.kvBytesPerToken) / tp / (s.hardware.gpu.hbmTBs * 1e12 * s.engine.hbmEfficiency)) * 1e3;
}

/** An eager engine's least decode step, ms: the step's fixed overhead plus the CPU's launches, a layer at a time. */
export function eagerFloorMs(s: Pick<Scenario, 'model' | 'engine' | 'eager'>): number {
  return s.engine.stepOverheadMs + s.eager.launchMsPerLayer * s.model.layers;
}

/** The simulated engine's profile for one rollout replica of `tp` GPUs. */
export function engineProfileFor(s: Inputs, tp: number, mech: Pick<Mechanisms, 'attentionKvRead'> = ALL_MECHANISMS): EngineProfile {
  return {
    kvCapacityTokens: kvCapacityTokens(s, tp),
    rooflineBatch: s.engine.rooflineBatch,
    maxRunning: s.engine.maxRunning,
    decodeStepMs: decodeStepMs(s, tp),
    prefillMsPerToken: prefillMsPerToken(s, tp),
    slopeBeyondRoofline: s.engine.slopeBeyondRoofline,
    kvReadMsPerMToken: kvReadMsPerMToken(s, tp, mech),
  };
}
