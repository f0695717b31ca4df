/**
 * verl's colocated engine (the sync system; mechanism colocatedEngine, issue #48): the rollout
 * engine and the FSDP trainer share every GPU, as verl's hybrid engine runs them
 * (docs/design/simulator.md, "The mechanisms of issue #48").
 *
 * - Memory: vLLM may take `rollout.gpu_memory_utilization` of each GPU (verl's default 0.5,
 *   `scenario.sync.gpuMemoryUtilisation`); the rest holds the trainer's FSDP shards, which stay
 *   resident while the engine generates (verl's param and optimizer offload are off by default).
 *   The engine's KV cache is that share less the reserve and its weight shard: about half of what a
 *   rollout with the GPU to itself has, so a colocated replica holds fewer running requests.
 * - Weight synchronisation, every iteration: each GPU gathers the full BF16 parameters from its
 *   FSDP group (verl's sharding manager materialises every parameter to load vLLM's TP shard), over
 *   NVLink when the group is inside a machine and over the GPU's share of the inter-machine links
 *   when it spans machines (32B: 16, 72B: 32); and the engine wakes and sleeps around generation
 *   (vLLM's sleep mode level 1: its weight shard to host memory and back over PCIe).
 *
 * With the mechanism off the engine has the whole GPU (the scenario's engine.memoryUtilisation) and
 * the switch is the earlier formula, the weight shard over NVLink (time-model.ts).
 */
import type { EngineProfile } from '../../stand-ins/engine-core.js';
import type { Mechanisms } from '../mechanisms.js';
import { engineProfileFor, weightBytes } from '../scenario/derive.js';
import type { Scenario } from '../scenario/schema.js';
import { colocatedSwitchMs } from '../trainer/time-model.js';

type Inputs = Pick<Scenario, 'hardware' | 'model' | 'engine' | 'sync'>;

/** The scenario's engine with the colocated memory share in place of its own. */
export function colocatedEngineInputs<S extends Inputs>(s: S): S {
  return { ...s, engine: { ...s.engine, memoryUtilisation: s.sync.gpuMemoryUtilisation } };
}

/** The profile of one colocated replica of `tp` GPUs. */
export function colocatedProfile(s: Inputs, tp: number, mech: Pick<Mechanisms, 'attentionKvRead' | 'colocatedEngine'>): EngineProfile {
  return engineProfileFor(mech.colocatedEngine ? colocatedEngineInputs(s) : s, tp, mech);
}

/**
 * The switch from training to generation, ms: the FSDP group's parameter gather on its link plus
 * the engine's wake and sleep over PCIe. `fsdp` is the trainer's FSDP group (null: no layout, the
 * gather is left out).
 */
export function colocatedWeightSyncMs(
  s: Pick<Scenario, 'hardware' | 'model'>,
  tp: number,
  fsdp: number | null,
  trainGpus: number,
  mech: Pick<Mechanisms, 'colocatedEngine'>,
): number {
  if (!mech.colocatedEngine) return colocatedSwitchMs(s, tp);
  const w = weightBytes(s);
  const f = fsdp === null ? 1 : Math.min(fsdp, trainGpus);
  const link = f <= s.hardware.gpusPerMachine ? s.hardware.nvlinkGBs : (s.hardware.interMachineGBsPerGpu ?? s.hardware.nvlinkGBs);
  const gatherMs = f > 1 ? ((w * (f - 1)) / f / (link * 1e9)) * 1e3 : 0;
  const wakeSleepMs = ((2 * w) / tp / (s.hardware.pcieGBs * 1e9)) * 1e3;
  return gatherMs + wakeSleepMs;
}
