/**
 * What a rollout owns in the partial pool against what it generates. Every ownership write
 * (start, restart, take-over) goes through here, so that the rollout knows which trajectories
 * may be its own without reading the whole pool; take-overs (repack-in, reinitialise, stranded
 * work) resume what is of the rollout's weight version and return the rest to the prompt pool;
 * and the periodic reconciliation picks up what is owned here but generated nowhere (a repack
 * that failed halfway), once it has been seen so twice in a row.
 */
import type { Logger } from 'pino';
import { mapLimit } from '../common/concurrency.js';
import {
  PARKED_OWNER,
  parkedReturnKey,
  type PartialPool,
  type PartialState,
  type PartialSummary,
  type PartialTrajectory,
  type PromptPool,
} from '../data/index.js';
import type { RolloutMetrics } from './metrics.js';
import type { GenerationTask } from './task.js';
import { ErrorCodes } from '../common/error-codes.js';

const TAKEOVER_CONCURRENCY = 16;

export interface ResumeOutcome {
  taken: number;
  completed: number;
  lost: number;
  returned: number;
  /** Being completed by their owner (record maybe still on its way): left alone, asked again after the grace left. */
  completing: Array<{ trajectory: string; retryAfterMs: number }>;
}

export interface OwnershipOptions {
  rolloutId: string;
  partials: PartialPool;
  prompts: PromptPool;
  metrics: RolloutMetrics;
  log: Logger;
  /** The tasks this process generates, by trajectory id. */
  tasks: ReadonlyMap<string, GenerationTask>;
  /** The weight version in use: only trajectories started with it are resumed. */
  weightVersion: () => number | null;
  /** Makes a taken-over trajectory one of this rollout's tasks. */
  adopt: (partial: PartialTrajectory, state: PartialState) => GenerationTask;
  /** Hands resumed tasks to the engine. */
  resume: (tasks: GenerationTask[]) => Promise<void>;
}

export class Ownership {
  /** Trajectories owned here but not generated at the last reconciliation. */
  private strays = new Set<string>();
  /**
   * Every trajectory this process has made (or tried to make) its own and not seen leave: what a
   * reconciliation checks, one direct read each, instead of reading the whole partial pool (at a
   * thousand rollouts with 50 trajectories each, every rollout reading the pool every 15 s would
   * cost nats-server some twenty cores). Only the first reconciliation reads the pool, for what
   * an earlier process under this id left behind.
   */
  private readonly mayOwn = new Set<string>();
  /** Of those, the ones with an ownership write in flight (not judged until it is answered). */
  private readonly ownershipWrites = new Set<string>();
  private reconciledOnce = false;
  private resumingWork: Promise<ResumeOutcome> | null = null;

  constructor(private readonly options: OwnershipOptions) {}

  /** The take-over and resume under way, if any. */
  get resuming(): Promise<ResumeOutcome> | null {
    return this.resumingWork;
  }

  /**
   * A task left this rollout. Completed (purged) or taken by another rollout: gone. Handed over:
   * ours until the destination's take-over shows in the pool, which the next reconciliation checks.
   */
  taskLeft(trajectoryId: string, handedOver: boolean): void {
    if (handedOver) this.mayOwn.add(trajectoryId);
    else this.mayOwn.delete(trajectoryId);
  }

  /** Another rollout owns it: nothing to watch. */
  notOurs(trajectoryId: string): void {
    this.mayOwn.delete(trajectoryId);
  }

  /**
   * An ownership write (start, restart, take-over) for `trajectoryId`. The trajectory may be ours
   * from before the write: one whose answer is lost may still have made it ours.
   */
  async write<T>(trajectoryId: string, write: () => Promise<T>): Promise<T> {
    this.mayOwn.add(trajectoryId);
    this.ownershipWrites.add(trajectoryId);
    try {
      return await write();
    } finally {
      this.ownershipWrites.delete(trajectoryId);
    }
  }

  /**
   * Gives a trajectory this rollout generates back to the prompt pool (stale at a turn boundary):
   * its log is parked (one conditional step; the sample's next start restarts it) and its sample
   * returned for regeneration. False when another rollout had taken it meanwhile.
   */
  async returnToPool(partial: PartialTrajectory, start: { groupId: string; sampleIndex: number }, reason: string): Promise<boolean> {
    const { partials, prompts, rolloutId } = this.options;
    const trajectoryId = partial.trajectoryId;
    partial.release();
    let parked;
    try {
      parked = await this.write(trajectoryId, () => partials.takeOver(trajectoryId, PARKED_OWNER, { from: rolloutId }));
    } catch (err) {
      if ((err as { code?: string }).code === ErrorCodes.NOT_OWNER) return false;
      throw err;
    }
    if (parked.status !== 'taken') return false;
    parked.trajectory.release();
    // Keyed by the parking, as the manager's scan returns parked logs: queued once, whoever returns it.
    await prompts.returnSamples({ groupId: start.groupId, samples: [start.sampleIndex], reason, key: parkedReturnKey(trajectoryId, parked.state.lastSeq) });
    return true;
  }

  /** Resumes (or returns) trajectories the partial pool says are ours but nobody generates. */
  async reconcile(): Promise<void> {
    const { partials, rolloutId, tasks } = this.options;
    let owned: PartialSummary[];
    try {
      owned = this.reconciledOnce ? await this.ownedNotGenerated() : await partials.list(rolloutId);
    } catch {
      return;
    }
    if (!this.reconciledOnce) for (const s of owned) this.mayOwn.add(s.trajectoryId);
    this.reconciledOnce = true;
    // A log ending in 'completing' counts too: a completion of this process is one of its tasks
    // until the log is purged, so one that is not is a completion an earlier process under this
    // id was killed in. Its take-over finishes it (record written: purge), or, once its write can
    // no longer land, parks it and returns its sample; left, it would outlive the completion mark
    // and be generated a second time.
    const stray = new Set(owned.filter((s) => !tasks.has(s.trajectoryId)).map((s) => s.trajectoryId));
    // Seen stray twice in a row: not a trajectory between its start and its task, nor a hand-over in progress.
    const confirmed = [...stray].filter((id) => this.strays.has(id));
    this.strays = new Set([...stray].filter((id) => !this.strays.has(id)));
    if (confirmed.length === 0) return;
    const { taken, returned, completing } = await this.takeOverAndResume(confirmed, rolloutId, 'stranded');
    this.options.metrics.tasks.inc({ outcome: 'reconciled' }, taken);
    this.options.metrics.tasks.inc({ outcome: 'returned' }, returned);
    this.options.log.warn({ resumed: taken, returned, completing: completing.length }, 'stranded trajectories of this rollout picked up');
  }

  /** Of the trajectories this process may own and does not generate, those the pool says it owns. */
  private async ownedNotGenerated(): Promise<PartialSummary[]> {
    const { partials, rolloutId, tasks } = this.options;
    const candidates = [...this.mayOwn].filter((id) => !tasks.has(id) && !this.ownershipWrites.has(id));
    const summaries = await mapLimit(candidates, TAKEOVER_CONCURRENCY, (id) => partials.summary(id));
    const owned: PartialSummary[] = [];
    candidates.forEach((id, i) => {
      const s = summaries[i];
      if (s?.owner === rolloutId) owned.push(s);
      // Purged, or someone else's (a hand-over that landed): nothing to watch any more.
      else this.mayOwn.delete(id);
    });
    return owned;
  }

  /**
   * Takes trajectories over from `from` (another rollout, or this one after a hiccup) and resumes
   * those of this rollout's weight version. One that is started with other weights is never
   * resumed: it is parked and its sample goes back to the prompt pool (`reason`). One that cannot
   * be taken (another owner, completed meanwhile, a read that raced its purge, a store error)
   * never stops the others; if it is still someone's, their reconciliation or the manager's scan
   * finds it. One being completed (its 'completing' marker younger than the pool's grace) is left
   * to its completer, counted `completing`: a later round finds it completed, or takes it as
   * finished and returns its sample (never resumed: its response is whole).
   */
  takeOverAndResume(ids: readonly string[], from: string, reason: string): Promise<ResumeOutcome> {
    const work = this.takeOverAndResumeNow(ids, from, reason);
    this.resumingWork = work;
    const clear = (): void => {
      if (this.resumingWork === work) this.resumingWork = null;
    };
    work.then(clear, clear);
    return work;
  }

  private async takeOverAndResumeNow(ids: readonly string[], from: string, reason: string): Promise<ResumeOutcome> {
    const { partials, prompts, rolloutId, log } = this.options;
    const resumed: GenerationTask[] = [];
    let completed = 0;
    let lost = 0;
    let returned = 0;
    const completing: ResumeOutcome['completing'] = [];
    // Take-overs are independent round trips (read the log, conditional marker): run several at once.
    await mapLimit(ids, TAKEOVER_CONCURRENCY, async (trajectoryId) => {
      try {
        const result = await this.write(trajectoryId, () => partials.takeOver(trajectoryId, rolloutId, { from }));
        if (result.status === 'completed') {
          this.mayOwn.delete(trajectoryId);
          completed++;
          return;
        }
        if (result.status === 'completing') {
          // Its completer may still write the record: taken now, it would be generated twice.
          // Still in mayOwn when it is ours: the reconciliation after the grace takes it.
          completing.push({ trajectory: trajectoryId, retryAfterMs: Math.max(0, Math.ceil(result.retryAfterMs)) });
          log.info({ trajectory: trajectoryId, from, retryAfterMs: result.retryAfterMs }, 'trajectory being completed: left to its completer for now');
          return;
        }
        const start = result.state.start;
        const mine = this.options.weightVersion();
        if (start.weightVersion === mine && !result.finished) {
          resumed.push(this.options.adopt(result.trajectory, result.state));
          return;
        }
        result.trajectory.release();
        if (result.finished) {
          // Its completer died between the 'completing' marker and the record: the response is
          // whole (resuming would generate past its end) and its reward is not in the log.
          log.warn({ trajectory: trajectoryId, from, reason }, 'completion that never wrote its record: returned to the prompt pool');
        } else {
          log.warn(
            { trajectory: trajectoryId, version: start.weightVersion, mine, reason },
            'trajectory of another weight version: returned to the prompt pool',
          );
        }
        const parked = await partials.takeOver(trajectoryId, PARKED_OWNER, { from: rolloutId });
        if (parked.status === 'taken') {
          this.mayOwn.delete(trajectoryId);
          parked.trajectory.release();
          await prompts.returnSamples({
            groupId: start.groupId,
            samples: [start.sampleIndex],
            reason,
            key: parkedReturnKey(trajectoryId, parked.state.lastSeq),
          });
          returned++;
        }
      } catch (err) {
        const code = (err as { code?: string }).code;
        lost++;
        if (code === ErrorCodes.NOT_OWNER || code === ErrorCodes.UNKNOWN_TRAJECTORY) this.mayOwn.delete(trajectoryId);
        else {
          log.warn({ trajectory: trajectoryId, from, code, err: (err as Error).message }, 'trajectory not taken over');
        }
      }
    });
    if (resumed.length > 0) await this.options.resume(resumed);
    return { taken: resumed.length, completed, lost, returned, completing };
  }
}
