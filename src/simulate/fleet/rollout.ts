/**
 * One simulated rollout replica: its engine (an EngineActor), the weight version it generates
 * with (-1: none yet, a replacement waiting for its relay), the machine (and so the relay) it
 * pulls versions from, how many trajectories it owns, whether it is loading weights or taking
 * part in a repack move, and whether a failure took it. The systems' drivers decide
 * what it does; this holds the state they share.
 */
import type { EngineActor } from '../engine/engine-actor.js';

export type RolloutPhase = 'generating' | 'loading';

export class Rollout {
  /** The planner's id: zero-padded, so its code-unit order (the planner's tie-break) is the index order. */
  readonly id: string;
  actor!: EngineActor;
  version = 0;
  phase: RolloutPhase = 'generating';
  /** Trajectories claimed or moved in and not yet finished or moved out. */
  owned = 0;
  /** Source or destination of a repack move in flight (the coordinator's `busy`). */
  inMove = false;
  /** Its machine failed: it does nothing more (its engine's counters stay in the run's totals). */
  dead = false;
  /** Its engine crashed and is being reinitialised: neither claiming nor a destination. */
  reinitialising = false;
  /** Bumped by a failure: a weight load started before it lands on nothing. */
  life = 0;

  constructor(
    readonly index: number,
    readonly machine: number,
  ) {
    this.id = `r${String(index).padStart(5, '0')}`;
  }
}
