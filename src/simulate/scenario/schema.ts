/**
 * The schema of a simulator scenario file (src/simulate/scenarios/*.json; docs/design/simulator.md says
 * what each field means and where its default comes from). Shape only: the rules that relate
 * fields to each other (placements that add up, a model that fits its GPUs) are in check.ts.
 *
 * Objects are strict: an unknown key is an error, so a typo never falls back to a default.
 * Units are in the key names (S seconds, Ms milliseconds, GB 10^9 bytes, GBs GB per second,
 * TBs, Tflops, Us microseconds); values are plain numbers.
 */
import { z } from 'zod';

/** The systems the simulator compares (docs/design/simulator.md, "The five systems"). */
export const SYSTEMS = ['laminar', 'laminar-no-repack', 'one-step', 'stream', 'sync', 'areal'] as const;
export type SystemName = (typeof SYSTEMS)[number];

const positive = z.number().positive();
const nonNegative = z.number().nonnegative();
const fraction = z.number().positive().max(1);
const count = z.number().int().positive();
const index = z.number().int().nonnegative();
/** AReaL's storage rates when a scenario gives none (the `areal.storage` field below). */
const AREAL_STORAGE_DEFAULTS = { serialiseSPerGB: 2, transferSPerGB: 3.75 };

const gpuSchema = z.strictObject({
  name: z.string().min(1),
  memoryGB: positive,
  hbmTBs: positive,
  bf16Tflops: positive,
});

const hardwareSchema = z.strictObject({
  gpu: gpuSchema,
  gpusPerMachine: count,
  nvlinkGBs: positive,
  /** Host-to-GPU copy of a rollout's weights from its relay. */
  pcieGBs: positive,
  /** One hop of the relay chain: bandwidth, and the per-chunk start-up cost of appendix C. */
  relayLink: z.strictObject({ bandwidthGBs: positive, startupUs: nonNegative }),
  /** The trainer's push of a version into the master relay (the actor stall, §8.3). */
  trainerToMasterGBs: positive,
  /**
   * The baselines' GPU-direct global weight synchronisation: each rollout GPU receives its shard
   * (weight bytes / TP) at this rate, after a fixed cost (group set-up, resharding).
   */
  ncclSyncGBs: positive,
  ncclSyncFixedS: nonNegative,
  /**
   * Each GPU's share of its machine's inter-machine bandwidth (§8: 8 × 400 Gbps for 8 GPUs, 50 GB/s):
   * the trainer's collectives across machines (mechanism trainerCommunication). Default: nvlinkGBs.
   */
  interMachineGBsPerGpu: positive.optional(),
});

const modelSchema = z.strictObject({
  name: z.string().min(1),
  params: positive,
  layers: count,
  /** K and V of every layer for one token, all tensor-parallel shards together. */
  kvBytesPerToken: count,
  /** Default: params x 2 (BF16). */
  weightBytes: positive.optional(),
  /**
   * Query heads x head dimension: attention's FLOPs in training (mechanism trainingAttention,
   * trainer/parallel-step.ts). Default: a dense transformer's width, sqrt(params / (12 x layers)).
   */
  attentionWidth: count.optional(),
});

const engineSchema = z.strictObject({
  /** vLLM's gpu_memory_utilization. */
  memoryUtilisation: fraction,
  /** Per GPU, besides weights and KV cache: activations, CUDA graphs. */
  reserveGBPerGpu: nonNegative,
  /** A decode step's cost besides reading the weights: scheduling, sampling, launches. */
  stepOverheadMs: nonNegative,
  /** Share of the HBM bandwidth a decode step's weight read achieves. */
  hbmEfficiency: fraction,
  /** Tensor-parallel all-reduces per layer and step (TP > 1 only). */
  tpCommMsPerLayer: nonNegative,
  /** Prefill runs compute-bound at this share of the GPUs' peak. */
  prefillMfu: fraction,
  /** B of the engine's step-time model: flat up to B running requests (§2.4). */
  rooflineBatch: count,
  slopeBeyondRoofline: nonNegative,
  /** vLLM's max_num_seqs. */
  maxRunning: count,
  /**
   * Attention's read of the resident KV cache per step, ms per million tokens. Default: derived
   * from the hardware (KV bytes of a token over TP at hbmEfficiency of the HBM bandwidth) while
   * the mechanism attentionKvRead is on, 0 while it is off.
   */
  kvReadMsPerMToken: nonNegative.optional(),
  /** Overrides of the derived values. */
  kvCapacityTokens: count.optional(),
  decodeStepMs: positive.optional(),
});

const lengthScheduleSchema = z
  .array(z.strictObject({ step: index, tokens: positive }))
  .min(1)
  .refine((points) => points.every((p, i) => i === 0 || p.step > points[i - 1]!.step), 'steps must increase');

const lengthQuantilesSchema = z
  .array(z.strictObject({ p: z.number().gt(0).lt(1), ofMedian: positive }))
  .min(2)
  .refine(
    (points) => points.every((q, i) => i === 0 || (q.p > points[i - 1]!.p && q.ofMedian >= points[i - 1]!.ofMedian)),
    'p must increase, and ofMedian never decrease',
  )
  .refine((points) => points.some((q) => q.p === 0.5 && q.ofMedian === 1), 'the quantiles pass through the median: { "p": 0.5, "ofMedian": 1 }');

const workloadSchema = z.strictObject({
  task: z.enum(['math', 'tool-call']),
  /** Prompts per training batch (GRPO groups). */
  prompts: count,
  /** Samples per prompt. */
  groupSize: count,
  /** Mini-batch updates per training step (one version per step). */
  miniBatches: count,
  promptTokens: z.strictObject({ median: positive, sigma: nonNegative.default(0.25), max: count }),
  outputTokens: z
    .strictObject({
      /** Median output length over training: piecewise linear between the points, flat outside. */
      median: lengthScheduleSchema,
      /** The log-normal's spread (the paper's Figure 2: 10); or else `quantiles` (null or absent here). */
      p99OverMedian: z.number().min(1).nullish(),
      /**
       * Or the shape as quantiles, each length a multiple of the median, through (0.5, 1); log
       * length linear in the normal quantile between and beyond them (workload/length-quantiles.ts).
       */
      quantiles: lengthQuantilesSchema.optional(),
      max: count,
      /**
       * The share of the log-length variance that the prompt sets, shared by its GRPO group (its
       * difficulty; mechanism groupLengthCorrelation, workload.ts): 0 draws every response alone.
       * The spread over all responses (p99OverMedian) is the same whatever the share.
       */
      promptShare: z.number().min(0).max(1).default(0),
    })
    .refine((o) => (o.p99OverMedian == null) !== (o.quantiles === undefined), 'give the shape as p99OverMedian or as quantiles, one of them'),
  toolCalls: z
    .strictObject({
      maxCalls: index,
      meanCalls: nonNegative,
      latencyMedianS: positive,
      latencyP99OverMedian: z.number().min(1),
      /**
       * Calls the sandbox executes at once, the same at every cluster size (static provisioning);
       * more queue, first come first served (fleet/sandbox.ts). null: unbounded.
       */
      sandboxSlots: z.number().int().positive().nullable().default(null),
    })
    .nullable()
    .default(null),
});

const trainerSchema = z.strictObject({
  mfu: fraction,
  /** Training FLOPs per token per parameter: 6 forward and backward, plus 2 per extra forward pass. */
  flopsPerTokenPerParam: positive,
  /** Sampling and transfer on the trainer's critical path per step (§8.1: 1.9 s). */
  dataPlaneOverheadS: nonNegative,
  strategy: z.enum(['fifo', 'uniform', 'groups']).default('fifo'),
  maxStaleness: index.nullable().default(null),
  prefetch: z.boolean().default(true),
  /**
   * The FSDP trainer's layout (appendix A.3; laminar, one-step, stream, sync): parameters sharded
   * over `fsdp` GPUs, sequences shared by `sequenceParallel` GPUs (Ulysses). null: no layout, the
   * trainer's time is linear in its GPUs (trainer/parallel-step.ts).
   */
  layout: z.strictObject({ fsdp: count, sequenceParallel: count }).nullable().default(null),
  /** AReaL's Megatron-LM trainer (appendix A.3): tensor and pipeline parallel sizes. null: as `layout`. */
  megatron: z.strictObject({ tp: count, pp: count }).nullable().default(null),
});

const managerSchema = z.strictObject({
  /** 0 turns repack off. */
  repackIntervalS: nonNegative,
  cMax: fraction,
  rooflineBatch: count,
  /** One repack move, source out to destination resuming (Table 1: 0.69 s). */
  repackMoveS: nonNegative,
  tickMs: positive,
  relayFailureDetectS: nonNegative,
  planPublishS: nonNegative,
  suspectAfterS: positive,
  deadAfterS: positive,
  orphanWaitS: nonNegative,
  /** A rollout flushes a trajectory's tokens to the partial pool every this many tokens. */
  partialFlushTokens: count,
});

const splitSchema = z.strictObject({ train: count, rollout: count });

const placementSchema = z.strictObject({
  gpus: count,
  laminar: splitSchema.optional(),
  'laminar-no-repack': splitSchema.optional(),
  'one-step': splitSchema.optional(),
  stream: splitSchema.optional(),
  sync: z.strictObject({ colocated: count }).optional(),
  areal: splitSchema.optional(),
});

const tpSchema = z.strictObject({
  laminar: count.optional(),
  'laminar-no-repack': count.optional(),
  'one-step': count.optional(),
  stream: count.optional(),
  sync: count.optional(),
  areal: count.optional(),
});

/** When a failure happens: at a virtual time, or when the trainer starts a given step. */
const whenFields = { atS: nonNegative.optional(), atStep: index.optional() };
/** Which runs it applies to (default: laminar and laminar-no-repack, every placement row of the scenario). */
const scopeFields = { systems: z.array(z.enum(SYSTEMS)).min(1).optional(), gpus: count.optional() };

const failureSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('machine'), ...whenFields, ...scopeFields, machine: index, replaceAfterS: nonNegative.nullable() }),
  z.strictObject({ kind: z.literal('relay'), ...whenFields, ...scopeFields, machine: index, restartAfterS: nonNegative.nullable() }),
  z.strictObject({ kind: z.literal('master'), ...whenFields, ...scopeFields, restartAfterS: nonNegative.nullable().default(null) }),
  z.strictObject({
    kind: z.literal('slow-link'),
    ...whenFields,
    ...scopeFields,
    machine: index,
    bandwidthFraction: z.number().positive().lt(1),
    durationS: positive,
  }),
  z.strictObject({ kind: z.literal('rollout'), ...whenFields, ...scopeFields, rollout: index, reinitialiseS: nonNegative }),
]);

export const scenarioSchema = z.strictObject({
  name: z.string().regex(/^[a-z0-9][a-z0-9._-]{0,63}$/, 'a name is 1-64 characters of [a-z0-9._-], starting with a letter or digit'),
  description: z.string().default(''),
  /** Assumptions and sources, for the reader and the report. */
  notes: z.array(z.string()).default([]),
  seed: z
    .number()
    .int()
    .nonnegative()
    .max(2 ** 32 - 1),
  hardware: hardwareSchema,
  model: modelSchema,
  engine: engineSchema,
  workload: workloadSchema,
  trainer: trainerSchema,
  manager: managerSchema,
  broadcast: z.strictObject({ chunkBytes: z.union([z.literal('auto'), z.number().int().min(4096).multipleOf(4096)]) }),
  rolloutTp: tpSchema,
  /** Trajectories a laminar rollout holds (A.3: 1,024): claimed at once, or kept in flight (claimMode). */
  maxConcurrency: count,
  /**
   * When a laminar rollout claims again, by the rollout agent's rule (src/rollout/claim-policy.ts):
   * 'batch' (its --max-in-flight 0, the default): maxConcurrency at once, again when its engine is
   * empty; 'continuous' (--max-in-flight maxConcurrency): claims refilled as trajectories finish,
   * up to maxConcurrency in flight, until a newer version waits on its relay.
   */
  claimMode: z.enum(['batch', 'continuous']).default('batch'),
  /**
   * AReaL (systems/areal.ts): its staleness bound, max_head_offpolicyness, null for ∞, as the
   * paper sets it for the throughput runs (§8.1; its convergence runs use 4, §8.2); and, for the
   * mechanism arealDiskWeights, the rates of its weight path through storage (AReaL v0.3's
   * trainer saves every version to a shared file system, and every SGLang server reloads it
   * from there with `update_weights_from_disk`), from the paper's own profiling of that path
   * (§4.1): seconds a GB to serialise a trainer's shard ("serializing a single 4GB model shard
   * takes approximately 8 seconds": 2) and to move a GB over TCP to or from the storage
   * ("another 10 to 20 seconds" for the 4 GB: 3.75, the middle).
   */
  areal: z
    .strictObject({
      maxHeadOffpolicyness: index.nullable(),
      storage: z.strictObject({ serialiseSPerGB: nonNegative, transferSPerGB: nonNegative }).default(AREAL_STORAGE_DEFAULTS),
    })
    .default({ maxHeadOffpolicyness: null, storage: AREAL_STORAGE_DEFAULTS }),
  /**
   * verl's colocated engine (systems/sync.ts, mechanism colocatedEngine): the share of each GPU's
   * memory its vLLM may take beside the FSDP trainer's resident shards, verl's
   * `rollout.gpu_memory_utilization` (0.5 by default in verl's ppo_trainer.yaml; the paper does
   * not give its own).
   */
  sync: z.strictObject({ gpuMemoryUtilisation: fraction }).default({ gpuMemoryUtilisation: 0.5 }),
  /**
   * The systems whose vLLM runs eagerly, without CUDA graphs (mechanism eagerDecode,
   * scenario/derive.ts): verl v0.5.0's rollout default, `enforce_eager: True` ("to allow cache
   * freeing"), which the paper's sync baseline (verl v0.5.0) and its one-step and stream baselines
   * (built on verl) are taken to keep; laminar's and AReaL's engines use CUDA graphs. A step then
   * takes at least the CPU's launch of its kernels, `launchMsPerLayer` per decoder layer.
   */
  eager: z
    .strictObject({ systems: z.array(z.enum(SYSTEMS)), launchMsPerLayer: nonNegative })
    .default({ systems: ['one-step', 'stream', 'sync'], launchMsPerLayer: 0.3 }),
  placements: z.array(placementSchema).min(1),
  systems: z.array(z.enum(SYSTEMS)).min(1),
  failures: z.array(failureSchema).default([]),
  run: z.strictObject({ steps: count, warmupSteps: index, reportWindowS: positive.default(30) }),
});

type DeepReadonly<T> = T extends (infer U)[] ? readonly DeepReadonly<U>[] : T extends object ? { readonly [K in keyof T]: DeepReadonly<T[K]> } : T;

/** A scenario file as written (defaults not yet applied). */
export type ScenarioInput = z.input<typeof scenarioSchema>;
/** What the schema returns. */
export type ScenarioData = z.output<typeof scenarioSchema>;
/** A validated scenario: deeply frozen (load.ts). */
export type Scenario = DeepReadonly<ScenarioData>;
export type Failure = Scenario['failures'][number];
export type Placement = Scenario['placements'][number];

export function deepFreeze<T>(value: T): DeepReadonly<T> {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value as DeepReadonly<T>;
}
