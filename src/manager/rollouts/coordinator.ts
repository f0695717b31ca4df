/**
 * The rollout side of the manager (paper §3.3, §5): repacking long-tail trajectories within each
 * weight-version group, and rollout failover.
 *
 * Repack: every `repackIntervalMs` and right after a new weight version, the rollouts' reported
 * loads go through the planner (Algorithm 1, repack/planner.ts) per version group; each move runs
 * asynchronously through the partial pool: the source stops, stores every token and lets go
 * (repack-out), the destination takes the trajectories over and resumes them (repack-in), and
 * the emptied source is told to pull the newest weights. Nobody waits for a move but the two
 * rollouts in it, and a rollout is in at most one move at a time.
 *
 * Failover: a suspected rollout (missed heartbeats) is asked to reinitialise; a dead one's
 * trajectories (whatever the partial pool says it owns) resume on a live rollout of the same
 * weight version; with none, they wait up to `orphanWaitMs`, then are parked (taken over by the
 * manager, which fences the dead owner) and their samples go back to the prompt pool. The same
 * scan finds the orphans of rollouts that died while no manager was running.
 */
import { randomBytes } from 'node:crypto';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { ControlError, SCHEMA_VERSION, commandReplySchema, decode, encode, type Command, type CommandReply, type RolloutLoad } from '../../control/schema.js';
import { PARKED_OWNER, type PartialPool, type PromptPool } from '../../data/index.js';
import { DEFAULT_REPACK_LIMITS, planRepack, validateRepackLimits, type RepackLimits } from '../repack/planner.js';
import { repackRoundGroups, sourceIsEmpty, type RepackGroup } from '../repack/round.js';
import { orphanDestination } from './failover-plan.js';
import type { RolloutCoordinatorMetrics } from './metrics.js';
import type { EventJournal } from '../dashboard/journal.js';
import { ErrorCodes } from '../../common/error-codes.js';

/**
 * A rollout that did not answer a command (nobody subscribed: it is on its way out; or the
 * request timed out) is no destination for this long, so that the orphans and moves meant for it
 * go elsewhere at once instead of being retried at it on every tick until heartbeats say it died.
 */
const UNREACHABLE_MS = 2000;

export interface RolloutView {
  id: string;
  health: 'alive' | 'suspected' | 'dead';
  load: RolloutLoad | null;
}

export const DEFAULT_ORPHAN_SCAN_MS = 60_000;

/**
 * A scan that could not read the partial pool (listing it, or a trajectory's owner) is tried
 * again this soon after it ended: a trajectory it could not check may be an orphan, and waiting
 * for the next backstop scan would leave it unowned for up to `orphanScanMs`. The delay doubles
 * with each scan that fails in a row (a scan reads the whole pool), up to `orphanScanMs`.
 */
export const ORPHAN_SCAN_RETRY_MS = 2000;

export interface RolloutCoordinatorOptions {
  nc: NatsConnection;
  memberSubject: (id: string) => string;
  model?: string;
  /** Needed for failover (who owns what); without it only repack runs. */
  partials: PartialPool | null;
  /** Needed to return samples nobody can resume. */
  prompts: PromptPool | null;
  limits?: RepackLimits;
  /** B per model profile (the rollouts' reported model), where it differs from `limits`. */
  rooflineBatchByModel?: Record<string, number>;
  /** 0 turns repack off. Default 5 s (the paper's period). */
  repackIntervalMs?: number;
  commandTimeoutMs?: number;
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
  /** The dashboard's event log: each repack round's moves and each batch of orphans handled are recorded. */
  journal?: EventJournal;
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
}

export interface CoordinatorStatus {
  busy: string[];
  orphansWaiting: number;
  /** Repack moves carried out, and failed, since this process started (cumulative). */
  moves: { done: number; failed: number };
  /** Orphaned trajectories handled since this process started, by outcome (cumulative, as `laminar_manager_orphans_total`). */
  orphans: OrphanCounts;
}

export interface OrphanCounts {
  resumed: number;
  completed: number;
  returned: number;
  lost: number;
}

type MoveResult = 'done' | 'failed' | 'empty';

export class RolloutCoordinator {
  private readonly limits: RepackLimits;
  private readonly repackIntervalMs: number;
  private readonly commandTimeoutMs: number;
  private readonly orphanWaitMs: number;
  private readonly orphanScanMs: number;
  private readonly startupGraceMs: number;
  private readonly busy = new Set<string>();
  /** KV use of each rollout at the previous repack round (the planner's C_prev). */
  private kvAtLastRound = new Map<string, number>();
  private readonly orphans = new Map<string, Orphan>();
  /** Rollouts that did not answer a command, until when they are passed over (UNREACHABLE_MS). */
  private readonly unreachableUntil = new Map<string, number>();
  private lastRepack = 0;
  private repackTrigger: 'interval' | 'version' | null = null;
  private lastScan = 0;
  private scanning = false;
  /** Scans in a row that could not read the whole pool (their retry delay doubles). */
  private failedScans = 0;
  private placing = false;
  private leaderSince = Date.now();
  private movesDone = 0;
  private movesFailed = 0;
  private readonly orphanCounts: OrphanCounts = { resumed: 0, completed: 0, returned: 0, lost: 0 };
  private warnedNoPrompts = false;

  constructor(private readonly options: RolloutCoordinatorOptions) {
    this.limits = options.limits ?? DEFAULT_REPACK_LIMITS;
    validateRepackLimits(this.limits);
    for (const rooflineBatch of Object.values(options.rooflineBatchByModel ?? {})) validateRepackLimits({ ...this.limits, rooflineBatch });
    this.repackIntervalMs = options.repackIntervalMs ?? 5000;
    this.commandTimeoutMs = options.commandTimeoutMs ?? 30_000;
    this.orphanWaitMs = options.orphanWaitMs ?? 30_000;
    this.orphanScanMs = options.orphanScanMs ?? DEFAULT_ORPHAN_SCAN_MS;
    this.startupGraceMs = options.startupGraceMs ?? 6000;
  }

  /** Called when this manager becomes leader: a fresh start of every timer. */
  reset(now = Date.now()): void {
    this.leaderSince = now;
    this.lastRepack = now;
    this.lastScan = 0;
    this.failedScans = 0;
    this.kvAtLastRound.clear();
    this.orphans.clear();
    this.unreachableUntil.clear();
    this.options.metrics.orphansWaiting.set(0);
  }

  status(): CoordinatorStatus {
    return {
      busy: [...this.busy],
      orphansWaiting: this.orphans.size,
      moves: { done: this.movesDone, failed: this.movesFailed },
      orphans: { ...this.orphanCounts },
    };
  }

  /** A new weight version exists: repack at the next tick (paper §5.1). */
  newVersion(): void {
    if (this.repackIntervalMs > 0) this.repackTrigger = 'version';
  }

  /** A rollout missed heartbeats: ask it to rebuild its engine (same devices). */
  suspected(id: string): void {
    this.request(id, { v: SCHEMA_VERSION, t: 'reinitialise', reason: 'missed heartbeats' }).then(
      () => this.options.metrics.reinitialise.inc({ result: 'done' }),
      (err: unknown) => this.options.metrics.reinitialise.inc({ result: (err as { code?: string }).code ?? 'failed' }),
    );
  }

  /** A rollout was declared dead: look for its trajectories now. */
  dead(id: string): void {
    this.busy.delete(id);
    this.unreachableUntil.delete(id);
    this.lastScan = 0;
  }

  tick(rollouts: RolloutView[], now = Date.now()): void {
    if (this.repackIntervalMs > 0 && (this.repackTrigger !== null || now - this.lastRepack >= this.repackIntervalMs)) {
      this.repackRound(rollouts, this.repackTrigger ?? 'interval', now);
    }
    if (this.options.partials && now - this.leaderSince >= this.startupGraceMs && now - this.lastScan >= this.orphanScanMs && !this.scanning) {
      this.lastScan = now;
      void this.scan(rollouts);
    }
    if (this.orphans.size > 0 && !this.placing) void this.placeOrphans(rollouts, now);
  }

  // ---- repack ------------------------------------------------------------------------------

  private repackRound(rollouts: RolloutView[], trigger: 'interval' | 'version', now: number): void {
    this.lastRepack = now;
    this.repackTrigger = null;
    this.options.metrics.repackRounds.inc({ trigger });
    // The round's rules (eligibility, C_prev, groups) are shared with the simulator: repack/round.ts.
    const round = repackRoundGroups(
      rollouts.flatMap((r) =>
        r.load === null
          ? []
          : [
              {
                id: r.id,
                model: r.load.model ?? '',
                weightVersion: r.load.weightVersion,
                generating: r.load.state === 'generating',
                available: r.health === 'alive' && !this.busy.has(r.id) && this.reachable(r.id, now),
                kvUsed: r.load.kvUsed,
                kvPrev: r.load.kvPrev,
                owned: r.load.owned,
              },
            ],
      ),
      this.kvAtLastRound,
      this.limits,
      this.options.rooflineBatchByModel,
    );
    this.kvAtLastRound = round.kvAtThisRound;
    for (const group of round.groups) this.planGroup(group, trigger);
  }

  private planGroup(group: RepackGroup, trigger: string): void {
    const { model, weightVersion: version } = group;
    const started = performance.now();
    const plan = planRepack(group.rollouts, group.limits);
    this.options.metrics.plannerSeconds.observe((performance.now() - started) / 1e3);
    if (plan.length === 0) return;
    this.options.log.info({ model, version, trigger, moves: plan.map((m) => `${m.source}->${m.destination}`) }, 'repack plan');
    const moves: Promise<MoveResult>[] = [];
    for (const move of plan) {
      if (sourceIsEmpty(group, move)) {
        // Nothing to hand over: the source is simply free for the newest weights.
        this.options.metrics.repackMoves.inc({ result: 'empty' });
        this.fireAndForget(move.source, { v: SCHEMA_VERSION, t: 'update-weights', model: this.options.model ?? null, version: null });
        moves.push(Promise.resolve('empty'));
        continue;
      }
      moves.push(this.move(move.source, move.destination, version));
    }
    // The round's end for the dashboard's log, once its last move is over (move() never rejects).
    void Promise.all(moves).then((results) => {
      const count = (r: MoveResult): number => results.filter((x) => x === r).length;
      this.options.journal?.record(
        'repack',
        `${model || 'model'} v${version}`,
        `round (${trigger}): ${count('done')} moves done, ${count('failed')} failed, ${count('empty')} empty`,
      );
    });
  }

  /** One move; never rejects (a failure is counted and its trajectories go back or the orphan way). */
  private async move(source: string, destination: string, version: number): Promise<MoveResult> {
    const repack = randomBytes(4).toString('hex');
    this.busy.add(source);
    this.busy.add(destination);
    const started = performance.now();
    try {
      const out = await this.request(source, { v: SCHEMA_VERSION, t: 'repack-out', repack, to: destination, version });
      const moved = out.moved;
      if (moved.length === 0) {
        this.options.metrics.repackMoves.inc({ result: 'empty' });
        return 'empty';
      }
      let reply: Extract<CommandReply, { t: 'done' }>;
      try {
        reply = await this.request(destination, { v: SCHEMA_VERSION, t: 'repack-in', repack, from: source, version, trajectories: moved });
      } catch (err) {
        // The destination could not take them: back to the source, or, failing that, to
        // whichever rollout of the version can (the orphan path).
        this.options.log.warn({ repack, source, destination, err: (err as Error).message }, 'repack destination failed: giving the trajectories back');
        reply = await this.request(source, { v: SCHEMA_VERSION, t: 'repack-in', repack, from: source, version, trajectories: moved }).catch((e: unknown) => {
          this.options.log.warn({ repack, source, err: (e as Error).message }, 'the source cannot take them back either: they go the orphan way');
          const now = Date.now();
          for (const id of moved) this.orphans.set(id, { trajectoryId: id, from: source, version, since: now, stranded: true });
          return { v: SCHEMA_VERSION, t: 'done', moved: [], taken: 0, completed: 0, lost: 0 } as const;
        });
        throw err;
      }
      this.movesDone++;
      this.options.metrics.repackMoves.inc({ result: 'done' });
      this.options.metrics.repackTrajectories.inc({ outcome: 'resumed' }, reply.taken);
      this.options.metrics.repackTrajectories.inc({ outcome: 'completed' }, reply.completed);
      this.options.metrics.repackTrajectories.inc({ outcome: 'lost' }, reply.lost);
      this.options.metrics.repackSeconds.observe((performance.now() - started) / 1e3);
      this.options.log.info({ repack, source, destination, version, taken: reply.taken, ms: Math.round(performance.now() - started) }, 'repack move done');
      // The emptied source generates with the newest weights from now on.
      this.fireAndForget(source, { v: SCHEMA_VERSION, t: 'update-weights', model: this.options.model ?? null, version: null });
      return 'done';
    } catch (err) {
      this.movesFailed++;
      this.options.metrics.repackMoves.inc({ result: (err as { code?: string }).code ?? 'failed' });
      return 'failed';
    } finally {
      this.busy.delete(source);
      this.busy.delete(destination);
    }
  }

  // ---- failover ----------------------------------------------------------------------------

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
      let summaries: Awaited<ReturnType<PartialPool['list']>> = [];
      try {
        summaries = await partials.list();
      } catch (err) {
        failed('list', err);
      }
      for (const s of summaries) {
        if (live.has(s.owner) || s.owner === PARKED_OWNER || this.orphans.has(s.trajectoryId)) continue;
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
      this.options.metrics.orphansWaiting.set(this.orphans.size);
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

  private async placeOrphans(rollouts: RolloutView[], now: number): Promise<void> {
    this.placing = true;
    try {
      const live = new Map(rollouts.filter((r) => r.health === 'alive').map((r) => [r.id, r]));
      const batches = new Map<string, Orphan[]>();
      for (const o of this.orphans.values()) {
        if (live.has(o.from) && !o.stranded) {
          // The owner came back (re-admitted): its trajectories are its own again.
          this.orphans.delete(o.trajectoryId);
          continue;
        }
        const key = `${o.version}\u0000${o.from}`;
        batches.set(key, [...(batches.get(key) ?? []), o]);
      }
      for (const batch of batches.values()) {
        const { version, from } = batch[0]!;
        const destination = this.destinationFor(version, [...live.values()], now);
        if (destination) {
          await this.resumeOn(destination, from, version, batch);
          continue;
        }
        const expired = batch.filter((o) => now - o.since >= this.orphanWaitMs);
        if (expired.length > 0) await this.returnToPrompts(expired);
      }
      this.options.metrics.orphansWaiting.set(this.orphans.size);
    } finally {
      this.placing = false;
    }
  }

  private destinationFor(version: number, live: RolloutView[], now: number): RolloutView | undefined {
    // The choice itself is shared with the simulator: failover-plan.ts.
    const candidates = live.flatMap((r) =>
      r.load !== null && !this.busy.has(r.id) && this.reachable(r.id, now)
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

  private async resumeOn(destination: RolloutView, from: string, version: number, batch: Orphan[]): Promise<void> {
    this.busy.add(destination.id);
    try {
      const reply = await this.request(destination.id, {
        v: SCHEMA_VERSION,
        t: 'repack-in',
        repack: `failover-${randomBytes(3).toString('hex')}`,
        from,
        version,
        trajectories: batch.map((o) => o.trajectoryId),
      });
      for (const o of batch) this.orphans.delete(o.trajectoryId);
      this.countOrphans('resumed', reply.taken);
      this.countOrphans('completed', reply.completed);
      this.countOrphans('lost', reply.lost);
      this.options.log.warn(
        { from, to: destination.id, version, taken: reply.taken, completed: reply.completed, lost: reply.lost },
        'orphaned trajectories resumed',
      );
      this.options.journal?.record(
        'orphans',
        from,
        `${from}'s trajectories of v${version} on ${destination.id}: ${reply.taken} resumed, ${reply.completed} completed, ${reply.lost} lost`,
      );
    } catch (err) {
      this.options.log.warn({ from, to: destination.id, err: (err as Error).message }, 'cannot resume orphans there (retrying)');
    } finally {
      this.busy.delete(destination.id);
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
      try {
        const result = await partials!.takeOver(o.trajectoryId, PARKED_OWNER, { from: o.from });
        if (result.status === 'completed') {
          this.countOrphans('completed');
        } else {
          result.trajectory.release();
          const start = result.state.start;
          await prompts.returnSamples({ groupId: start.groupId, samples: [start.sampleIndex], reason: 'failover' });
          this.countOrphans('returned');
          this.options.log.warn(
            { trajectory: o.trajectoryId, version: o.version, waitedMs: Date.now() - o.since },
            'no rollout of its weight version: sample returned to the prompt pool',
          );
        }
        this.orphans.delete(o.trajectoryId);
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === ErrorCodes.NOT_OWNER || code === ErrorCodes.UNKNOWN_TRAJECTORY) {
          this.countOrphans('lost');
          this.orphans.delete(o.trajectoryId);
        } else {
          this.options.log.warn({ trajectory: o.trajectoryId, err: (err as Error).message }, 'cannot return an orphan yet (retrying)');
        }
      }
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

  /** Orphans handled: the metric and the status' counts. */
  private countOrphans(outcome: keyof OrphanCounts, n = 1): void {
    this.orphanCounts[outcome] += n;
    this.options.metrics.orphans.inc({ outcome }, n);
  }

  // ---- commands ----------------------------------------------------------------------------

  private async request(id: string, command: Command): Promise<Extract<CommandReply, { t: 'done' }>> {
    let msg: Awaited<ReturnType<NatsConnection['request']>>;
    try {
      msg = await this.options.nc.request(this.options.memberSubject(id), encode(command), { timeout: this.commandTimeoutMs });
    } catch (err) {
      // No answer at all (an answer that refuses is the rollout's own business, below).
      this.unreachableUntil.set(id, Date.now() + UNREACHABLE_MS);
      throw err;
    }
    const reply = decode(commandReplySchema, msg.data, `${command.t} reply`);
    if (reply.t === 'failed') throw new ControlError(reply.code, `${id} could not ${command.t}: ${reply.message}`);
    return reply;
  }

  private reachable(id: string, now: number): boolean {
    const until = this.unreachableUntil.get(id);
    if (until === undefined) return true;
    if (until > now) return false;
    this.unreachableUntil.delete(id);
    return true;
  }

  private fireAndForget(id: string, command: Command): void {
    this.request(id, command).catch((err: unknown) =>
      this.options.log.debug({ rollout: id, command: command.t, err: (err as Error).message }, 'command not carried out'),
    );
  }
}
