/**
 * A training iteration's time on a parallel trainer (issue #48; docs/design/simulator.md,
 * "Trainer time"): the iteration is `miniBatches` optimizer steps, each one a synchronous step of
 * every data-parallel group, so each waits for the group with the most tokens
 * (dataParallelStragglers) and for the collectives compute does not hide (trainerCommunication).
 *
 * Layouts, as appendix A.3 states them:
 * - FSDP with Ulysses sequence parallelism (verl, and the systems built on it: laminar, one-step,
 *   stream): a data-parallel group is `sequenceParallel` GPUs sharing sequences; parameters are
 *   sharded over `fsdp` GPUs (hybrid sharding, replicated across train GPUs / fsdp replicas).
 *   Per mini-batch each GPU gathers the parameters twice (forward, backward) and reduce-scatters
 *   FP32 gradients inside its FSDP group, hidden behind compute by FSDP's prefetch where compute
 *   is longer; then the gradient shard is all-reduced across the replicas over the inter-machine
 *   links (ring: 2 (d − 1)/d of the shard), exposed.
 * - Megatron TP × PP (AReaL): a data-parallel group is tp × pp GPUs; each mini-batch pays the
 *   1F1B pipeline bubble, (pp − 1) micro-batches over m (one sequence per micro-batch), and an
 *   exposed all-reduce of the FP32 gradient shard across the data-parallel groups.
 * Tensor parallelism's and Ulysses' all-to-all traffic is proportional to the tokens a GPU
 * computes, like the compute itself, so it is part of the MFU and not a term here.
 *
 * Attention's own FLOPs (trainingAttention): the linear formula counts the FLOPs of the weights
 * (flopsPerTokenPerParam × params a token), but a sequence's attention scores and their weighted
 * sum grow with its length. Per layer a causal forward pass computes QKᵀ and AV over half of the
 * T × T scores, 2 × width × T² FLOPs (width: query heads × head dimension), against the weights'
 * 2 × params × T; backward and the extra forward passes scale both alike, so a sequence of T
 * tokens costs as many FLOPs as T (1 + layers × width × T / params) tokens of the linear formula
 * (the PaLM MFU accounting, halved for the causal mask). The long tail weighs more: a 16 K-token
 * 7B sequence costs 1.22 times its tokens, a 1 K one 1.01, and the stragglers compare FLOPs.
 *
 * With no layout (or every mechanism here off) this is the linear formula of time-model.ts.
 */
import { weightBytes } from '../scenario/derive.js';
import type { Scenario } from '../scenario/schema.js';
import type { Mechanisms } from '../mechanisms.js';

type Inputs = Pick<Scenario, 'hardware' | 'model' | 'trainer'>;

/**
 * Attention's width, query heads × head dimension. A scenario states it (`model.attentionWidth`);
 * otherwise the width of a dense transformer of this size, params ≈ 12 × layers × width².
 */
export function attentionWidth(s: Pick<Scenario, 'model'>): number {
  return s.model.attentionWidth ?? Math.sqrt(s.model.params / (12 * s.model.layers));
}

/**
 * `lengths` as tokens of the linear formula: each sequence's T (1 + layers × width × T / params),
 * its attention's FLOPs counted (trainingAttention, above).
 */
export function withAttentionFlops(s: Pick<Scenario, 'model'>, lengths: ArrayLike<number>): Float64Array {
  const perToken = (s.model.layers * attentionWidth(s)) / s.model.params;
  const out = new Float64Array(lengths.length);
  for (let i = 0; i < lengths.length; i++) {
    const t = lengths[i]!;
    out[i] = t * (1 + perToken * t);
  }
  return out;
}

export type TrainLayout =
  { readonly kind: 'fsdp'; readonly fsdp: number; readonly sequenceParallel: number } | { readonly kind: 'megatron'; readonly tp: number; readonly pp: number };

/** Data-parallel groups of a layout on `trainGpus` GPUs (at least 1). */
export function dataParallelGroups(layout: TrainLayout | null, trainGpus: number): number {
  if (layout === null) return 1;
  const width = layout.kind === 'fsdp' ? layout.sequenceParallel : layout.tp * layout.pp;
  return Math.max(1, Math.floor(trainGpus / width));
}

/**
 * The tokens of the slowest group in each mini-batch, summed over the mini-batches: the batch
 * (`lengths`, in arrival order) is dealt to `groups` groups balanced by length with equal counts
 * (longest first, in a snake over the groups), each group keeps its share in arrival order and
 * cuts it into `miniBatches` consecutive slices, and the mini-batch takes as long as its largest
 * slice. Returns also the sequences per group and mini-batch (micro-batches of a pipeline).
 */
export function slowestGroupTokens(lengths: ArrayLike<number>, groups: number, miniBatches: number): { tokens: number; sequencesPerSlice: number } {
  const n = lengths.length;
  if (groups <= 1 || n === 0) {
    let total = 0;
    for (let i = 0; i < n; i++) total += lengths[i]!;
    return { tokens: total, sequencesPerSlice: Math.max(1, Math.ceil(n / Math.max(1, miniBatches))) };
  }
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => lengths[b]! - lengths[a]! || a - b);
  const groupOf = new Int32Array(n);
  for (let k = 0; k < n; k++) {
    const round = Math.floor(k / groups);
    const pos = k % groups;
    groupOf[order[k]!] = round % 2 === 0 ? pos : groups - 1 - pos;
  }
  const shares: number[][] = Array.from({ length: groups }, () => []);
  for (let i = 0; i < n; i++) shares[groupOf[i]!]!.push(lengths[i]!);
  const slowest = new Float64Array(miniBatches);
  let maxSlice = 1;
  for (const share of shares) {
    // np.array_split: the first (len % m) slices get one more.
    const base = Math.floor(share.length / miniBatches);
    const extra = share.length % miniBatches;
    let at = 0;
    for (let m = 0; m < miniBatches; m++) {
      const size = base + (m < extra ? 1 : 0);
      maxSlice = Math.max(maxSlice, size);
      let sum = 0;
      for (let j = 0; j < size; j++) sum += share[at + j]!;
      at += size;
      if (sum > slowest[m]!) slowest[m] = sum;
    }
  }
  let tokens = 0;
  for (const t of slowest) tokens += t;
  return { tokens: tokens * groups, sequencesPerSlice: maxSlice };
}

/** Milliseconds of `bytes` over `GBs`. */
function ms(bytes: number, GBs: number): number {
  return (bytes / (GBs * 1e9)) * 1e3;
}

/** Per mini-batch: the FSDP collectives that prefetch can hide, and the replicas' exposed all-reduce. */
export function fsdpCommMs(s: Inputs, layout: { fsdp: number }, trainGpus: number): { hideable: number; exposed: number } {
  const w = weightBytes(s);
  const f = Math.min(layout.fsdp, trainGpus);
  const inter = s.hardware.interMachineGBsPerGpu ?? s.hardware.nvlinkGBs;
  const inside = f <= s.hardware.gpusPerMachine ? s.hardware.nvlinkGBs : inter;
  // Two BF16 parameter gathers (forward, backward) and an FP32 gradient reduce-scatter.
  const hideable = f > 1 ? ms(2 * w * ((f - 1) / f), inside) + ms(2 * w * ((f - 1) / f), inside) : 0;
  const replicas = Math.floor(trainGpus / f);
  const exposed = replicas > 1 ? ms(2 * ((replicas - 1) / replicas) * ((2 * w) / f), inter) : 0;
  return { hideable, exposed };
}

/** Per mini-batch: the exposed FP32 gradient all-reduce across Megatron's data-parallel groups. */
export function megatronAllReduceMs(s: Inputs, layout: { tp: number; pp: number }, trainGpus: number): number {
  const groups = dataParallelGroups({ kind: 'megatron', ...layout }, trainGpus);
  if (groups <= 1) return 0;
  const inter = s.hardware.interMachineGBsPerGpu ?? s.hardware.nvlinkGBs;
  return ms(2 * ((groups - 1) / groups) * ((2 * weightBytes(s)) / (layout.tp * layout.pp)), inter);
}

/** A training iteration of `lengths` (tokens per trajectory, arrival order) in `miniBatches` optimizer steps. */
export function trainIterationMs(
  s: Inputs,
  lengths: ArrayLike<number>,
  trainGpus: number,
  miniBatches: number,
  layout: TrainLayout | null,
  mech: Pick<Mechanisms, 'trainerCommunication' | 'dataParallelStragglers' | 'trainingAttention'>,
): number {
  const m = Math.max(1, Math.min(miniBatches, lengths.length));
  const groups = dataParallelGroups(layout, trainGpus);
  // Dealing by effective length deals in the same order as by tokens (it grows with T).
  const work = layout !== null && mech.trainingAttention ? withAttentionFlops(s, lengths) : lengths;
  const split = mech.dataParallelStragglers ? slowestGroupTokens(work, groups, m) : slowestGroupTokens(work, 1, m);
  const flopMs = (tokens: number): number =>
    ((tokens * s.trainer.flopsPerTokenPerParam * s.model.params) / (trainGpus * s.hardware.gpu.bf16Tflops * 1e12 * s.trainer.mfu)) * 1e3;
  const computeMs = flopMs(split.tokens);
  if (layout === null || !mech.trainerCommunication) return computeMs;
  if (layout.kind === 'fsdp') {
    const comm = fsdpCommMs(s, layout, trainGpus);
    const perMini = computeMs / m;
    return m * (Math.max(perMini, comm.hideable) + comm.exposed);
  }
  // 1F1B: the pipeline fills and drains once per mini-batch, (pp - 1) micro-batch times over m.
  const micro = mech.dataParallelStragglers ? split.sequencesPerSlice : Math.max(1, Math.ceil(lengths.length / m / groups));
  const bubble = (layout.pp - 1) / micro;
  return computeMs * (1 + bubble) + m * megatronAllReduceMs(s, layout, trainGpus);
}
