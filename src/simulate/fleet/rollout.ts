/**
 * One simulated rollout replica: its engine (an EngineActor), the weight version it generates
 * with, the machine (and so the relay) it pulls versions from, how many trajectories it owns,
 * and whether it is loading weights or taking part in a repack move. The systems' drivers decide
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

  constructor(
    readonly index: number,
    readonly machine: number,
  ) {
    this.id = `r${String(index).padStart(5, '0')}`;
  }
}
