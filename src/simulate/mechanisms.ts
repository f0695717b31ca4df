/**
 * The mechanisms issue #48 added to close the gaps to the paper's evaluation, each switchable so
 * that its effect can be shown on its own (docs/components/simulator.md, "What each mechanism
 * closes"). All are on by default; `laminar simulate --without a,b` and `runScenario(...,
 * { mechanisms: { name: false } })` switch them off. With all of them off a run is the simulator
 * as it was before them.
 *
 * - attentionKvRead: a decode step also reads every running request's resident KV cache from HBM
 *   (the KV bytes of a token over TP at the achieved HBM bandwidth), unless the scenario states
 *   its own `engine.kvReadMsPerMToken`;
 * - trainerCommunication: each mini-batch's collectives on the paper's interconnect (FSDP's
 *   parameter gathers and gradient reduce-scatter, the gradient all-reduce across data-parallel
 *   replicas; for AReaL's Megatron trainer the gradient all-reduce and the pipeline bubble);
 * - dataParallelStragglers: a mini-batch's optimizer step waits for the data-parallel group with
 *   the most tokens (the batch dealt to the groups balanced by length, as verl's balance_batch,
 *   then each group's share cut into the mini-batches);
 * - colocatedEngine: the synchronous baseline's engine shares each GPU with the FSDP trainer
 *   (verl's gpu_memory_utilization, a smaller KV cache) and pays verl's weight synchronisation
 *   every iteration: the FSDP group's parameter gather, across machines for 32B and 72B, and the
 *   engine's wake and sleep over PCIe (systems/colocated-engine.ts);
 * - groupLengthCorrelation: a GRPO group's responses share their prompt's difficulty, the
 *   scenario's `workload.outputTokens.promptShare` of the log-length variance (workload.ts), so the
 *   long tail comes in groups: a replica dealt a hard prompt holds several long responses and the
 *   others finish early. Off, every response is drawn alone (the share read as 0);
 * - turnLockstep: on the tool-call task the baselines built on verl (one-step, stream, sync) run a
 *   replica's turns in lockstep, as batched multi-turn rollouts on verl's SPMD vLLM engine do (the
 *   paper runs the tool-call task with ReTool's open-source implementation on verl, §8 and A.3;
 *   that it loops this way is an assumption, the paper does not describe the loop): each turn is one
 *   generate call for the replica's trajectories still going, their tool calls run together when
 *   the call returns, and the next turn starts when the slowest call is back, so the replica's
 *   GPUs idle through every tool phase and through each turn's longest segment
 *   (fleet/tool-calls.ts). Off, every trajectory goes to its tool and back on its own, as laminar's
 *   and AReaL's agent loops do.
 * - trainingAttention: the trainer's time counts attention's FLOPs beside the weights', quadratic
 *   in a sequence's length (a causal pass: 2 × layers × width × T² forward FLOPs against the
 *   weights' 2 × params × T), so a long sequence costs more than its tokens and the data-parallel
 *   group holding the long tail waits longer (trainer/parallel-step.ts). Off, a sequence costs its
 *   tokens, as before.
 * - eagerDecode: the scenario's `eager.systems` (verl's baselines: one-step, stream, sync) run vLLM
 *   without CUDA graphs, verl v0.5.0's default (`enforce_eager: True`): the CPU launches each
 *   decode step's kernels one by one, overlapping the GPU's work, so a step takes at least its
 *   fixed overhead plus `eager.launchMsPerLayer` × layers. That floor binds where the GPU has
 *   little to do, a replica decoding a few long responses: the baselines' generation barrier.
 *   Off, every engine runs its CUDA graphs (the step as the weights and KV read make it).
 * - rolloutBatchShare: a laminar rollout's batch is its share of the global batch (the batch's
 *   prompts over the rollouts alive when it claims, whole prompt groups), `maxConcurrency` (A.3's
 *   "maximum concurrency", 1,024) its upper limit, not the claim's size. The fleet then holds
 *   about one global batch in flight, as a rollout built on verl is handed its part of the
 *   dataloader's batch; the paper's Figure 9 shows such a batch, 512 trajectories on a 32B TP-4
 *   rollout, which is 8,192 over §8.4's 16 rollouts (systems/laminar.ts, `claimTrajectories`).
 *   Off, every claim is `maxConcurrency`, the fleet holding rollouts × 1,024 (8 global batches at
 *   7B on 256 GPUs), and a claim's last trajectories wait in the engine's queue for versions.
 * - repackAtTools: on the tool-call task a repack move hands the destination every trajectory
 *   the source owns, those waiting at their tools included, as the rollout SDK's repack-out does
 *   (src/rollout/rollout-client.ts: it stops and hands over all of the rollout's tasks) and as
 *   Algorithm 1 plans it (the planner's `running` is what the rollout owns, round.ts): their calls
 *   go on and they come back to the destination (fleet/tool-calls.ts, `relocate`), so the source
 *   is released and takes the newest weights. Off, a move drains the source's engine alone, and
 *   its trajectories at their tools come back to it, so it is not released: with a rollout's
 *   share of the batch (128 trajectories at 7B on 256 GPUs) most of a tail is at its tools.
 * - arealDiskWeights: AReaL's versions go through a shared file system, as AReaL v0.3 moves them
 *   with its Megatron trainer (the trainer saves each version under its `param_realloc` cache
 *   and every SGLang server reloads it with `update_weights_from_disk`), at the rates the paper
 *   profiled for that path (§4.1, `scenario.areal.storage`): the trainer's ranks serialise and
 *   write their shards before it goes on, and each server, interrupted, reads its TP rank's shard
 *   before it resumes; the trainer does not wait for the servers. A version that arrives while
 *   the servers still load the one before is loaded after it. Off, AReaL's weights move by the
 *   GPU-direct synchronisation of the other baselines, the trainer waiting for it.
 */
import { ErrorCodes, InvalidInputError } from '../common/errors.js';

export const MECHANISMS = [
  'attentionKvRead',
  'trainerCommunication',
  'dataParallelStragglers',
  'colocatedEngine',
  'groupLengthCorrelation',
  'turnLockstep',
  'trainingAttention',
  'eagerDecode',
  'rolloutBatchShare',
  'repackAtTools',
  'arealDiskWeights',
] as const;
export type MechanismName = (typeof MECHANISMS)[number];
export type Mechanisms = Readonly<Record<MechanismName, boolean>>;

export const ALL_MECHANISMS: Mechanisms = Object.freeze(Object.fromEntries(MECHANISMS.map((m) => [m, true])) as Record<MechanismName, boolean>);
export const NO_MECHANISMS: Mechanisms = Object.freeze(Object.fromEntries(MECHANISMS.map((m) => [m, false])) as Record<MechanismName, boolean>);

/** Every mechanism on except `off`. */
export function mechanismsWithout(off: readonly string[]): Mechanisms {
  const out: Record<MechanismName, boolean> = { ...ALL_MECHANISMS };
  for (const name of off) {
    if (!(MECHANISMS as readonly string[]).includes(name))
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `unknown mechanism '${name}' (one of ${MECHANISMS.join(', ')})`, { mechanism: name });
    out[name as MechanismName] = false;
  }
  return Object.freeze(out);
}
