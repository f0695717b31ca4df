/**
 * The splits `laminar plan` considers: whole machines for the trainer, the rest for rollouts, at
 * most `splits` trainer sizes spread evenly from one machine to all but one (both ends included),
 * and the bound that lets it leave some of them unsimulated.
 *
 * The bound: laminar's trainer trains one batch after another, each taking at least the time
 * model's compute time for its tokens (src/simulate/trainer/time-model.ts; the data-plane
 * overhead and the push to the master only add to it). So no split trains faster than its
 * trainer's ceiling, trainer GPUs × peak × MFU / (FLOPs per token), whatever its rollouts do.
 * A split whose ceiling is below the best throughput already simulated cannot be the best; the
 * plan simulates the splits from the most trainer GPUs down (the cheapest runs: the fewest
 * rollouts) and stops once the ceilings fall below it, which skips the trainer-bound splits with
 * many rollouts, the slowest to simulate.
 */
import type { Scenario } from '../scenario/schema.js';
import { trainStepMs } from '../trainer/time-model.js';

/** Trainer machine counts to simulate, most first: at most `splits`, spread over 1 … machines − 1. */
export function trainerMachineGrid(machines: number, splits: number): number[] {
  if (!(Number.isSafeInteger(machines) && machines >= 2)) throw new RangeError(`a split needs at least 2 machines, got ${machines}`);
  if (!(Number.isSafeInteger(splits) && splits >= 1)) throw new RangeError(`splits must be a positive integer, got ${splits}`);
  const most = machines - 1;
  if (splits >= most) return Array.from({ length: most }, (_, i) => most - i);
  if (splits === 1) return [Math.round(machines / 2)];
  const counts = new Set<number>();
  for (let i = 0; i < splits; i++) counts.add(Math.round(most - (i * (most - 1)) / (splits - 1)));
  return [...counts];
}

/** The most tokens per second a trainer of `trainGpus` GPUs can train, from the time model alone. */
export function trainerCeiling(s: Pick<Scenario, 'hardware' | 'model' | 'trainer'>, trainGpus: number): number {
  const tokens = 1e6;
  return tokens / (trainStepMs(s, tokens, trainGpus) / 1e3);
}
