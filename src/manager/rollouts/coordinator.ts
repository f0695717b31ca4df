/**
 * The rollout side of the manager (paper §3.3, §5): two jobs on the same rollouts, each in its
 * own file, ticked here in order and reported together in the status.
 *   repack-rounds.ts    repacking long-tail trajectories within each weight-version group
 *   orphan-failover.ts  reinitialising suspected rollouts, resuming dead ones' trajectories
 * Both send their commands through one RolloutCommands (rollout-commands.ts), which knows which
 * rollouts are busy in a move or a take-over and which did not answer: neither job picks a
 * rollout the other is using. Trajectories a failed repack move strands go to failover.
 */
import { OrphanFailover, type OrphanCounts, type OrphanFailoverOptions } from './orphan-failover.js';
import { RepackRounds, type RepackRoundsOptions } from './repack-rounds.js';
import { RolloutCommands, type RolloutCommandsOptions } from './rollout-commands.js';
import type { RolloutView } from './rollout-view.js';

export type { RolloutView } from './rollout-view.js';
export { DEFAULT_ORPHAN_SCAN_MS, ORPHAN_SCAN_RETRY_MS, type OrphanCounts } from './orphan-failover.js';

/** Every part's options: the commands' (NATS), repack's and failover's. */
export type RolloutCoordinatorOptions = RolloutCommandsOptions & RepackRoundsOptions & OrphanFailoverOptions;

export interface CoordinatorStatus {
  busy: string[];
  orphansWaiting: number;
  /** Repack moves carried out, and failed, since this process started (cumulative). */
  moves: { done: number; failed: number };
  /** Orphaned trajectories handled since this process started, by outcome (cumulative, as `laminar_manager_orphans_total`). */
  orphans: OrphanCounts;
}

export class RolloutCoordinator {
  private readonly commands: RolloutCommands;
  private readonly repack: RepackRounds;
  private readonly failover: OrphanFailover;

  constructor(options: RolloutCoordinatorOptions) {
    this.commands = new RolloutCommands(options);
    this.failover = new OrphanFailover(options, this.commands);
    this.repack = new RepackRounds(options, this.commands, (trajectories, from, version) => this.failover.strand(trajectories, from, version));
  }

  /** Called when this manager becomes leader: a fresh start of every timer. */
  reset(now = Date.now()): void {
    this.repack.reset(now);
    this.failover.reset(now);
    this.commands.forgetUnreachable();
  }

  status(): CoordinatorStatus {
    return {
      busy: this.commands.busyIds(),
      orphansWaiting: this.failover.waiting(),
      moves: this.repack.moves(),
      orphans: this.failover.counts(),
    };
  }

  /** A new weight version exists: repack at the next tick (paper §5.1). */
  newVersion(): void {
    this.repack.newVersion();
  }

  /** A rollout missed heartbeats: ask it to rebuild its engine (same devices). */
  suspected(id: string): void {
    this.failover.suspected(id);
  }

  /** A rollout was declared dead: look for its trajectories now. */
  dead(id: string): void {
    this.commands.forget(id);
    this.failover.dead();
  }

  tick(rollouts: RolloutView[], now = Date.now()): void {
    this.repack.tick(rollouts, now);
    this.failover.tick(rollouts, now);
  }
}
