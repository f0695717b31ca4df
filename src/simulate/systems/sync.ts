/**
 * sync (verl, colocated, Figure 3(a); docs/design/simulator.md): every GPU generates the whole
 * batch with the current weights (replicas of the system's rollout TP, the batch's prompt groups
 * dealt round-robin), then every GPU trains on it after a switch (verl's weight synchronisation:
 * colocated-engine.ts). Iteration = generation (until the batch's slowest trajectory) + switch +
 * training. Its engines have the memory the trainer leaves them (colocated-engine.ts, run.ts).
 * Staleness is 0 by construction: the trainer never runs while the batch generates.
 */
import { colocatedWeightSyncMs } from './colocated-engine.js';
import type { RunContext } from './run-context.js';

export function runSync(ctx: RunContext): void {
  const { sim, scenario, placement, workload } = ctx;
  const replicas = Array.from({ length: placement.rollouts }, () => ctx.addEngine({ finished: (id) => finished(id) }));
  const switchMs = colocatedWeightSyncMs(scenario, placement.tp, scenario.trainer.layout?.fsdp ?? null, placement.trainGpus, ctx.mechanisms);
  let version = 0;
  let outstanding = 0;
  let batch: number[] = [];

  function generate(): void {
    const perReplica: (typeof requests)[] = replicas.map(() => []);
    const requests = ctx.pool.claim(workload.promptsPerStep, version);
    for (let i = 0; i < requests.length; i++) {
      const group = Math.floor(i / workload.groupSize);
      perReplica[group % replicas.length]!.push(requests[i]!);
    }
    outstanding = requests.length;
    batch = requests.map((r) => r.id);
    replicas.forEach((actor, i) => {
      if (perReplica[i]!.length > 0) actor.submit(perReplica[i]!);
    });
  }

  function finished(id: number): void {
    ctx.completed(id, version);
    if (--outstanding > 0) return;
    const ids = Int32Array.from(batch);
    const tokens = ctx.consume(ids, version);
    sim.after(switchMs + ctx.trainMs(ids), {
      fire: () => {
        version++;
        ctx.stepEnded(tokens, batch.length);
        if (ctx.stepsDone < ctx.steps) generate();
      },
    });
  }

  generate();
}
