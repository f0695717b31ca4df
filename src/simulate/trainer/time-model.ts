/**
 * The trainer's and the weight transfers' times, in virtual milliseconds, from the scenario
 * (docs/design/simulator.md, "Workload and hardware models"). The paper gives none of the
 * trainer's inputs (MFU, FLOPs per token): they are scenario fields, the same for every system
 * and scale, so the systems differ only in how they arrange the same work.
 *
 * - training a batch: tokens × flopsPerTokenPerParam × params / (train GPUs × peak × MFU);
 * - laminar's actor stall: the trainer pushes the version into the master relay;
 * - a rollout's weight load from its relay over PCIe (its shard: bytes / TP);
 * - the baselines' NCCL sync (one-step, stream): each rollout GPU receives its shard, plus a fixed cost;
 * - sync's (verl) switch from training to generation: resharding over NVLink;
 * - AReaL's weights through storage (mechanism arealDiskWeights): the trainer's save, a server's reload.
 */
import { weightBytes } from '../scenario/derive.js';
import type { Scenario } from '../scenario/schema.js';

type Inputs = Pick<Scenario, 'hardware' | 'model' | 'trainer'>;

export function trainStepMs(s: Inputs, tokens: number, trainGpus: number): number {
  const flops = tokens * s.trainer.flopsPerTokenPerParam * s.model.params;
  return (flops / (trainGpus * s.hardware.gpu.bf16Tflops * 1e12 * s.trainer.mfu)) * 1e3;
}

export function dataPlaneOverheadMs(s: Pick<Scenario, 'trainer'>): number {
  return s.trainer.dataPlaneOverheadS * 1e3;
}

export function pushToMasterMs(s: Pick<Scenario, 'hardware' | 'model'>): number {
  return (weightBytes(s) / (s.hardware.trainerToMasterGBs * 1e9)) * 1e3;
}

export function rolloutLoadMs(s: Pick<Scenario, 'hardware' | 'model'>, tp: number): number {
  return (weightBytes(s) / tp / (s.hardware.pcieGBs * 1e9)) * 1e3;
}

export function ncclSyncMs(s: Pick<Scenario, 'hardware' | 'model'>, tp: number): number {
  return (weightBytes(s) / tp / (s.hardware.ncclSyncGBs * 1e9) + s.hardware.ncclSyncFixedS) * 1e3;
}

/**
 * AReaL's save of a version (mechanism arealDiskWeights): the trainer's `writers` (the TP × PP
 * ranks of one data-parallel replica of its Megatron trainer) each serialise their shard and
 * write it to the shared storage, in parallel; the trainer goes on once they are done.
 */
export function arealSaveMs(s: Pick<Scenario, 'model' | 'areal'>, writers: number): number {
  const { serialiseSPerGB, transferSPerGB } = s.areal.storage;
  return (weightBytes(s) / Math.max(1, writers) / 1e9) * (serialiseSPerGB + transferSPerGB) * 1e3;
}

/** An AReaL rollout server's reload of a version from the storage: each of its TP ranks reads its shard. */
export function arealLoadMs(s: Pick<Scenario, 'model' | 'areal'>, tp: number): number {
  return (weightBytes(s) / tp / 1e9) * s.areal.storage.transferSPerGB * 1e3;
}

export function colocatedSwitchMs(s: Pick<Scenario, 'hardware' | 'model'>, tp: number): number {
  return (weightBytes(s) / tp / (s.hardware.nvlinkGBs * 1e9)) * 1e3;
}
