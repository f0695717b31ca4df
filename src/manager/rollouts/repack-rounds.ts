/**
 * Repack (paper §3.3, §5.1): every `repackIntervalMs` and right after a new weight version, the
 * rollouts' reported loads go through the planner (Algorithm 1, repack/planner.ts) per version
 * group; each move runs asynchronously through the partial pool: the source stops, stores every
 * token and lets go (repack-out), the destination takes the trajectories over and resumes them
 * (repack-in), and the emptied source is told to pull the newest weights. Nobody waits for a move
 * but the two rollouts in it, and a rollout is in at most one move at a time.
 *
 * Trajectories that neither the destination nor the source can take back are handed to failover
 * (onStranded).
 *
 * Two planners (`planner`): `algorithm1` (default), the paper's consolidation above; `dp`, for
 * agentic jobs, placement by predicted remaining length that moves only trajectories waiting at
 * tool calls (repack/tool-call-moves.ts: each rollout's time is max(max L, Σ L / B), B its
 * engine's decode batch from the heartbeat): the source hands over just those, goes on
 * generating the rest and keeps its weights.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { SCHEMA_VERSION } from '../../control/schema.js';
import type { EventJournal } from '../dashboard/journal.js';
import { DEFAULT_REPACK_LIMITS, planRepack, validateRepackLimits, type RepackLimits } from '../repack/planner.js';
import { repackRoundGroups, sourceIsEmpty, type RepackGroup } from '../repack/round.js';
import { planToolCallMoves, someEngineShort, validReprefillCost, type PlacedTrajectory } from '../repack/tool-call-moves.js';
import type { RolloutCoordinatorMetrics } from './metrics.js';
import type { DoneReply, RolloutCommands } from './rollout-commands.js';
import type { RolloutView } from './rollout-view.js';

export interface RepackRoundsOptions {
  model?: string;
  limits?: RepackLimits;
  /** B per model profile (the rollouts' reported model), where it differs from `limits`. */
  rooflineBatchByModel?: Record<string, number>;
  /** 0 turns repack off. Default 5 s (the paper's period). */
  repackIntervalMs?: number;
  /** `algorithm1` (default): the paper's consolidation; `dp`: Heddle's placement, moving trajectories at tool calls only. */
  planner?: RepackPlanner;
  /**
   * `dp`: decode-token times one context token re-prefilled at a move's destination costs (the
   * engine's prefill time per token over its decode step's; tool-call-moves.ts). Default 0: moves free.
   */
  reprefillCost?: number;
  metrics: RolloutCoordinatorMetrics;
  log: Logger;
  /** The dashboard's event log: each round's moves are recorded. */
  journal?: EventJournal;
}

type MoveResult = 'done' | 'failed' | 'empty';

export const REPACK_PLANNERS = ['algorithm1', 'dp'] as const;
export type RepackPlanner = (typeof REPACK_PLANNERS)[number];

export class RepackRounds {
  private readonly limits: RepackLimits;
  private readonly repackIntervalMs: number;
  /** KV use of each rollout at the previous repack round (the planner's C_prev). */
  private kvAtLastRound = new Map<string, number>();
  private lastRepack = 0;
  private trigger: 'interval' | 'version' | null = null;
  private movesDone = 0;
  private movesFailed = 0;

  constructor(
    private readonly options: RepackRoundsOptions,
    private readonly commands: RolloutCommands,
    /** Trajectories a failed move left with nobody generating them: failover's to place. */
    private readonly onStranded: (trajectories: readonly string[], from: string, version: number) => void,
  ) {
    this.limits = options.limits ?? DEFAULT_REPACK_LIMITS;
    validateRepackLimits(this.limits);
    validReprefillCost(options.reprefillCost ?? 0);
    for (const rooflineBatch of Object.values(options.rooflineBatchByModel ?? {})) validateRepackLimits({ ...this.limits, rooflineBatch });
    this.repackIntervalMs = options.repackIntervalMs ?? 5000;
  }

  /** Called when this manager becomes leader: the interval starts again. */
  reset(now: number): void {
    this.lastRepack = now;
    this.kvAtLastRound.clear();
  }

  /** Repack moves carried out, and failed, since this process started (cumulative). */
  moves(): { done: number; failed: number } {
    return { done: this.movesDone, failed: this.movesFailed };
  }

  /** A new weight version exists: repack at the next tick (paper §5.1). */
  newVersion(): void {
    if (this.repackIntervalMs > 0) this.trigger = 'version';
  }

  /** Runs a round when one is due. */
  tick(rollouts: RolloutView[], now: number): void {
    if (this.repackIntervalMs > 0 && (this.trigger !== null || now - this.lastRepack >= this.repackIntervalMs)) {
      this.round(rollouts, this.trigger ?? 'interval', now);
    }
  }

  private round(rollouts: RolloutView[], trigger: 'interval' | 'version', now: number): void {
    this.lastRepack = now;
    this.trigger = null;
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
                // The dp planner moves trajectories at tools onto idle rollouts too (Algorithm 1
                // empties rollouts and needs none): an idle one with weights is the best destination.
                generating: r.load.state === 'generating' || (this.options.planner === 'dp' && r.load.state === 'idle'),
                available: r.health === 'alive' && this.commands.available(r.id, now),
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
    if (this.options.planner === 'dp') {
      const trajectories = ownedOnce(rollouts.flatMap((r) => (r.load?.trajectories ?? []).map((t) => ({ ...t, rollout: r.id }))));
      const byId = new Map(rollouts.map((r) => [r.id, r]));
      for (const group of round.groups) this.planToolCallGroup(group, trajectories, byId, trigger);
    } else {
      for (const group of round.groups) this.planGroup(group, trigger);
    }
  }

  /**
   * The `dp` planner: trajectories waiting at tool calls placed by predicted length, for engines
   * that decode B at a time and queue the rest (tool-call-moves.ts); the moves run one after the other.
   */
  private planToolCallGroup(group: RepackGroup, trajectories: readonly PlacedTrajectory[], byId: ReadonlyMap<string, RolloutView>, trigger: string): void {
    const { model, weightVersion: version } = group;
    const started = performance.now();
    const ids = group.rollouts.map((r) => r.id);
    // B per rollout from its heartbeat (its engine's decode batch); --roofline-batch where it does not say.
    const decodeBatchOf: Record<string, number> = {};
    for (const id of ids) {
      const b = byId.get(id)?.load?.decodeBatch;
      if (b !== undefined) decodeBatchOf[id] = b;
    }
    // Moves only where an engine would otherwise have free decode slots (tool-call-moves.ts).
    if (!someEngineShort(trajectories, ids, group.limits.rooflineBatch, decodeBatchOf)) return;
    let plan;
    try {
      plan = planToolCallMoves(trajectories, ids, group.limits.rooflineBatch, { reprefillCost: this.options.reprefillCost ?? 0, decodeBatchOf });
    } catch (err) {
      // Not expected (the reports are validated, duplicates dropped): never let it stop the manager's tick.
      this.options.log.warn({ model, version, err: (err as Error).message }, 'tool-call moves not planned this round');
      return;
    }
    this.options.metrics.plannerSeconds.observe((performance.now() - started) / 1e3);
    if (plan.moves.length === 0) return;
    this.options.log.info(
      {
        model,
        version,
        trigger,
        makespan: [Math.round(plan.makespanBefore), Math.round(plan.makespanAfter)],
        moves: plan.moves.map((m) => `${m.source}->${m.destination} (${m.trajectories.length})`),
      },
      'repack plan (tool-call moves)',
    );
    const involved = [...new Set(plan.moves.flatMap((m) => [m.source, m.destination]))];
    void this.commands.whileBusy(involved, async () => {
      const results: MoveResult[] = [];
      for (const m of plan.moves) results.push(await this.move(m.source, m.destination, version, m.trajectories));
      const count = (r: MoveResult): number => results.filter((x) => x === r).length;
      this.options.journal?.record(
        'repack',
        `${model || 'model'} v${version}`,
        `tool-call moves (${trigger}): ${count('done')} done, ${count('failed')} failed`,
      );
    });
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
        this.updateWeights(move.source);
        moves.push(Promise.resolve('empty'));
        continue;
      }
      moves.push(this.commands.whileBusy([move.source, move.destination], () => this.move(move.source, move.destination, version)));
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

  /**
   * One move (of everything the source owns, or of `only` those trajectories: a tool-call move,
   * after which the source goes on with the rest and keeps its weights); never rejects (a failure
   * is counted and its trajectories go back or the orphan way).
   */
  private async move(source: string, destination: string, version: number, only?: string[]): Promise<MoveResult> {
    const repack = randomBytes(4).toString('hex');
    const started = performance.now();
    try {
      const out = await this.commands.request(source, {
        v: SCHEMA_VERSION,
        t: 'repack-out',
        repack,
        to: destination,
        version,
        ...(only ? { trajectories: only } : {}),
      });
      const moved = out.moved;
      if (moved.length === 0) {
        this.options.metrics.repackMoves.inc({ result: 'empty' });
        return 'empty';
      }
      let reply: DoneReply;
      try {
        reply = await this.commands.request(destination, { v: SCHEMA_VERSION, t: 'repack-in', repack, from: source, version, trajectories: moved });
      } catch (err) {
        // The destination could not take them: back to the source, or, failing that, to
        // whichever rollout of the version can (the orphan path).
        this.options.log.warn({ repack, source, destination, err: (err as Error).message }, 'repack destination failed: giving the trajectories back');
        await this.commands.request(source, { v: SCHEMA_VERSION, t: 'repack-in', repack, from: source, version, trajectories: moved }).catch((e: unknown) => {
          this.options.log.warn({ repack, source, err: (e as Error).message }, 'the source cannot take them back either: they go the orphan way');
          this.onStranded(moved, source, version);
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
      if (!only) this.updateWeights(source);
      return 'done';
    } catch (err) {
      this.movesFailed++;
      this.options.metrics.repackMoves.inc({ result: (err as { code?: string }).code ?? 'failed' });
      return 'failed';
    }
  }

  private updateWeights(id: string): void {
    this.commands.fireAndForget(id, { v: SCHEMA_VERSION, t: 'update-weights', model: this.options.model ?? null, version: null });
  }
}

/**
 * The trajectories listed by one rollout only. Right after a move, or a failover that took a
 * rollout's trajectories while they waited at a tool (their old owner notices only when the call
 * returns), two heartbeats may list the same trajectory: whose it is, the partial pool says, not
 * the reports, so it is left where it is this round rather than planned twice.
 */
function ownedOnce(trajectories: readonly PlacedTrajectory[]): PlacedTrajectory[] {
  const seen = new Map<string, number>();
  for (const t of trajectories) seen.set(t.id, (seen.get(t.id) ?? 0) + 1);
  return trajectories.filter((t) => seen.get(t.id) === 1);
}
