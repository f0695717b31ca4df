/**
 * B, the roofline batch size of the repack planner (paper §5.2, Algorithm 1): the most
 * trajectories an engine decodes in parallel with only a negligible increase in step latency.
 * LLM decoding is memory-bound at small batches (each step reads every weight once, whatever the
 * batch), so a step costs about the same from 1 to B sequences; beyond B it turns compute-bound
 * and each added sequence lengthens the step. The planner uses B twice: a rollout running B or
 * more trajectories is never a repack candidate (line 3), and a destination never receives more
 * than brings it to B (CanFit, line 17), so a repack never slows the trajectories it consolidates.
 *
 * B depends on the model, the GPU, the tensor-parallel size, the weight dtype, the engine and
 * the context length, so it is measured rather than derived: run the engine's static-batch
 * benchmark at a range of batch sizes, and B is the largest batch whose decode step is still
 * within a tolerance (default 10%) of the smallest step time, i.e. where throughput stops growing
 * in proportion to the batch. `rooflineBatchOf` reads that off measured (batch, step time)
 * pairs; `npm run bench -- repack-planner --decode-steps <file>` prints it for a file of them.
 *
 * Too large a B lets repack build batches that decode slower (the paper: "exceeding this limit
 * would unacceptably increase generation latency"); too small a B only makes repack release
 * fewer rollouts. When unsure, err low.
 */
import { InvalidInputError } from '../../common/errors.js';
import { ErrorCodes } from '../../common/error-codes.js';

/** One measurement: the decode step's latency with `batch` sequences running. */
export interface DecodeStep {
  batch: number;
  stepMs: number;
}

export interface RooflineEstimate {
  /** The largest measured batch within the tolerance of the fastest step. */
  batch: number;
  /** False when even the largest measured batch was within it: B is at least `batch` (measure larger batches). */
  reached: boolean;
  /** The fastest step measured (the memory-bound floor). */
  baselineMs: number;
  /** Step time up to which a batch counts as memory-bound: baselineMs * (1 + tolerance). */
  limitMs: number;
}

/** Default tolerance: a step up to 10% slower than the fastest is "a negligible increase". */
export const ROOFLINE_TOLERANCE = 0.1;

/**
 * B from measured decode steps: walking up the batch sizes, the last one before the first whose
 * step exceeds the fastest step by more than `tolerance`. The fastest step (not the first) is
 * the baseline, so one noisy small batch does not shift it; a noisy step beyond the knee does
 * not extend B, as the walk stops at the first crossing.
 */
export function rooflineBatchOf(steps: readonly DecodeStep[], tolerance = ROOFLINE_TOLERANCE): RooflineEstimate {
  if (!(tolerance > 0) || !Number.isFinite(tolerance)) throw bad(`tolerance must be a number > 0, got ${String(tolerance)}`);
  if (steps.length < 2) throw bad(`at least two measurements are needed, got ${steps.length}`);
  const seen = new Set<number>();
  for (const s of steps) {
    if (!Number.isSafeInteger(s.batch) || s.batch <= 0) throw bad(`batch sizes must be positive integers, got ${String(s.batch)}`);
    if (!(s.stepMs > 0) || !Number.isFinite(s.stepMs)) throw bad(`step times must be numbers > 0, got ${String(s.stepMs)} at batch ${s.batch}`);
    if (seen.has(s.batch)) throw bad(`batch ${s.batch} is measured twice`);
    seen.add(s.batch);
  }
  const sorted = [...steps].sort((a, b) => a.batch - b.batch);
  const baselineMs = Math.min(...sorted.map((s) => s.stepMs));
  const limitMs = baselineMs * (1 + tolerance);
  let batch: number | null = null;
  for (const s of sorted) {
    if (s.stepMs <= limitMs) batch = s.batch;
    // Slow steps before the first fast one are noise at the small end, not the knee.
    else if (batch !== null) return { batch, reached: true, baselineMs, limitMs };
  }
  return { batch: batch!, reached: false, baselineMs, limitMs };
}

/**
 * Measurements as text: one `batch step_ms` pair per line, separated by spaces, tabs or a comma;
 * blank lines, `#` comments and a header line (anything not starting with a digit) are skipped.
 */
export function parseDecodeSteps(text: string): DecodeStep[] {
  const steps: DecodeStep[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/#.*/, '').trim();
    if (line.length === 0 || !/^\d/.test(line)) return;
    const fields = line.split(/[\s,]+/);
    const batch = Number(fields[0]);
    const stepMs = Number(fields[1]);
    if (fields.length < 2 || !Number.isFinite(batch) || !Number.isFinite(stepMs))
      throw bad(`line ${i + 1}: expected "batch step_ms", got ${JSON.stringify(raw)}`);
    steps.push({ batch, stepMs });
  });
  return steps;
}

function bad(message: string): InvalidInputError {
  return new InvalidInputError(ErrorCodes.REPACK_LIMITS, `roofline batch: ${message}`);
}
