/**
 * one-step (k = 1 staleness, Figure 3(b); docs/design/simulator.md): separate trainer and rollout
 * GPUs. In iteration i the rollouts generate batch i with W(i−1), each replica given an equal
 * share of the batch's prompt groups at once, while the trainer trains batch i−1 into W(i). When
 * both are done, a global NCCL weight synchronisation stalls both, then iteration i+1 starts.
 * Iteration time = max(generation of the batch's slowest trajectory, training) + sync.
 *
 * Versions: the trainer has produced i versions by the end of iteration i's training; batch i is
 * generated with version i − 1 (version 0 for the first two batches, as the pipeline starts with
 * the initial weights), so consumption staleness is 1 after the first step.
 */
import { ncclSyncMs } from '../trainer/time-model.js';
import type { RunContext } from './run-context.js';

export function runOneStep(ctx: RunContext): void {
  const { sim, scenario, placement, workload } = ctx;
  const replicas = Array.from({ length: placement.rollouts }, () => ctx.addEngine({ finished: (id) => finished(id) }));
  const syncMs = ncclSyncMs(scenario, placement.tp);
  /** Versions the trainer has produced. */
  let trainerVersion = 0;
  /** The version the rollouts hold (synchronised at each barrier). */
  let rolloutVersion = 0;
  let outstanding = 0;
  let generating: number[] = [];
  /** The batch generated in the previous iteration, trained in this one (null in the first). */
  let toTrain: number[] | null = null;
  let generationDone = false;
  let trainingDone = false;

  function iteration(): void {
    generationDone = false;
    trainingDone = toTrain === null;
    const requests = ctx.pool.claim(workload.promptsPerStep, rolloutVersion);
    const perReplica: (typeof requests)[] = replicas.map(() => []);
    for (let i = 0; i < requests.length; i++) perReplica[Math.floor(i / workload.groupSize) % replicas.length]!.push(requests[i]!);
    outstanding = requests.length;
    generating = requests.map((r) => r.id);
    replicas.forEach((actor, i) => {
      if (perReplica[i]!.length > 0) actor.submit(perReplica[i]!);
    });
    if (toTrain !== null) {
      const ids = Int32Array.from(toTrain);
      const tokens = ctx.consume(ids, trainerVersion);
      sim.after(ctx.trainMs(ids), {
        fire: () => {
          trainerVersion++;
          ctx.stepEnded(tokens, ids.length);
          trainingDone = true;
          barrier();
        },
      });
    }
  }

  function finished(id: number): void {
    ctx.completed(id, trainerVersion);
    if (--outstanding > 0) return;
    generationDone = true;
    barrier();
  }

  function barrier(): void {
    if (!generationDone || !trainingDone || ctx.stepsDone >= ctx.steps) return;
    toTrain = generating;
    sim.after(syncMs, {
      fire: () => {
        rolloutVersion = trainerVersion;
        iteration();
      },
    });
  }

  iteration();
}
