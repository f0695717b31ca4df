/**
 * `npm run bench -- repack-planner [--rollouts 1024] [--iterations 200]`
 * `npm run bench -- repack-planner --decode-steps <file|sim> [--tolerance 0.1]`
 *
 * One round of the repack planner (src/manager/repack/planner.ts, paper Algorithm 1) over a
 * seeded fleet in which most rollouts are ramping down, so nearly all of them are candidates:
 * the O(|S|^2) worst case of a round, at the scale of the paper's largest cluster (1,024 GPUs).
 * The paper's periodic check runs every 5 s and its whole repack costs 0.69 s (§8.4); the plan
 * itself should be a few milliseconds at most. Prints a table, then one JSON line (the last line
 * of stdout).
 *
 * With --decode-steps it measures nothing: it reads an engine's decode step times by batch size
 * (`batch step_ms` per line, see src/manager/repack/roofline.ts for how to measure them) and
 * prints B, the planner's roofline batch, to pass as `laminar manager --roofline-batch`. `sim`
 * reads the simulated engine's default profile instead (its B is 64 by construction).
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { DEFAULT_REPACK_LIMITS, planRepack, repackCandidates, type RolloutLoad } from '../src/manager/repack/planner.js';
import { ROOFLINE_TOLERANCE, parseDecodeSteps, rooflineBatchOf, type DecodeStep } from '../src/manager/repack/roofline.js';
import { DEFAULT_ENGINE_PROFILE, decodeStepMs } from '../src/stand-ins/engine-core.js';
import { median, percentile, printTable, round } from './support.js';
import { seededRandom } from '../src/common/random.js';

const WARMUP = 50;

/** A fixed fleet per seed, so runs compare. */
const prng = seededRandom;

/** 85% in ramp-down (usage below the last sample and below C_max), the rest ramping up or full. */
export function seededFleet(count: number, seed = 1): RolloutLoad[] {
  const random = prng(seed);
  const b = DEFAULT_REPACK_LIMITS.rooflineBatch;
  const fleet: RolloutLoad[] = [];
  for (let i = 0; i < count; i++) {
    const id = `rollout-${String(i).padStart(4, '0')}`;
    const phase = random();
    if (phase < 0.85) {
      const kvUsed = 0.02 + random() * 0.68;
      // A long tail holds few requests, each with a long context: requests track usage loosely.
      const running = 1 + Math.floor(random() * kvUsed * b * 0.5);
      fleet.push({ id, kvUsed, kvPrev: Math.min(1, kvUsed + 0.01 + random() * 0.2), running });
    } else if (phase < 0.95) {
      const kvUsed = 0.1 + random() * 0.8;
      fleet.push({ id, kvUsed, kvPrev: kvUsed - 0.05 * random(), running: Math.floor(random() * b) });
    } else {
      fleet.push({ id, kvUsed: 0.99 + random() * 0.01, kvPrev: 1, running: b + Math.floor(random() * b) });
    }
  }
  return fleet;
}

export async function timePlanner(rollouts = 1024, iterations = 200): Promise<{ medianMs: number; p99Ms: number; moves: number }> {
  const fleet = seededFleet(rollouts);
  let moves = 0;
  for (let i = 0; i < WARMUP; i++) moves = planRepack(fleet, DEFAULT_REPACK_LIMITS).length;
  const ms: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t0 = process.hrtime.bigint();
    moves = planRepack(fleet, DEFAULT_REPACK_LIMITS).length;
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    // Lets timers and I/O of a host process run between rounds, as the manager's periodic check would.
    if (i % 16 === 15) await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return { medianMs: median(ms), p99Ms: percentile(ms, 0.99), moves };
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      rollouts: { type: 'string', default: '1024' },
      iterations: { type: 'string', default: '200' },
      'decode-steps': { type: 'string' },
      tolerance: { type: 'string', default: String(ROOFLINE_TOLERANCE) },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write('usage: npm run bench -- repack-planner [--rollouts 1024] [--iterations 200]\n');
    process.stdout.write('       npm run bench -- repack-planner --decode-steps <file|sim> [--tolerance 0.1]   (B from measured decode steps)\n');
    return;
  }
  if (values['decode-steps'] !== undefined) {
    printRooflineBatch(values['decode-steps'], Number(values.tolerance));
    return;
  }
  const rollouts = Number(values.rollouts);
  const iterations = Number(values.iterations);
  if (!Number.isSafeInteger(rollouts) || rollouts <= 0 || !Number.isSafeInteger(iterations) || iterations <= 0) {
    throw new Error('--rollouts and --iterations need positive integers');
  }
  const candidates = repackCandidates(seededFleet(rollouts), DEFAULT_REPACK_LIMITS).length;
  const { medianMs, p99Ms, moves } = await timePlanner(rollouts, iterations);
  const result = { bench: 'repack-planner', rollouts, candidates, moves, iterations, median_ms: round(medianMs), p99_ms: round(p99Ms) };
  printTable(`repack planner: ${rollouts} rollouts (${candidates} candidates), ${iterations} rounds`, [
    ['plan one round, median', `${result.median_ms} ms`, 'goal < 5 ms'],
    ['plan one round, p99', `${result.p99_ms} ms`, ''],
    ['moves planned', String(moves), `${rollouts - moves} rollouts left busy`],
  ]);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/** B from decode step times by batch size (a file of `batch step_ms` lines, or the simulated engine's profile). */
function printRooflineBatch(source: string, tolerance: number): void {
  const steps: DecodeStep[] =
    source === 'sim'
      ? [1, 8, 16, 32, 48, 64, 96, 128, 256].map((batch) => ({ batch, stepMs: decodeStepMs(DEFAULT_ENGINE_PROFILE, batch) }))
      : parseDecodeSteps(readFileSync(source, 'utf8'));
  const b = rooflineBatchOf(steps, tolerance);
  const rows = [...steps]
    .sort((x, y) => x.batch - y.batch)
    .map((s) => [
      `batch ${s.batch}`,
      `${round(s.stepMs)} ms/step`,
      `${round(s.stepMs / b.baselineMs, 2)}x fastest, ${Math.round((s.batch * 1000) / s.stepMs)} tokens/s${s.batch === b.batch ? '  <- B' : ''}`,
    ]);
  printTable(`decode steps from ${source}: B = ${b.batch}${b.reached ? '' : ' or more (no measured batch exceeded the limit: measure larger ones)'}`, [
    ...rows,
    ['limit', `${round(b.limitMs)} ms/step`, `fastest step + ${Math.round(tolerance * 100)}%`],
  ]);
  process.stdout.write(`pass it as: laminar manager --roofline-batch ${b.batch}   (or <default>,<model>=${b.batch} for one model)\n`);
  process.stdout.write(
    `${JSON.stringify({ bench: 'repack-planner', roofline_batch: b.batch, reached: b.reached, baseline_ms: round(b.baselineMs), limit_ms: round(b.limitMs), tolerance })}\n`,
  );
}
