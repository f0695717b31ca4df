/**
 * stream (stream generation, staleness bound 1, Figure 3(c); docs/design/simulator.md): as
 * one-step, separate trainer and rollout GPUs and a global weight synchronisation between
 * batches, except that the trainer trains a mini-batch of the batch being generated as soon as
 * that many of its trajectories are complete (short ones first), instead of waiting a whole
 * iteration for it. The global barrier stays: the rollouts start batch i+1 only when batch i's
 * slowest trajectory is done, its last mini-batch trained, and the new version synchronised.
 *
 * Versions count training steps (one per batch), as for every system, so batch i is generated
 * with and trained from version i: staleness 0 in versions. The paper's bound of 1 counts
 * mini-batch updates, which the per-step histograms here do not resolve.
 */
import { ncclSyncMs } from '../trainer/time-model.js';
import type { RunContext } from './run-context.js';

export function runStream(ctx: RunContext): void {
  const { sim, scenario, placement, workload } = ctx;
  const replicas = Array.from({ length: placement.rollouts }, () => ctx.addEngine({ finished: (id) => finished(id) }));
  const syncMs = ncclSyncMs(scenario, placement.tp);
  const miniBatch = Math.max(1, Math.floor(workload.batchSize / scenario.workload.miniBatches));
  let version = 0;
  let outstanding = 0;
  /** Completed trajectories of the batch not yet trained, in completion order. */
  const ready: number[] = [];
  let untrained = 0;
  let training = false;
  let batchTokens = 0;

  function iteration(): void {
    const requests = ctx.pool.claim(workload.promptsPerStep, version);
    const perReplica: (typeof requests)[] = replicas.map(() => []);
    for (let i = 0; i < requests.length; i++) perReplica[Math.floor(i / workload.groupSize) % replicas.length]!.push(requests[i]!);
    outstanding = untrained = requests.length;
    batchTokens = 0;
    replicas.forEach((actor, i) => {
      if (perReplica[i]!.length > 0) actor.submit(perReplica[i]!);
    });
  }

  function finished(id: number): void {
    ctx.completed(id, version);
    ready.push(id);
    outstanding--;
    trainNext();
  }

  /** A mini-batch once one is complete; the batch's remainder once generation is over. */
  function trainNext(): void {
    if (training || ready.length === 0 || (ready.length < miniBatch && outstanding > 0)) return;
    training = true;
    const ids = Int32Array.from(ready.splice(0, miniBatch));
    const tokens = ctx.consume(ids, version);
    batchTokens += tokens;
    // One optimizer step per mini-batch (the remainder at the batch's end may be several).
    sim.after(ctx.trainMs(ids, Math.max(1, Math.round(ids.length / miniBatch))), {
      fire: () => {
        training = false;
        untrained -= ids.length;
        if (untrained > 0) {
          trainNext();
          return;
        }
        version++;
        ctx.stepEnded(batchTokens, workload.batchSize);
        if (ctx.stepsDone < ctx.steps) sim.after(syncMs, { fire: iteration });
      },
    });
  }

  iteration();
}
