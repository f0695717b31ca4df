/**
 * areal (AReaL v0.3, the paper's fourth baseline, §8 and appendix A.3; docs/design/simulator.md):
 * separate trainer and rollout GPUs (Table 2's AReaL column), stream generation with partial
 * rollout.
 *
 * - Every rollout keeps `maxConcurrency` trajectories in flight (A.3: 1,024), refilled in whole
 *   prompt groups as trajectories finish, never waiting for a batch boundary.
 * - Staleness bound `max_head_offpolicyness` η (`areal.maxHeadOffpolicyness`; ∞ in the paper's
 *   throughput runs, §8.1): a trajectory may start only while the trajectories started so far
 *   stay within η + 1 batches of the trainer's version, AReaL's admission rule, so no trajectory
 *   is trained more than η versions after its first token.
 * - The trainer (Megatron-LM, TP × PP × DP, trainer/parallel-step.ts) trains as soon as a batch of
 *   completed trajectories is in its FIFO buffer. At each new version every rollout is
 *   interrupted: its engine is drained (the KV cache dropped), the new weights arrive, and the
 *   interrupted trajectories are resubmitted, their prompt and every token generated so far
 *   re-prefilled (§2.3: "this re-prefill consumes 24.1 % of the rollout time"; appendix B: the
 *   recomputation grows with the trajectories in flight and the update frequency).
 * - The weights (mechanism arealDiskWeights) go through storage, as AReaL v0.3's do: the trainer
 *   saves the version (its ranks' shards serialised and written, time-model.ts `arealSaveMs`)
 *   before it trains again, and every server then reads its shard (`arealLoadMs`) while its
 *   engine is drained; the trainer does not wait for them, and a version saved while they still
 *   load is loaded next. Off: the GPU-direct synchronisation the other baselines use, which the
 *   trainer waits for too.
 *
 * A trajectory's version is the one of its first token (AReaL's head off-policyness): inherent
 * and consumption staleness count from it, though its later tokens come from newer weights.
 */
import type { LeapRequest } from '../engine/leap-engine.js';
import type { EngineActor } from '../engine/engine-actor.js';
import { arealLoadMs, arealSaveMs, ncclSyncMs } from '../trainer/time-model.js';
import type { RunContext } from './run-context.js';

interface Replica {
  actor: EngineActor;
  owned: number;
  /** Interrupted for a weight update: nothing claimed until its trajectories are back. */
  updating: boolean;
}

export function runAreal(ctx: RunContext): void {
  const { sim, scenario, placement, workload } = ctx;
  const throughStorage = ctx.mechanisms.arealDiskWeights;
  const layout = ctx.trainLayout;
  const writers = layout === null ? 1 : layout.kind === 'megatron' ? layout.tp * layout.pp : layout.fsdp;
  const saveMs = throughStorage ? arealSaveMs(scenario, writers) : 0;
  const loadMs = throughStorage ? arealLoadMs(scenario, placement.tp) : ncclSyncMs(scenario, placement.tp);
  const bound = scenario.areal.maxHeadOffpolicyness;
  const batchSize = workload.batchSize;
  const group = workload.groupSize;
  const cap = Math.max(group, Math.floor(scenario.maxConcurrency / group) * group);
  const replicas: Replica[] = [];
  for (let i = 0; i < placement.rollouts; i++) {
    const r: Replica = { actor: null as unknown as EngineActor, owned: 0, updating: false };
    r.actor = ctx.addEngine({ finished: (id) => finished(r, id) });
    replicas.push(r);
  }
  let trainerVersion = 0;
  let training = false;
  /** The servers are loading a version; `newerSaved`: another was saved meanwhile, loaded next. */
  let loading = false;
  let newerSaved = false;
  let started = 0;
  /** Completed trajectories not yet trained, FIFO. */
  const buffer: number[] = [];
  let head = 0;

  /** AReaL's admission: the started trajectories stay within η + 1 batches of the trainer's version. */
  function mayStart(): boolean {
    return bound === null || started + group <= (trainerVersion + bound + 1) * batchSize;
  }

  function refill(r: Replica): void {
    if (r.updating) return;
    let groups = 0;
    while (r.owned + (groups + 1) * group <= cap && mayStart()) {
      groups++;
      started += group;
    }
    if (groups === 0) return;
    const reqs = ctx.pool.claim(groups, trainerVersion);
    r.owned += reqs.length;
    r.actor.submit(reqs);
  }

  function finished(r: Replica, id: number): void {
    ctx.completed(id, trainerVersion);
    r.owned--;
    buffer.push(id);
    refill(r);
    maybeTrain();
  }

  function maybeTrain(): void {
    if (training || ctx.stepsDone >= ctx.steps || buffer.length - head < batchSize) return;
    training = true;
    const ids = Int32Array.from(buffer.slice(head, head + batchSize));
    head += batchSize;
    if (head > 65_536) {
      buffer.splice(0, head);
      head = 0;
    }
    const tokens = ctx.consume(ids, trainerVersion);
    sim.after(ctx.trainMs(ids) + saveMs, {
      fire: () => {
        trainerVersion++;
        ctx.stepEnded(tokens, ids.length);
        if (ctx.stepsDone < ctx.steps) updateWeights();
        if (throughStorage) {
          // Saved: the trainer goes on while the servers load it.
          training = false;
          maybeTrain();
        }
      },
    });
  }

  /** Every rollout interrupted, given the new weights, and its trajectories resumed with a re-prefill. */
  function updateWeights(): void {
    if (loading) {
      newerSaved = true;
      return;
    }
    loading = true;
    const held: LeapRequest[][] = replicas.map((r) => {
      r.updating = true;
      const reqs = r.actor.drain();
      for (const req of reqs) ctx.ledger.moveOut(req.id);
      ctx.movingNow += reqs.length;
      return reqs;
    });
    const load = (): void =>
      sim.after(loadMs, {
        fire: () => {
          if (newerSaved) {
            newerSaved = false;
            load();
            return;
          }
          loading = false;
          replicas.forEach((r, i) => {
            const reqs = held[i]!;
            for (const req of reqs) ctx.ledger.moveIn(req.id);
            ctx.movingNow -= reqs.length;
            r.updating = false;
            if (reqs.length > 0) r.actor.submit(reqs);
            refill(r);
          });
          if (!throughStorage) {
            training = false;
            maybeTrain();
          }
        },
      });
    load();
  }

  for (const r of replicas) refill(r);
}
