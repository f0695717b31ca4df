/**
 * Rollout failover (paper §5): a suspected rollout (missed heartbeats) is asked to reinitialise;
 * a dead one's trajectories (whatever the partial pool says it owns) resume on a live rollout of
 * the same weight version; with none, they wait up to `orphanWaitMs`, then are parked (taken over
 * by the manager, which fences the dead owner) and their samples go back to the prompt pool. The
 * same scan finds the orphans of rollouts that died while no manager was running.
 *
 * A return that fails once the log is parked is retried, not given up: the next takeover would
 * get NOT_OWNER (the log is ours already) and the sample would never be generated again. The
 * return carries a key naming the parked log (`<trajectory>@<sequence of the parking marker>`),
 * so a retry of a return that did happen (Redis answered an error, or ERR_NOT_REPLICATED for a
 * write that stands on the master) queues nothing a second time.
 *
 * A pending return lives in this process's memory only. So the scan returns, under that same key,
 * the sample of every parked log it finds that this manager has not settled: a return left pending
 * by a manager that died or lost its lease is completed by the next leader, and one that did happen
 * reads 'duplicate' (rollouts return what they park under the same key). What this manager has
 * settled is remembered by key, for the parked logs the last scan saw, so the backstop scan does
 * not return them again; a parked log leaves the pool when a rollout restarts it (the returned
 * sample claimed) and then completes it.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { ErrorCodes } from '../../common/error-codes.js';
import { SCHEMA_VERSION } from '../../control/schema.js';
import { PARKED_OWNER, parkedReturnKey, type PartialPool, type PromptPool } from '../../data/index.js';
import type { EventJournal } from '../dashboard/journal.js';
import { orphanDestination } from './failover-plan.js';
import type { RolloutCoordinatorMetrics } from './metrics.js';
import type { RolloutCommands } from './rollout-commands.js';
import type { RolloutView } from './rollout-view.js';

export const DEFAULT_ORPHAN_SCAN_MS = 60_000;

/**
 * A scan that could not read the partial pool (listing it, or a trajectory's owner) is tried
 * again this soon after it ended: a trajectory it could not check may be an orphan, and waiting
 * for the next backstop scan would leave it unowned for up to `orphanScanMs`. The delay doubles
 * with each scan that fails in a row (a scan reads the whole pool), up to `orphanScanMs`.
 */
export const ORPHAN_SCAN_RETRY_MS = 2000;

/**
 * A parked orphan whose sample could not be returned to the prompt pool is tried again this soon;
 * the delay doubles with each failure of that return, up to `orphanScanMs`. It is never dropped:
 * the partial pool holds the log parked, and nothing else would ever return the sample.
 */
export const ORPHAN_RETURN_RETRY_MS = 1000;

export interface OrphanFailoverOptions {
  /** Who owns what. Needed for failover: without it no scan runs (only the trajectories of failed repack moves are placed). */
  partials: PartialPool | null;
  /** Needed to return samples nobody can resume. */
  prompts: PromptPool | null;
  /** How long orphans wait for a rollout of their weight version. Default 30 s. */
  orphanWaitMs?: number;
  /**
   * The partial pool is scanned for trajectories of owners that are gone when a rollout is
   * declared dead and when this manager becomes leader; besides, once this often, as a backstop.
   * A scan reads the last message of every trajectory in flight (50,000 of them: 0.6 s of the
   * manager's CPU), so it is not a heartbeat. Default 60 s.
   */
  orphanScanMs?: number;
  /** No scan before this much time as leader (members re-register meanwhile). */
  startupGraceMs?: number;
  metrics: RolloutCoordinatorMetrics;
  log: Logger;
  /** The dashboard's event log: each batch of orphans handled is recorded. */
  journal?: EventJournal;
}

/** Orphaned trajectories handled since this process started, by outcome (cumulative, as `laminar_manager_orphans_total`). */
export interface OrphanCounts {
  resumed: number;
  completed: number;
  returned: number;
  lost: number;
}

interface Orphan {
  trajectoryId: string;
  /** The owner in the partial pool, which take-overs are conditional on. */
  from: string;
  version: number;
  since: number;
  /**
   * Owned by a live rollout that no longer generates it (a repack whose destination and source
   * both failed); otherwise the owner is gone, and dropped from here if it comes back.
   */
  stranded: boolean;
  /** Being completed when last asked: not asked again before this (the pool's answer, retryAfterMs). */
  completingUntil?: number;
}

/** A parked orphan whose sample's return to the prompt pool failed: retried with the same key. */
interface PendingReturn {
  orphan: Orphan;
  groupId: string;
  sampleIndex: number;
  /** Names the parked log: the same on every retry, so the pool queues the sample once. */
  key: string;
  failures: number;
  retryAt: number;
  /**
   * Found parked by a scan, not parked by this process: its return may have happened already (by
   * another manager, or the rollout that parked it), so a 'duplicate' is not counted.
   */
  foundParked: boolean;
}

/** The pool's answer to a bad request: a retry would get it again. */
const PERMANENT_RETURN_ERRORS: ReadonlySet<string> = new Set([ErrorCodes.UNKNOWN_GROUP, ErrorCodes.GROUP_MISMATCH, ErrorCodes.BAD_DATA_OPTIONS]);

export class OrphanFailover {
  private readonly orphanWaitMs: number;
  private readonly orphanScanMs: number;
  private readonly startupGraceMs: number;
  private readonly orphans = new Map<string, Orphan>();
  /** Parked orphans whose return failed, by trajectory id. Kept across leadership changes: a retry is idempotent. */
  private readonly pendingReturns = new Map<string, PendingReturn>();
  /**
   * Keys of the parkings whose return this manager settled (returned, or refused by the pool):
   * the scan leaves them be. Pruned at each scan to the parked logs it saw. Kept across leadership
   * changes: a parking's key names it for good.
   */
  private readonly settledParkings = new Set<string>();
  private lastScan = 0;
  private scanning = false;
  /** Scans in a row that could not read the whole pool (their retry delay doubles). */
  private failedScans = 0;
  private placing = false;
  private leaderSince = Date.now();
  private readonly orphanCounts: OrphanCounts = { resumed: 0, completed: 0, returned: 0, lost: 0 };
  private warnedNoPrompts = false;

  constructor(
    private readonly options: OrphanFailoverOptions,
    private readonly commands: RolloutCommands,
  ) {
    this.orphanWaitMs = options.orphanWaitMs ?? 30_000;
    this.orphanScanMs = options.orphanScanMs ?? DEFAULT_ORPHAN_SCAN_MS;
    this.startupGraceMs = options.startupGraceMs ?? 6000;
  }

  /** Called when this manager becomes leader: a fresh start of every timer, no orphans known. */
  reset(now: number): void {
    this.leaderSince = now;
    this.lastScan = 0;
    this.failedScans = 0;
    this.orphans.clear();
    this.options.metrics.orphansWaiting.set(this.pendingReturns.size);
  }

  /** Orphans waiting for a rollout of their version, or parked and waiting for their return to succeed. */
  waiting(): number {
    return this.orphans.size + this.pendingReturns.size;
  }

  counts(): OrphanCounts {
    return { ...this.orphanCounts };
  }

  /** A rollout missed heartbeats: ask it to rebuild its engine (same devices). */
  suspected(id: string): void {
    this.commands.request(id, { v: SCHEMA_VERSION, t: 'reinitialise', reason: 'missed heartbeats' }).then(
      () => this.options.metrics.reinitialise.inc({ result: 'done' }),
      (err: unknown) => this.options.metrics.reinitialise.inc({ result: (err as { code?: string }).code ?? 'failed' }),
    );
  }

  /** A rollout was declared dead: look for its trajectories now. */
  dead(): void {
    this.lastScan = 0;
  }

  /** Trajectories a live rollout owns but no longer generates (a failed repack move): placed as orphans. */
  strand(trajectories: readonly string[], from: string, version: number): void {
    const now = Date.now();
    for (const id of trajectories) this.orphans.set(id, { trajectoryId: id, from, version, since: now, stranded: true });
  }

  /** Scans when one is due, and places the orphans known. */
  tick(rollouts: RolloutView[], now: number): void {
    if (this.options.partials && now - this.leaderSince >= this.startupGraceMs && now - this.lastScan >= this.orphanScanMs && !this.scanning) {
      this.lastScan = now;
      void this.scan(rollouts);
    }
    if (this.orphans.size + this.pendingReturns.size > 0 && !this.placing) void this.placeOrphans(rollouts, now);
  }

  /**
   * Finds trajectories whose owner is no live rollout. A store error is no answer: the
   * trajectory it hid is not taken for "not an orphan"; the failure is counted and logged, and
   * the scan runs again soon (ORPHAN_SCAN_RETRY_MS). A corrupt log is counted and logged too, but
   * reading it again would not help: it waits for the next backstop scan. Never rejects.
   */
  private async scan(rollouts: RolloutView[]): Promise<void> {
    const partials = this.options.partials!;
    this.scanning = true;
    let unread = 0;
    let firstError: unknown = null;
    const failed = (step: 'list' | 'owner', err: unknown): void => {
      if ((err as { code?: string }).code === ErrorCodes.CORRUPT_RECORD) {
        this.options.metrics.orphanScanFailures.inc({ step: 'corrupt' });
        this.options.log.error({ err: (err as Error).message }, 'orphan scan: a partial log is corrupt (its trajectory cannot be failed over)');
        return;
      }
      unread++;
      firstError ??= err;
      this.options.metrics.orphanScanFailures.inc({ step });
    };
    try {
      const live = new Set(rollouts.filter((r) => r.health !== 'dead').map((r) => r.id));
      const now = Date.now();
      // Only keys settled before the listing can be pruned: one settled meanwhile may be a parking it did not see.
      const settledBefore = [...this.settledParkings];
      let summaries: Awaited<ReturnType<PartialPool['list']>> = [];
      let listed = false;
      try {
        summaries = await partials.list();
        listed = true;
      } catch (err) {
        failed('list', err);
      }
      const parkings = new Set<string>();
      for (const s of summaries) {
        if (s.owner === PARKED_OWNER) {
          // Without a prompt pool nothing can be returned (returnToPrompts says so once).
          if (!this.options.prompts) continue;
          const key = parkedReturnKey(s.trajectoryId, s.lastSeq);
          parkings.add(key);
          if (this.settledParkings.has(key) || this.pendingReturns.has(s.trajectoryId)) continue;
          try {
            await this.foundParked(s.trajectoryId, key, now);
          } catch (err) {
            failed('owner', err);
          }
          continue;
        }
        if (live.has(s.owner) || this.orphans.has(s.trajectoryId)) continue;
        let state: Awaited<ReturnType<PartialPool['startOf']>>;
        try {
          state = await partials.startOf(s.trajectoryId);
        } catch (err) {
          failed('owner', err);
          continue;
        }
        if (!state || live.has(state.owner) || state.owner === PARKED_OWNER) continue;
        this.orphans.set(s.trajectoryId, {
          trajectoryId: s.trajectoryId,
          from: state.owner,
          version: state.start.weightVersion,
          since: now,
          stranded: false,
        });
        this.options.log.warn(
          { trajectory: s.trajectoryId, owner: state.owner, version: state.start.weightVersion, tokens: s.tokens },
          'orphaned trajectory (its rollout is gone)',
        );
      }
      // A parking no longer in the pool (restarted, completed) is forgotten: the set stays as large as the pool's parked logs.
      if (listed) for (const key of settledBefore) if (!parkings.has(key)) this.settledParkings.delete(key);
      this.options.metrics.orphansWaiting.set(this.waiting());
    } finally {
      this.scanning = false;
      if (unread === 0) this.failedScans = 0;
      else {
        this.failedScans++;
        const retryMs = Math.min(this.orphanScanMs, ORPHAN_SCAN_RETRY_MS * 2 ** Math.min(this.failedScans - 1, 16));
        // tick() scans once orphanScanMs have passed since lastScan: the next scan comes retryMs from now
        // (or at once, if a rollout died meanwhile and reset it).
        this.lastScan = Math.min(this.lastScan, Date.now() - this.orphanScanMs + retryMs);
        this.options.log.warn(
          { err: (firstError as Error | null)?.message, unread, retryMs },
          'orphan scan could not read the partial pool: scanning again soon',
        );
      }
    }
  }

  /**
   * A parked log this manager has not settled: its sample's return may have been pending in a
   * manager that died. Queued for a return under the parking's key (retryReturns, at the next
   * tick): it reads 'duplicate' if the sample was returned. Throws when the log cannot be read.
   */
  private async foundParked(trajectoryId: string, key: string, now: number): Promise<void> {
    const state = await this.options.partials!.startOf(trajectoryId);
    // Restarted or completed since the listing: no longer parked.
    if (!state || state.owner !== PARKED_OWNER || this.pendingReturns.has(trajectoryId)) return;
    const orphan: Orphan = { trajectoryId, from: PARKED_OWNER, version: state.start.weightVersion, since: now, stranded: false };
    const { groupId, sampleIndex } = state.start;
    this.pendingReturns.set(trajectoryId, { orphan, groupId, sampleIndex, key, failures: 0, retryAt: 0, foundParked: true });
  }

  private async placeOrphans(rollouts: RolloutView[], now: number): Promise<void> {
    this.placing = true;
    try {
      await this.retryReturns(now);
      const live = new Map(rollouts.filter((r) => r.health === 'alive').map((r) => [r.id, r]));
      const batches = new Map<string, Orphan[]>();
      for (const o of this.orphans.values()) {
        if (live.has(o.from) && !o.stranded) {
          // The owner came back (re-admitted): its trajectories are its own again.
          this.orphans.delete(o.trajectoryId);
          continue;
        }
        // Being completed when last asked: not before the grace its completion was given is over.
        if (now < (o.completingUntil ?? 0)) continue;
        const key = `${o.version}\u0000${o.from}`;
        batches.set(key, [...(batches.get(key) ?? []), o]);
      }
      for (const batch of batches.values()) {
        const { version, from } = batch[0]!;
        const destination = this.destinationFor(version, [...live.values()], now);
        if (destination) {
          await this.commands.whileBusy([destination.id], () => this.resumeOn(destination, from, version, batch));
          continue;
        }
        const expired = batch.filter((o) => now - o.since >= this.orphanWaitMs && !(now < (o.completingUntil ?? 0)));
        if (expired.length > 0) await this.returnToPrompts(expired);
      }
      this.options.metrics.orphansWaiting.set(this.waiting());
    } finally {
      this.placing = false;
    }
  }

  private destinationFor(version: number, live: RolloutView[], now: number): RolloutView | undefined {
    // The choice itself is shared with the simulator: failover-plan.ts.
    const candidates = live.flatMap((r) =>
      r.load !== null && this.commands.available(r.id, now)
        ? [
            {
              id: r.id,
              weightVersion: r.load.weightVersion,
              reinitialising: r.load.state === 'reinitialising',
              owned: r.load.owned,
              kvUsed: r.load.kvUsed,
              view: r,
            },
          ]
        : [],
    );
    return orphanDestination(version, candidates)?.view;
  }

  /** Hands a batch to a live rollout of its version; never rejects (a failure is retried at a later tick). */
  private async resumeOn(destination: RolloutView, from: string, version: number, batch: Orphan[]): Promise<void> {
    try {
      const reply = await this.commands.request(destination.id, {
        v: SCHEMA_VERSION,
        t: 'repack-in',
        repack: `failover-${randomBytes(3).toString('hex')}`,
        from,
        version,
        trajectories: batch.map((o) => o.trajectoryId),
      });
      // One left to its owner's completion stays an orphan until its grace is over: its owner may
      // have died between the 'completing' marker and the record, and then only a later take-over
      // (which finds it finished and returns its sample) completes it. Dropped here, it waited for
      // the backstop scan, 60 s (a successor manager's take-over under load, in CI).
      const completing = new Map(reply.completing.map((c) => [c.trajectory, c.retryAfterMs]));
      for (const o of batch) {
        const retryAfterMs = completing.get(o.trajectoryId);
        if (retryAfterMs === undefined) this.orphans.delete(o.trajectoryId);
        else o.completingUntil = Date.now() + retryAfterMs;
      }
      this.countOrphans('resumed', reply.taken);
      this.countOrphans('completed', reply.completed);
      this.countOrphans('lost', reply.lost);
      this.options.log.warn(
        { from, to: destination.id, version, taken: reply.taken, completed: reply.completed, lost: reply.lost, completing: completing.size },
        'orphaned trajectories resumed',
      );
      this.options.journal?.record(
        'orphans',
        from,
        `${from}'s trajectories of v${version} on ${destination.id}: ${reply.taken} resumed, ${reply.completed} completed, ${reply.lost} lost`,
      );
    } catch (err) {
      this.options.log.warn({ from, to: destination.id, err: (err as Error).message }, 'cannot resume orphans there (retrying)');
    }
  }

  /** Parks orphans nobody can resume and gives their samples back to the prompt pool. */
  private async returnToPrompts(expired: Orphan[]): Promise<void> {
    const { partials, prompts } = this.options;
    if (!prompts) {
      if (!this.warnedNoPrompts) this.options.log.error('orphans cannot be returned: this manager has no prompt pool (--redis); they keep waiting');
      this.warnedNoPrompts = true;
      return;
    }
    const before = { ...this.orphanCounts };
    for (const o of expired) {
      let parked: PendingReturn;
      try {
        const result = await partials!.takeOver(o.trajectoryId, PARKED_OWNER, { from: o.from });
        if (result.status === 'completing') {
          // Its rollout died (or hangs) while its record may still land: parked and returned now,
          // the sample would be generated twice. It stays an orphan; a tick after the grace asks again.
          o.completingUntil = Date.now() + result.retryAfterMs;
          this.options.log.warn({ trajectory: o.trajectoryId, from: o.from, retryAfterMs: result.retryAfterMs }, 'orphan being completed: asked again later');
          continue;
        }
        this.orphans.delete(o.trajectoryId);
        if (result.status === 'completed') {
          this.countOrphans('completed');
          continue;
        }
        result.trajectory.release();
        parked = this.parked(o, result.state.start, result.state.lastSeq);
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code !== ErrorCodes.NOT_OWNER && code !== ErrorCodes.UNKNOWN_TRAJECTORY) {
          this.options.log.warn({ trajectory: o.trajectoryId, err: (err as Error).message }, 'cannot return an orphan yet (retrying)');
          continue;
        }
        this.orphans.delete(o.trajectoryId);
        if (code === ErrorCodes.UNKNOWN_TRAJECTORY && o.completingUntil !== undefined) {
          // Seen being completed, gone now: its completer purged it after writing the record.
          this.countOrphans('completed');
          continue;
        }
        const found = code === ErrorCodes.NOT_OWNER ? await this.parkedAlready(o) : undefined;
        if (!found) {
          this.countOrphans('lost');
          continue;
        }
        parked = found;
      }
      await this.returnParked(parked);
    }
    const returned = this.orphanCounts.returned - before.returned;
    const completed = this.orphanCounts.completed - before.completed;
    const lost = this.orphanCounts.lost - before.lost;
    if (returned + completed + lost > 0) {
      this.options.journal?.record(
        'orphans',
        expired[0]!.from,
        `no rollout of v${expired[0]!.version} in time: ${returned} returned to the prompt pool, ${completed} completed, ${lost} lost`,
      );
    }
  }

  private parked(orphan: Orphan, start: { groupId: string; sampleIndex: number }, seq: number): PendingReturn {
    const key = parkedReturnKey(orphan.trajectoryId, seq);
    return { orphan, groupId: start.groupId, sampleIndex: start.sampleIndex, key, failures: 0, retryAt: 0, foundParked: false };
  }

  /**
   * The takeover found the log owned by someone else. When that is the parking owner (a takeover
   * of ours that failed after it was written, or another manager's parking whose return may have
   * failed), the sample is returned under the key of that parking: queued once, whoever returns it.
   * Undefined when another rollout won it, or the log cannot be read (then it is a race lost).
   */
  private async parkedAlready(o: Orphan): Promise<PendingReturn | undefined> {
    try {
      const partials = this.options.partials!;
      const summary = await partials.summary(o.trajectoryId);
      if (summary?.owner !== PARKED_OWNER) return undefined;
      const state = await partials.startOf(o.trajectoryId);
      return state ? this.parked(o, state.start, summary.lastSeq) : undefined;
    } catch (err) {
      this.options.log.warn({ trajectory: o.trajectoryId, err: (err as Error).message }, 'cannot read the owner of an orphan that was taken meanwhile');
      return undefined;
    }
  }

  /**
   * Returns a parked orphan's sample. A failure keeps it pending (retried by retryReturns, with
   * the same key); only a request the pool refuses as bad (a retry would get the same answer) is
   * counted lost, with an error logged. Never rejects.
   */
  private async returnParked(p: PendingReturn): Promise<void> {
    const o = p.orphan;
    try {
      const r = await this.options.prompts!.returnSamples({ groupId: p.groupId, samples: [p.sampleIndex], reason: 'failover', key: p.key });
      this.pendingReturns.delete(o.trajectoryId);
      this.settledParkings.add(p.key);
      if (p.foundParked) {
        // Returned already (by the manager or rollout that parked it): nothing was pending.
        if (r === 'duplicate') return;
        this.countOrphans('returned');
        this.options.log.warn(
          { trajectory: o.trajectoryId, key: p.key, groupId: p.groupId, sample: p.sampleIndex, retries: p.failures },
          "a parked log's sample had not been returned (its return was pending in a manager that is gone): returned to the prompt pool",
        );
        this.options.journal?.record('orphans', o.trajectoryId, `${o.trajectoryId} was parked and never returned: returned to the prompt pool`);
        return;
      }
      this.countOrphans('returned');
      this.options.log.warn(
        {
          trajectory: o.trajectoryId,
          version: o.version,
          waitedMs: Date.now() - o.since,
          retries: p.failures,
          ...(r === 'duplicate' ? { alreadyReturned: true } : {}),
        },
        'no rollout of its weight version: sample returned to the prompt pool',
      );
    } catch (err) {
      const code = (err as { code?: string }).code ?? 'failed';
      this.options.metrics.orphanReturnFailures.inc({ code });
      if (PERMANENT_RETURN_ERRORS.has(code)) {
        this.pendingReturns.delete(o.trajectoryId);
        this.settledParkings.add(p.key);
        this.countOrphans('lost');
        this.options.log.error(
          { trajectory: o.trajectoryId, groupId: p.groupId, sample: p.sampleIndex, code, err: (err as Error).message },
          "the prompt pool refuses the return of a parked orphan's sample: it is lost",
        );
        return;
      }
      p.failures++;
      const retryMs = Math.min(this.orphanScanMs, ORPHAN_RETURN_RETRY_MS * 2 ** Math.min(p.failures - 1, 16));
      p.retryAt = Date.now() + retryMs;
      this.pendingReturns.set(o.trajectoryId, p);
      this.options.log.warn(
        { trajectory: o.trajectoryId, groupId: p.groupId, sample: p.sampleIndex, code, failures: p.failures, retryMs, err: (err as Error).message },
        "cannot return a parked orphan's sample to the prompt pool (retrying)",
      );
    }
  }

  /** Returns again the samples of parked orphans whose retry is due. */
  private async retryReturns(now: number): Promise<void> {
    for (const p of [...this.pendingReturns.values()]) {
      if (p.retryAt > now) continue;
      const before = this.orphanCounts.returned;
      await this.returnParked(p);
      if (this.orphanCounts.returned > before && !p.foundParked) {
        this.options.journal?.record('orphans', p.orphan.from, `${p.orphan.trajectoryId} returned to the prompt pool after ${p.failures} failed returns`);
      }
    }
  }

  /** Orphans handled: the metric and the status' counts. */
  private countOrphans(outcome: keyof OrphanCounts, n = 1): void {
    this.orphanCounts[outcome] += n;
    this.options.metrics.orphans.inc({ outcome }, n);
  }
}
