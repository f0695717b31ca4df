/**
 * Closed forms for a run of growth-only decode steps: steps in which no request is admitted,
 * preempted or finished, so each of the `running` requests gains one token and nothing else
 * changes. With `kvStart` tokens resident at the first, step j decodes with kvStart + j·running,
 * and by src/stand-ins/engine-core.ts's stepMs (no prefill) it takes
 *   decodeStepMs(running) + kvReadMs(kvStart + j·running),
 * so a run's duration and its KV-time integral are sums of an arithmetic series. These must stay
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

/** Milliseconds the first `steps` steps of the run take. */
export function growthRunMs(profile: EngineProfile, running: number, kvStart: number, steps: number): number {
  if (steps <= 0) return 0;
  return steps * decodeStepMs(profile, running) + kvReadMs(profile, kvSum(running, kvStart, steps));
}

/** Σ kv × ms over the first `steps` steps (token-milliseconds, for time-weighted KV utilisation). */
export function growthRunKvMs(profile: EngineProfile, running: number, kvStart: number, steps: number): number {
  if (steps <= 0) return 0;
  return decodeStepMs(profile, running) * kvSum(running, kvStart, steps) + kvReadMs(profile, kvSquareSum(running, kvStart, steps));
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
  // Solve a·x² + b·x = elapsed for the step starting at elapsed, then correct the rounding.
  const rate = kvReadMs(profile, 1);
  const a = (rate * running) / 2;
  const b = decodeStepMs(profile, running) + rate * (kvStart - running / 2);
  const x = a > 0 ? (-b + Math.sqrt(b * b + 4 * a * elapsed)) / (2 * a) : elapsed / b;
  let count = Math.min(maxSteps, Math.max(0, Math.floor(x) + 1));
  while (count < maxSteps && startedBy(count)) count++;
  while (count > 0 && !startedBy(count - 1)) count--;
  return count;
}
