/**
 * The soak's fault schedule: which faults arrive when, drawn from a seed so that a run that found
 * something can be run again with the same faults. Arrivals are a Poisson process (exponential
 * gaps around `meanGapMs`); each fault lasts a drawn `holdMs` (a process stays dead until it is
 * restarted, a link stays stalled, a process stays stopped), so faults overlap whenever one
 * arrives before the last one ended. The target (which relay, which rollout) is drawn when the
 * fault is applied, from `pick`: only then is it known which relay is the master or which
 * manager leads.
 */
import { seededRandom } from '../common/random.js';

export const FAULT_KINDS = [
  'kill-relay',
  'kill-master-relay',
  'kill-rollout',
  'kill-manager',
  'kill-trainer',
  'restart-nats',
  'kill-nats-node',
  'partition-nats-node',
  'restart-redis',
  'stall-link',
  'pause-process',
  'fill-shm',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** How often each kind is drawn, relative to the others, and how long it lasts (ms, uniform in the range). */
const KIND_SHAPES: Record<FaultKind, { weight: number; holdMs: [number, number] }> = {
  'kill-relay': { weight: 3, holdMs: [1000, 10_000] },
  'kill-master-relay': { weight: 1, holdMs: [1000, 10_000] },
  'kill-rollout': { weight: 3, holdMs: [1000, 10_000] },
  'kill-manager': { weight: 1.5, holdMs: [1000, 8000] },
  'kill-trainer': { weight: 1, holdMs: [1000, 8000] },
  'restart-nats': { weight: 1, holdMs: [500, 5000] },
  // On a NATS cluster only (--nats-cluster 3): one node SIGKILLed, or cut off with SIGSTOP.
  'kill-nats-node': { weight: 1.5, holdMs: [1000, 10_000] },
  'partition-nats-node': { weight: 1.5, holdMs: [2000, 15_000] },
  'restart-redis': { weight: 1, holdMs: [500, 5000] },
  'stall-link': { weight: 2, holdMs: [3000, 20_000] },
  'pause-process': { weight: 2, holdMs: [2000, 15_000] },
  'fill-shm': { weight: 1, holdMs: [10_000, 40_000] },
};

export interface Fault {
  /** Sequence number in the schedule (1-based). */
  seq: number;
  kind: FaultKind;
  /** When it starts, from the start of the run. */
  atMs: number;
  holdMs: number;
  /** In [0, 1): chooses the target among those available when the fault is applied. */
  pick: number;
}

export interface ScheduleOptions {
  seed: number;
  durationMs: number;
  meanGapMs: number;
  /** Kinds that cannot be applied on this run (no testbed: no stalled links; one nats-server: no node faults). */
  exclude?: readonly FaultKind[];
  /** No fault starts in the first `quietStartMs` (the job comes up first). */
  quietStartMs?: number;
}

export function faultSchedule(options: ScheduleOptions): Fault[] {
  if (!(options.meanGapMs > 0)) throw new RangeError('meanGapMs must be > 0');
  const random = seededRandom(options.seed);
  const kinds = FAULT_KINDS.filter((k) => !options.exclude?.includes(k));
  if (kinds.length === 0) throw new RangeError('every fault kind is excluded');
  const total = kinds.reduce((sum, k) => sum + KIND_SHAPES[k].weight, 0);
  const faults: Fault[] = [];
  let at = options.quietStartMs ?? 0;
  for (;;) {
    // 1 - random() is in (0, 1]: the log is finite.
    at += -Math.log(1 - random()) * options.meanGapMs;
    if (at >= options.durationMs) return faults;
    let draw = random() * total;
    let kind = kinds[kinds.length - 1]!;
    for (const k of kinds) {
      draw -= KIND_SHAPES[k].weight;
      if (draw < 0) {
        kind = k;
        break;
      }
    }
    const [lo, hi] = KIND_SHAPES[kind].holdMs;
    faults.push({ seq: faults.length + 1, kind, atMs: Math.round(at), holdMs: Math.round(lo + random() * (hi - lo)), pick: random() });
  }
}

/** How many faults of a schedule are under way at the same time as another one (they overlap). */
export function overlapping(faults: readonly Fault[]): number {
  return overlapCount(faults.map((f) => ({ startMs: f.atMs, endMs: f.atMs + f.holdMs })));
}

/** How many of these intervals overlap another one; an open end (null) lasts for ever. */
export function overlapCount(intervals: readonly { startMs: number; endMs: number | null }[]): number {
  let count = 0;
  for (const f of intervals) {
    const end = f.endMs ?? Infinity;
    if (intervals.some((g) => g !== f && g.startMs < end && f.startMs < (g.endMs ?? Infinity))) count++;
  }
  return count;
}
