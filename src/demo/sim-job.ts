/**
 * The simulated job of `npm run demo` (the default `--engine sim`): its settings from the flags,
 * the manager's timings, and the processes it runs, shared by its steps:
 *   sim-services.ts  the prompts, the manager and the relays
 *   sim-daemons.ts   the simulated trainer and rollouts
 *   sim-progress.ts  the run: live progress, the kills and the relay's restart
 *   sim-summary.ts   the end: stop the producers, read the books, print the summary and ledger
 */
import type { StalenessJson } from '../stand-ins/trainer/index.js';
import type { Daemon } from '../services/daemon-process.js';
import { parseDurationOption } from '../common/units.js';
import { defaultCompletingGraceMs } from '../data/partial/partial-pool.js';
import { intIn } from './books.js';
import type { DemoOptions } from './options.js';

export const MODEL = 'demo/policy';
/** The manager's failure detector and orphan wait in the demo (short, so failover shows). */
export const DEAD_AFTER_MS = 3000;
export const ORPHAN_WAIT_MS = 10_000;
/**
 * The partial pool's default completion grace (partial-pool.ts): a trajectory the killed rollout
 * was completing (its 'completing' marker written, its record not) is left to its completer that
 * long before it is taken over, found whole and its sample returned.
 */
const COMPLETING_GRACE_MS = defaultCompletingGraceMs();
/**
 * How long past the kill of a rollout the run may go on for its failover to finish: death
 * detected, its trajectories resumed elsewhere or, with no rollout of their version, returned
 * after the orphan wait; one it was completing, after the completion grace.
 */
export const FAILOVER_SETTLE_MS = DEAD_AFTER_MS + Math.max(ORPHAN_WAIT_MS, COMPLETING_GRACE_MS) + 10_000;

/** The flags of the simulated job, checked. */
export interface SimJobSettings {
  opts: DemoOptions;
  /** The run's length; with `steps`, only its bound. */
  durationMs: number;
  /** `--steps`: the run ends when the trainer has taken this many (null: after --duration). */
  steps: number | null;
  restartRelayMs: number;
  rolloutCount: number;
  relayCount: number;
  n: number;
  maxStaleness: number;
  timeScale: number;
  /** A simulated duration as the wall-clock flag value the daemons take. */
  scaled: (simMs: number) => string;
}

/** The bound on a run of `--steps` when --duration is not given (the learning jobs' too). */
export const STEPS_RUN_BOUND_MS = 15 * 60_000;

/** `durationGiven`: --duration was on the command line (with --steps it is then the bound). */
export function simJobSettings(opts: DemoOptions, durationGiven: boolean): SimJobSettings {
  const steps = opts.steps === undefined ? null : intIn('steps', opts.steps, 1, 100_000);
  const durationMs = steps !== null && !durationGiven ? STEPS_RUN_BOUND_MS : parseDurationOption('--duration', opts.duration);
  const restartRelayMs = parseDurationOption('--restart-relay-after', opts.restartRelayAfter);
  const rolloutCount = intIn('rollouts', opts.rollouts, 1, 64);
  const relayCount = intIn('relays', opts.relays, 1, 16);
  const n = intIn('n', opts.n, 1, 64);
  const maxStaleness = intIn('max-staleness', opts.maxStaleness, -1, 1_000);
  const timeScale = Number(opts.timeScale);
  if (!(timeScale > 0)) throw new Error('--time-scale must be > 0');
  return {
    opts,
    durationMs,
    steps,
    restartRelayMs,
    rolloutCount,
    relayCount,
    n,
    maxStaleness,
    timeScale,
    scaled: (simMs) => `${Math.max(20, Math.round(simMs / timeScale))}ms`,
  };
}

/** Starts a daemon whose logs stay off the screen (kept for --logs); `last`: stopped after the others. */
export type SpawnQuiet = (name: string, argv: string[], ready: string, onStdout?: (line: string) => void, last?: boolean) => Promise<Daemon>;

export interface DemoRelay {
  id: string;
  daemon: Daemon;
  argv: string[];
  socket: string;
  metricsPort: number;
}

export interface DemoRollout {
  id: string;
  daemon: Daemon;
  metricsPort: number;
  relay: number;
  killed: boolean;
}

/** What the simulated trainer's step lines said so far. */
export interface TrainerProgress {
  version: number;
  steps: number;
  staleness: StalenessJson[];
  inherent: StalenessJson[];
  trajectories: number;
  stallMs: number[];
}

/** Seconds since the run began, for the events' times. */
export interface RunClock {
  readonly started: number;
  readonly at: () => string;
}

export function startClock(): RunClock {
  const started = performance.now();
  return { started, at: () => `${((performance.now() - started) / 1e3).toFixed(1)}s` };
}
