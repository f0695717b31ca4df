/**
 * Closed forms for a run of growth-only decode steps: steps in which no request is admitted,
 * preempted or finished, so each of the `running` requests gains one token and nothing else
 * changes. With `kvStart` tokens resident at the first, step j decodes with kvStart + j·running,
 * and by src/stand-ins/engine-core.ts's stepMs (no prefill) it takes
 *   decodeStepMs(running) + kvReadMs(kvStart + j·running),
 * so a run's duration and its KV-time integral are sums of an arithmetic series. An eager engine's
 * floor (the profile's eagerFloorMs) holds the first steps of the run at the floor until the KV
 * read lifts the step above it (the step only grows along the run), so the run splits at that
 * step into a constant part and an arithmetic one. These must stay
 * the sums of stepMs over the run: the property test in test/simulate/leap-engine.test.ts holds
 * LeapEngine's times equal to EngineCore's, step by step, and fails if stepMs changes shape
 * without these.
 */
import { decodeStepMs, kvReadMs, type EngineProfile } from '../../stand-ins/engine-core.js';

/** Sum of the KV resident at each of the first `steps` steps: Σ (kvStart + j·running). */
function kvSum(running: number, kvStart: number, steps: number): number {
  return steps * kvStart + (running * steps * (steps - 1)) / 2;
}

/** Sum of its square: Σ (kvStart + j·running)². */
function kvSquareSum(running: number, kvStart: number, steps: number): number {
  return steps * kvStart * kvStart + kvStart * running * steps * (steps - 1) + (running * running * (steps - 1) * steps * (2 * steps - 1)) / 6;
}

/**
 * How many of the run's first `steps` steps take the eager floor: the steps before the first whose
 * decode and KV read reach it (0 without a floor). Computed, then checked against the very
 * expression stepMs compares, so the split agrees with EngineCore's max() to the last bit.
 */
function floorSteps(profile: EngineProfile, running: number, kvStart: number, steps: number): number {
  const floor = profile.eagerFloorMs ?? 0;
  if (floor <= 0 || steps <= 0) return 0;
  const c = decodeStepMs(profile, running);
  const atFloor = (j: number): boolean => c + kvReadMs(profile, kvStart + j * running) < floor;
  const rate = kvReadMs(profile, 1) * running;
  let j = rate > 0 ? Math.ceil((floor - c - kvReadMs(profile, kvStart)) / rate) : atFloor(0) ? steps : 0;
  j = Math.min(steps, Math.max(0, j));
  while (j < steps && atFloor(j)) j++;
  while (j > 0 && !atFloor(j - 1)) j--;
  return j;
}

/** Milliseconds the first `steps` steps of the run take. */
export function growthRunMs(profile: EngineProfile, running: number, kvStart: number, steps: number): number {
  if (steps <= 0) return 0;
  const f = floorSteps(profile, running, kvStart, steps);
  const rest = steps - f;
  const restMs = rest > 0 ? rest * decodeStepMs(profile, running) + kvReadMs(profile, kvSum(running, kvStart + f * running, rest)) : 0;
  return f > 0 ? f * profile.eagerFloorMs! + restMs : restMs;
}

/** Σ kv × ms over the first `steps` steps (token-milliseconds, for time-weighted KV utilisation). */
export function growthRunKvMs(profile: EngineProfile, running: number, kvStart: number, steps: number): number {
  if (steps <= 0) return 0;
  const f = floorSteps(profile, running, kvStart, steps);
  const rest = steps - f;
  const kv1 = kvStart + f * running;
  const restKvMs = rest > 0 ? decodeStepMs(profile, running) * kvSum(running, kv1, rest) + kvReadMs(profile, kvSquareSum(running, kv1, rest)) : 0;
  return f > 0 ? profile.eagerFloorMs! * kvSum(running, kvStart, f) + restKvMs : restKvMs;
}

/**
 * How many of the run's first `maxSteps` steps have started by time `t` when the run starts at
 * `runStart`: those starting before `t`, or at `t` too when `inclusive`. Step j starts at
 * runStart + growthRunMs(j), computed exactly as the engine computes it when it materialises the
 * run, so the answer agrees with the engine's own boundaries to the last bit.
 */
export function growthStepsStarted(
  profile: EngineProfile,
  running: number,
  kvStart: number,
  maxSteps: number,
  runStart: number,
  t: number,
  inclusive: boolean,
): number {
  const startedBy = (j: number): boolean => {
    const at = runStart + growthRunMs(profile, running, kvStart, j);
    return inclusive ? at <= t : at < t;
  };
  const elapsed = t - runStart;
  if (elapsed < 0 || maxSteps <= 0) return 0;
  // The steps at the eager floor first (constant), then solve a·x² + b·x = elapsed for the step
  // starting at elapsed in the arithmetic part; the loops below correct the rounding.
  const f = floorSteps(profile, running, kvStart, maxSteps);
  const floorMs = f > 0 ? f * profile.eagerFloorMs! : 0;
  let x: number;
  if (elapsed < floorMs) x = elapsed / profile.eagerFloorMs!;
  else {
    const rate = kvReadMs(profile, 1);
    const a = (rate * running) / 2;
    const b = decodeStepMs(profile, running) + rate * (kvStart + f * running - running / 2);
    const e = elapsed - floorMs;
    x = f + (a > 0 ? (-b + Math.sqrt(b * b + 4 * a * e)) / (2 * a) : e / b);
  }
  let count = Math.min(maxSteps, Math.max(0, Math.floor(x) + 1));
  while (count < maxSteps && startedBy(count)) count++;
  while (count > 0 && !startedBy(count - 1)) count--;
  return count;
}
