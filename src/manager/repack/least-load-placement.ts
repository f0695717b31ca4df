/**
 * The step-centric baseline that Heddle's placement is compared with (its §7 "least-load"): each
 * trajectory, longest predicted first, goes to the worker whose predicted load (the sum of its
 * trajectories' predicted remaining tokens) is least, ties to the fewer trajectories and then the
 * earlier worker. Scored with the same objective as the DP (dp-placement.ts).
 */
import { placementMakespan, presort, validatePlacementInput, type InterferenceFactor, type Placement, type PredictedTrajectory } from './dp-placement.js';

export function planLeastLoadPlacement(trajectories: readonly PredictedTrajectory[], workers: readonly string[], interference: InterferenceFactor): Placement {
  validatePlacementInput(trajectories, workers);
  const load = new Float64Array(workers.length);
  const lengths: number[][] = workers.map(() => []);
  const ids: string[][] = workers.map(() => []);
  for (const t of presort(trajectories)) {
    let best = 0;
    for (let w = 1; w < workers.length; w++) {
      if (load[w]! < load[best]! || (load[w] === load[best] && lengths[w]!.length < lengths[best]!.length)) best = w;
    }
    load[best] = load[best]! + t.predictedTokens;
    lengths[best]!.push(t.predictedTokens);
    ids[best]!.push(t.id);
  }
  return { assignments: workers.map((worker, w) => ({ worker, trajectories: ids[w]! })), makespan: placementMakespan(lengths, interference) };
}
