/**
 * laminar (paper §3-§6, Figure 3(e); docs/design/simulator.md): rollouts and trainer on their own
 * GPUs, never waiting for each other.
 *
 * - A rollout claims by the rollout agent's rule (src/rollout/claim-policy.ts, the same functions
 *   `laminar rollout-agent` calls), in whole prompt groups: in the scenario's 'batch' claim mode
 *   `maxConcurrency` trajectories at once, generated until its engine is empty; in 'continuous'
 *   mode up to `maxConcurrency` in flight, claimed again as they finish while its relay holds no
 *   newer version. Once empty, it takes the newest version complete on its machine's relay
 *   (loading it over PCIe if it is newer than its own) and claims again.
 * - The trainer waits until the scenario's sampling strategy (the real ones: fifo, uniform, whole
 *   groups, staleness-bounded drop; trainer/strategy-buffer.ts) gives it a batch, trains it
 *   (data-plane overhead + the time model), and the new version exists at the end of training;
 *   it then pushes it into the master relay (the actor stall, which delays its next step), and
 *   the chain carries it down (fleet/broadcast.ts, the relays' chunk model).
 * - The manager runs a repack round every `repackIntervalS` and right after each new version,
 *   with the manager's own round rules and planner (src/manager/repack/round.ts, planner.ts);
 *   a move drains the source's engine, and `repackMoveS` later resumes those trajectories
 *   (prompt + generated tokens re-prefilled) on the destination. Both are busy meanwhile; the
 *   emptied source then pulls the newest version (at once when it owned nothing, as the
 *   coordinator sends it update-weights).
 *   `repack: false` is laminar-no-repack.
 * - The relay chain (fleet/relay-chain.ts) is ordered by the manager's own arrangeChain, and the
 *   scenario's failures (this run's: failures.ts) hit it and the rollouts: a machine's relay and
 *   rollouts die, its trajectories are orphaned with their tokens as of the last partial-pool
 *   flush, resumed after `deadAfterS` on a live rollout of their version (the coordinator's
 *   orphanDestination) or, after `orphanWaitS` more, given back to the prompt pool; a
 *   replacement machine joins the chain's tail after `replaceAfterS` and its rollouts start once
 *   their relay has caught the newest version up. A relay or master failure is the chain's
 *   repair alone; a rollout failure reinitialises its engine and resumes its own trajectories.
 *
 * - On the tool-call task a tool-call schedule (agentic/tool-schedule.ts, issue #49) may order each
 *   engine's turns by predicted remaining length, place returning turns by least load, or replace
 *   Algorithm 1 by the dp planner's tool-call moves (agentic/turn-scheduler.ts).
 *
 * Not modelled yet: prefetch of the next batch, slow links (the stall watch's demotions).
 */
import { strategyByName } from '../../data/experience/strategies/by-name.js';
import { sourceIsEmpty } from '../../manager/repack/round.js';
import { TurnScheduler } from '../agentic/turn-scheduler.js';
import type { SimComponents } from '../components.js';
import type { LeapRequest } from '../engine/leap-engine.js';
import { chainTiming, linkOf, type BroadcastComponents } from '../fleet/broadcast.js';
import { RelayChain, type ChainComponents } from '../fleet/relay-chain.js';
import type { ToolCallLoop } from '../fleet/tool-calls.js';
import { Rollout } from '../fleet/rollout.js';
import { weightBytes } from '../scenario/derive.js';
import { failuresOf } from './failures.js';
import { StrategyBuffer } from '../trainer/strategy-buffer.js';
import { randomStream } from '../workload/seeds.js';
import { dataPlaneOverheadMs, pushToMasterMs, rolloutLoadMs } from '../trainer/time-model.js';
import type { RunContext } from './run-context.js';

export interface LaminarOptions {
  repack: boolean;
  /** The manager's round rules (src/manager/repack/round.ts) and planner, or planted ones. */
  round: SimComponents['repackRoundGroups'];
  planner: SimComponents['planRepack'];
  /** The rollout agent's claim rule (src/rollout/claim-policy.ts), or a planted one. */
  claim: Pick<SimComponents, 'mustEmptyFirst' | 'promptsToClaim'>;
  broadcast: BroadcastComponents;
  /** The chain scheduler's ordering (src/manager/chain.ts arrangeChain), or a planted one. */
  chain: ChainComponents;
  /** Where orphans resume (src/manager/rollouts/failover-plan.ts), or a planted one. */
  orphanDestination: SimComponents['orphanDestination'];
}

/**
 * Trajectories a rollout claims at once (batch mode) or keeps in flight (continuous), whole prompt
 * groups. With rolloutBatchShare its share of the global batch, the batch's prompts over the
 * rollouts (those alive when it claims) rounded up, at most `maxConcurrency`: A.3's "maximum concurrency" of 1,024 is a limit,
 * and the paper's rollout generates "its own batch sampled from the prompt pool" (§3.1), one of
 * 512 trajectories for a 32B TP-4 rollout in Figure 9, 8,192 over the 16 rollouts of §8.4. So
 * the fleet holds about one global batch in flight whatever its size, and a trajectory's inherent
 * staleness is its own latency and its batch's (§6), not the queue of several batches behind a
 * KV cache. Without it, `maxConcurrency` itself (the fleet holds rollouts × 1,024).
 */
export function claimTrajectories(maxConcurrency: number, batchSize: number, groupSize: number, rollouts: number, share: boolean): number {
  const capPrompts = Math.max(1, Math.floor(maxConcurrency / groupSize));
  if (!share) return capPrompts * groupSize;
  const batchPrompts = Math.ceil(batchSize / groupSize);
  return Math.min(capPrompts, Math.max(1, Math.ceil(batchPrompts / Math.max(1, rollouts)))) * groupSize;
}

export function runLaminar(ctx: RunContext, options: LaminarOptions): void {
  const { sim, scenario, placement, workload } = ctx;
  // The agent's --batch-prompts and --max-in-flight for this scenario.
  // With rolloutBatchShare the share is of the rollouts alive when it claims: a machine's loss
  // deals the batch over the rest, its replacement takes its part back.
  const policyFor = (rollouts: number): { batchPrompts: number; maxInFlight: number } => {
    const perRollout = claimTrajectories(scenario.maxConcurrency, workload.batchSize, workload.groupSize, rollouts, ctx.mechanisms.rolloutBatchShare);
    return { batchPrompts: perRollout / workload.groupSize, maxInFlight: scenario.claimMode === 'continuous' ? perRollout : 0 };
  };
  const policies = new Map<number, { batchPrompts: number; maxInFlight: number }>();
  const claimPolicyNow = (): { batchPrompts: number; maxInFlight: number } => {
    let alive = 0;
    for (const r of rollouts) if (!r.dead) alive++;
    let p = policies.get(alive);
    if (p === undefined) policies.set(alive, (p = policyFor(alive)));
    return p;
  };
  const batchSize = workload.batchSize;
  const loadMs = rolloutLoadMs(scenario, placement.tp);
  const machines = Math.max(1, placement.rolloutMachines);
  const timing = chainTiming(scenario, machines, options.broadcast);
  const link = linkOf(scenario);
  const bytes = weightBytes(scenario);
  /** Newest version the relay of each machine holds whole (machines added by replacements grow it). */
  const relayVersion: number[] = new Array<number>(machines).fill(0);
  const chain = new RelayChain({
    sim,
    bytes,
    chunks: timing.chunks,
    broadcastTime: (p) => options.broadcast.broadcastTime(p, timing.chunks, bytes, link),
    pushMs: pushToMasterMs(scenario),
    detectMs: scenario.manager.relayFailureDetectS * 1e3,
    publishMs: scenario.manager.planPublishS * 1e3,
    arrange: options.chain.arrangeChain,
    onHolds: (machine, version) => {
      if (version > (relayVersion[machine] ?? -1)) relayVersion[machine] = version;
      // A replacement's rollouts start once their relay holds a version.
      for (const r of rollouts) if (r.machine === machine && r.version < 0 && !r.dead && r.owned === 0 && r.phase === 'generating') refill(r);
    },
  });
  for (let m = 0; m < machines; m++) chain.add(m, 0);
  chain.replan();
  const cap = ctx.profile.kvCapacityTokens;
  // The scenario's strategy, as sim-trainer's --strategy/--max-staleness name it; what it drops
  // as too stale is counted in the ledger.
  const buffer = new StrategyBuffer(strategyByName(scenario.trainer.strategy, scenario.trainer.maxStaleness), randomStream(scenario.seed, 'sampler')(0), (id) =>
    ctx.ledger.drop(id),
  );
  // As the manager's --repack-interval 0: no rounds at all, not even after a new version.
  const repackOn = options.repack && scenario.manager.repackIntervalS > 0;
  let trainerVersion = 0;
  let training = false;

  const rollouts: Rollout[] = [];
  // Issue #49's scheduling of the tool-call task's turns, when the run has a schedule.
  const turns =
    ctx.toolSchedule === null || ctx.tools === null
      ? null
      : new TurnScheduler(ctx.toolSchedule, workload, ctx.tools, {
          rollouts,
          versionOf: (id) => ctx.pool.versionOf(id),
          transferred: (from, to) => {
            from.owned--;
            to.owned++;
            next(from);
          },
        });
  ctx.turnScheduler = turns;
  const dpAtTools = turns !== null && turns.schedule.placement === 'dp-at-tool';
  function addRollout(machine: number): Rollout {
    const r = new Rollout(rollouts.length, machine);
    r.actor = ctx.addEngine({ finished: (id) => finished(r, id) });
    rollouts.push(r);
    turns?.register(r);
    return r;
  }
  for (let i = 0; i < placement.rollouts; i++) addRollout(Math.min(machines - 1, Math.floor((i * placement.tp) / scenario.hardware.gpusPerMachine)));

  function claim(r: Rollout): void {
    if (r.dead || r.reinitialising || r.version < 0) return;
    const prompts = options.claim.promptsToClaim(claimPolicyNow(), r.owned, workload.groupSize);
    if (prompts === 0) return;
    const reqs = ctx.pool.claim(prompts, r.version);
    turns?.claimed(r, reqs);
    r.owned += reqs.length;
    r.actor.submit(reqs);
  }

  /** What the agent's serve loop does when a trajectory of `r` ended or a move left it. */
  function next(r: Rollout): void {
    if (r.inMove || r.dead || r.reinitialising) return;
    if (r.owned === 0) refill(r);
    else if (r.phase === 'generating' && !options.claim.mustEmptyFirst(claimPolicyNow(), r.owned, relayVersion[r.machine]! > r.version)) claim(r);
  }

  /** The rollout's engine is empty: newest version from its relay, then claim again. */
  function refill(r: Rollout): void {
    if (r.dead || r.reinitialising) return;
    const newest = relayVersion[r.machine] ?? -1;
    if (newest <= r.version) {
      claim(r);
      return;
    }
    r.phase = 'loading';
    const life = r.life;
    sim.after(loadMs, {
      fire: () => {
        if (r.life !== life) return;
        r.phase = 'generating';
        r.version = Math.max(r.version, newest);
        claim(r);
        placeOrphans();
      },
    });
  }

  function finished(r: Rollout, id: number): void {
    ctx.completed(id, trainerVersion);
    turns?.completed(r, id);
    const prompt = workload.promptOf(id);
    const promptTokens = workload.promptTokens(prompt);
    buffer.push({
      id,
      prompt,
      sampleIndex: id - prompt * workload.groupSize,
      groupSize: workload.groupSize,
      weightVersion: ctx.pool.versionOf(id),
      promptTokens,
      responseTokens: ctx.pool.tokensOf(id) - promptTokens,
      completedAtMs: sim.now,
    });
    r.owned--;
    next(r);
    maybeTrain();
  }

  function maybeTrain(): void {
    if (training || ctx.stepsDone >= ctx.steps) return;
    const ids = buffer.take(batchSize, trainerVersion);
    if (ids === null) return;
    training = true;
    failures.trainingStarts(ctx.stepsDone);
    const tokens = ctx.consume(ids, trainerVersion);
    sim.after(dataPlaneOverheadMs(scenario) + ctx.trainMs(ids), {
      fire: () => {
        trainerVersion++;
        ctx.stepEnded(tokens, ids.length);
        const version = trainerVersion;
        sim.after(pushToMasterMs(scenario), {
          fire: () => {
            training = false;
            publish(version);
            if (repackOn) repackRound();
            maybeTrain();
          },
        });
      },
    });
  }

  /** The master holds `version` now; each relay down the chain when the chunk model says. */
  function publish(version: number): void {
    chain.publish(version);
  }

  const limits = { cMax: scenario.manager.cMax, rooflineBatch: scenario.manager.rooflineBatch };
  const moveMs = scenario.manager.repackMoveS * 1e3;
  /** The previous round's KV use per rollout (the planner's C_prev), as the coordinator keeps it. */
  let kvAtLastRound = new Map<string, number>();

  function repackRound(): void {
    ctx.repack.rounds++;
    const round = options.round(
      live().map((r) => {
        const kvUsed = r.actor.load().kvUsed / cap;
        // One model per scenario; a simulated rollout reports no previous sample of its own, so
        // its current use stands in (the planner's rule: not ramping down until seen to fall).
        return {
          id: r.id,
          model: '',
          weightVersion: r.version,
          generating: r.phase === 'generating' && r.version >= 0,
          available: !r.inMove && !r.reinitialising,
          kvUsed,
          kvPrev: kvUsed,
          owned: r.owned,
        };
      }),
      kvAtLastRound,
      limits,
    );
    kvAtLastRound = round.kvAtThisRound;
    const byId = new Map(rollouts.map((r) => [r.id, r]));
    for (const group of round.groups) {
      if (dpAtTools) {
        // The manager's --planner dp: tool-call moves in place of Algorithm 1.
        const members = group.rollouts.map((g) => byId.get(g.id)!);
        const movedBefore = turns.stats.movedAtTools;
        ctx.repack.moves += turns.toolCallMoves(members, group.limits.rooflineBatch);
        ctx.repack.movedTrajectories += turns.stats.movedAtTools - movedBefore;
        continue;
      }
      for (const move of options.planner(group.rollouts, group.limits)) {
        const source = byId.get(move.source)!;
        // As the coordinator: a source that owns nothing only takes the newest weights.
        if (sourceIsEmpty(group, move)) refill(source);
        else startMove(source, byId.get(move.destination)!);
      }
    }
  }

  function startMove(source: Rollout, destination: Rollout): void {
    source.inMove = true;
    destination.inMove = true;
    // Mark first: finishes the drain reports (a step ending now) must not refill the source.
    const moved: LeapRequest[] = source.actor.drain();
    for (const req of moved) ctx.ledger.moveOut(req.id);
    source.owned -= moved.length;
    // The SDK's repack-out hands over every trajectory the source owns, those waiting at their
    // tools included (src/rollout/rollout-client.ts), and the planner counted them in its `owned`:
    // they come back from their calls to the destination (repackAtTools).
    const atTools = ctx.mechanisms.repackAtTools && ctx.tools !== null ? handOverAtTools(ctx.tools, source, destination) : 0;
    ctx.repack.movedTrajectories += atTools;
    ctx.movingNow += moved.length;
    ctx.repack.moves++;
    ctx.repack.movedTrajectories += moved.length;
    sim.after(moveMs, {
      fire: () => {
        for (const req of moved) ctx.ledger.moveIn(req.id);
        ctx.movingNow -= moved.length;
        if (destination.dead) {
          // It died during the move: what it was taking over is orphaned with the rest.
          failures.orphan(destination, moved);
        } else {
          destination.owned += moved.length;
          if (moved.length > 0) destination.actor.submit(moved);
        }
        source.inMove = false;
        destination.inMove = false;
        next(source);
        next(destination);
        ctx.audit();
      },
    });
  }

  /**
   * The trajectories of `source` waiting at their tools now come back to `destination`: they hold
   * nothing at any engine, so they move at once, their owned counts with them (the real move's
   * partial-pool traffic overlaps the call, as for the dp planner's tool-call moves). Returns how many.
   */
  function handOverAtTools(tools: ToolCallLoop, source: Rollout, destination: Rollout): number {
    let n = 0;
    for (const id of [...tools.atTool(source.actor)]) if (tools.relocate(id, source.actor, destination.actor)) n++;
    source.owned -= n;
    destination.owned += n;
    return n;
  }

  /** Rollouts alive (failed ones stay in `rollouts`, their engines' counters in the totals). */
  function live(): Rollout[] {
    return rollouts.filter((r) => !r.dead);
  }

  const failures = failuresOf(ctx, {
    rollouts,
    chain,
    addRollout,
    next,
    destination: options.orphanDestination,
    liveCount: () => live().length,
  });
  const placeOrphans = (): void => failures.placeOrphans();

  if (repackOn) {
    const intervalMs = scenario.manager.repackIntervalS * 1e3;
    const tick = {
      fire: (): void => {
        repackRound();
        sim.after(intervalMs, tick);
      },
    };
    sim.after(intervalMs, tick);
  }
  for (const r of rollouts) claim(r);
}
