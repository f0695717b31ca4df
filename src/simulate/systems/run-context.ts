/**
 * What every system's driver shares in one run: the simulation, the scenario's workload, the
 * prompt pool and ledger, the staleness histograms, the trainer's step records, and the result
 * (`ScenarioRunResult`) computed the same way for every system, so the systems differ only in their
 * mechanics (docs/design/simulator.md, "The five systems, mechanically").
 *
 * Throughput is the paper's: tokens (prompt + response) of the batches trained between the end of
 * the warm-up step and the last step, over the time between those actor-update completions.
 */
import { ErrorCodes, LaminarError } from '../../common/errors.js';
import type { EngineProfile } from '../../stand-ins/engine-core.js';
import { Simulation } from '../core/simulation.js';
import { EngineActor, type EngineActorOwner } from '../engine/engine-actor.js';
import type { LeapRequest } from '../engine/leap-engine.js';
import type { ChainRepair } from '../fleet/relay-chain.js';
import type { ToolSchedule } from '../agentic/tool-schedule.js';
import type { TurnScheduler } from '../agentic/turn-scheduler.js';
import { PromptPool } from '../fleet/prompt-pool.js';
import { ToolCallLoop, type SandboxProvisioning } from '../fleet/tool-calls.js';
import { Ledger, type LedgerTotals } from '../ledger.js';
import { ALL_MECHANISMS, type Mechanisms } from '../mechanisms.js';
import { StalenessHistogram, type StalenessSummary } from '../metrics/staleness.js';
import type { RunPlacement } from '../scenario/placement.js';
import type { Scenario, SystemName } from '../scenario/schema.js';
import { trainIterationMs, type TrainLayout } from '../trainer/parallel-step.js';
import { Workload } from '../workload/workload.js';

/** The systems built on verl, whose multi-turn rollout runs a replica's turns in lockstep (turnLockstep). */
const LOCKSTEP_SYSTEMS: readonly SystemName[] = ['one-step', 'stream', 'sync'];

export interface ScenarioRunResult {
  scenario: string;
  system: SystemName;
  gpus: number;
  placement: RunPlacement;
  steps: number;
  warmupSteps: number;
  /** Virtual seconds at the end of the last step. */
  virtualS: number;
  /** Actor-update completion time of each step, virtual seconds. */
  stepEndsS: number[];
  throughput: { tokensPerS: number; trajectoriesPerS: number };
  /** Tokens the engines decoded per second over the whole run (generation throughput). */
  generationTokensPerS: number;
  staleness: {
    inherent: StalenessSummary;
    consumption: StalenessSummary;
    /**
     * Inherent staleness by finish-time range (Figure 10's shape): entry v covers the
     * trajectories that completed while the trainer had produced v versions.
     */
    inherentByVersion: Omit<StalenessSummary, 'histogram'>[];
  };
  /** Time-weighted KV use over every rollout engine and the whole run, idle time counting as 0. */
  kvUtilisation: number;
  /**
   * The share of GPU time completely idle over the whole run (§2.3's measure): 1 − (every engine's
   * busy time × its TP + the trainer's training time × its GPUs) / (GPUs × run time). Weight
   * transfers count as idle; a colocated (sync) GPU is busy while it generates or trains.
   */
  idleGpuShare: number;
  /** prefillTokens: prompts and resumed trajectories' tokens prefilled (a resume re-prefills what it had generated). */
  engines: { count: number; kvCapacityTokens: number; preemptions: number; eventSteps: number; leapedSteps: number; prefillTokens: number };
  repack: { rounds: number; moves: number; movedTrajectories: number };
  /** Tool calls made (the tool-call task; 0 otherwise). */
  toolCalls: number;
  /**
   * With a tool-call schedule (issue #49): the schedule, calls that queued for a sandbox slot and
   * their mean wait, turns placed on another rollout (least load, tool-call moves), and the
   * remaining-length predictions' mean absolute error (null: none made). Absent without a schedule.
   */
  toolSchedule?: {
    schedule: ToolSchedule;
    sandboxSlots: number | null;
    queuedCalls: number;
    meanQueueWaitS: number;
    /** Mean action completion time: a call's latency plus its wait for a slot, s. */
    meanCallS: number;
    /** Calls executing at once on average over the run (Σ latency / run time): the tools' demand. */
    meanCallsInFlight: number;
    returnedElsewhere: number;
    movedAtTools: number;
    predictions: number;
    predictionMaeTokens: number | null;
  };
  /** The failures injected into this run, what each did, and the chain's repairs (empty without failures). */
  failures: FailureRecord[];
  chainRepairs: ChainRepair[];
  /** Per `run.reportWindowS` window, with failures injected (§8.5's timeline); null otherwise. */
  timeline: TimelineWindow[] | null;
  /**
   * With a machine failure: the same run without its failures, on the same windows (identical up
   * to the failure, to the event). §8.5's generation during the outage and after the replacement
   * are measured against it (report/failure-effect.ts). Null otherwise.
   */
  timelineWithoutFailures: TimelineWindow[] | null;
  ledger: LedgerTotals;
  /** Simulation events fired and the wall time of the run (performance.now around it). */
  events: number;
  wallMs: number;
}

/** One failure injected into a run (docs/design/simulator.md, "Failures"). */
export interface FailureRecord {
  kind: 'machine' | 'relay' | 'master' | 'rollout';
  atS: number;
  /** The machine (its relay and rollouts) or the rollout it hit. */
  machine: number | null;
  rollout: number | null;
  rolloutsLost: number;
  /** Trajectories its rollouts owned: orphaned, then resumed on a live rollout or returned to the prompt pool. */
  orphaned: number;
  resumed: number;
  returned: number;
  /** When the replacement machine (or the restarted relay, or the reinitialised rollout) came back, s. */
  backAtS: number | null;
}

export interface TimelineWindow {
  startS: number;
  endS: number;
  /** Tokens decoded by every engine in the window, per second. */
  generationTokensPerS: number;
  /** Tokens of the batches whose actor update completed in the window, per second. */
  trainingTokensPerS: number;
  /** Rollouts alive at the window's end. */
  rolloutsAlive: number;
}

export class RunContext {
  readonly sim = new Simulation();
  readonly workload: Workload;
  readonly ledger = new Ledger();
  readonly pool: PromptPool;
  readonly inherent = new StalenessHistogram();
  private readonly inherentByVersion: StalenessHistogram[] = [];
  readonly consumption = new StalenessHistogram();
  readonly actors: EngineActor[] = [];
  readonly repack = { rounds: 0, moves: 0, movedTrajectories: 0 };
  /** Trajectories taken out by repack moves that have not landed yet (the driver keeps it). */
  movingNow = 0;
  /** The multi-turn loop of the tool-call task (null for one-turn tasks). */
  readonly tools: ToolCallLoop | null;
  /** Issue #49's turn scheduling, set by the laminar driver when the run has a tool-call schedule. */
  turnScheduler: TurnScheduler | null = null;
  readonly failures: FailureRecord[] = [];
  chainRepairs: ChainRepair[] = [];
  timeline: TimelineWindow[] | null = null;
  /** Sample the timeline even without failures (the failure-free twin of a run with a machine failure). */
  sampleTimeline = false;
  private readonly stepEnds: number[] = [];
  private readonly stepTokens: number[] = [];
  private readonly stepTrajectories: number[] = [];
  /** Milliseconds the trainer has been given to train (every trainMs() is one training run). */
  private trainBusyMs = 0;

  constructor(
    readonly scenario: Scenario,
    readonly placement: RunPlacement,
    readonly profile: EngineProfile,
    readonly steps: number,
    readonly warmupSteps: number,
    readonly mechanisms: Mechanisms = ALL_MECHANISMS,
    /** How laminar schedules the tool-call task's turns (issue #49); null: as before it. */
    readonly toolSchedule: ToolSchedule | null = null,
  ) {
    this.workload = new Workload(scenario, mechanisms.groupLengthCorrelation);
    this.pool = new PromptPool(this.workload, this.ledger);
    // verl's batched multi-turn loop (mechanism turnLockstep) for the baselines built on it.
    const lockstep = mechanisms.turnLockstep && LOCKSTEP_SYSTEMS.includes(placement.system);
    this.tools = this.workload.toolCalls === null ? null : new ToolCallLoop(this.sim, this.workload, lockstep, this.provisioning());
  }

  /** The schedule's tool budget split per rollout (static) or pooled (elastic), equal in all; else the scenario's sandbox. */
  private provisioning(): SandboxProvisioning {
    const budget = this.toolSchedule?.tools.budget ?? null;
    if (budget === null) return { kind: 'shared', slots: this.workload.toolCalls?.sandboxSlots ?? null };
    const perRollout = Math.max(1, Math.round(budget / Math.max(1, this.placement.rollouts)));
    return this.toolSchedule!.tools.provisioning === 'static'
      ? { kind: 'per-engine', slots: perRollout }
      : { kind: 'shared', slots: perRollout * Math.max(1, this.placement.rollouts) };
  }

  get stepsDone(): number {
    return this.stepEnds.length;
  }

  /** A rollout engine; with tool calls, its owner hears of a trajectory only when its last turn completes. */
  addEngine(owner: EngineActorOwner): EngineActor {
    const tools = this.tools;
    let actor: EngineActor | null = null;
    const through: EngineActorOwner =
      tools === null
        ? owner
        : {
            finished: (id, atMs) => {
              if (!tools.turnEnded(actor!, id)) owner.finished(id, atMs);
              tools.turnSettled(actor!);
            },
          };
    if (tools !== null && owner.admitted) through.admitted = owner.admitted.bind(owner);
    if (tools !== null && owner.preempted) through.preempted = owner.preempted.bind(owner);
    actor = new EngineActor(this.sim, this.profile, through);
    this.actors.push(actor);
    return actor;
  }

  /** Everything `actor` holds, taken out: its engine's requests and those at their tool (a failure). */
  takeAll(actor: EngineActor): LeapRequest[] {
    const reqs = actor.drain();
    if (this.tools !== null) reqs.push(...this.tools.takeOut(actor));
    return reqs;
  }

  /** An orphan back to the prompt pool: claimed again later, from its first token. */
  giveBack(id: number): void {
    this.pool.giveBack(id);
    this.tools?.restart(id);
  }

  /** Tokens of the batches whose actor update completed in [fromMs, toMs). */
  trainedTokensBetween(fromMs: number, toMs: number): number {
    let tokens = 0;
    for (let i = 0; i < this.stepEnds.length; i++) if (this.stepEnds[i]! >= fromMs && this.stepEnds[i]! < toMs) tokens += this.stepTokens[i]!;
    return tokens;
  }

  /** A training step consumed `ids` at trainer version `version` (consumption staleness). */
  consume(ids: Int32Array, version: number): number {
    let tokens = 0;
    for (const id of ids) {
      this.ledger.consume(id);
      this.consumption.add(version - this.pool.versionOf(id));
      tokens += this.pool.tokensOf(id);
    }
    return tokens;
  }

  /** The trainer's layout for this run's system: AReaL's Megatron, the others' FSDP (null: none given). */
  get trainLayout(): TrainLayout | null {
    const t = this.scenario.trainer;
    if (this.placement.system === 'areal' && t.megatron !== null) return { kind: 'megatron', ...t.megatron };
    return t.layout === null ? null : { kind: 'fsdp', ...t.layout };
  }

  /**
   * The trainer's time for `ids` in `miniBatches` optimizer steps (default: the scenario's per
   * batch) on this run's trainer GPUs (trainer/parallel-step.ts).
   */
  trainMs(ids: Int32Array, miniBatches = this.scenario.workload.miniBatches): number {
    const lengths = new Float64Array(ids.length);
    for (let i = 0; i < ids.length; i++) lengths[i] = this.pool.tokensOf(ids[i]!);
    const ms = trainIterationMs(this.scenario, lengths, this.placement.trainGpus, miniBatches, this.trainLayout, this.mechanisms);
    this.trainBusyMs += ms;
    return ms;
  }

  /** A trajectory completed while the trainer had produced `trainerVersion` versions (inherent staleness). */
  completed(id: number, trainerVersion: number): void {
    this.ledger.complete(id);
    const staleness = trainerVersion - this.pool.versionOf(id);
    this.inherent.add(staleness);
    while (this.inherentByVersion.length <= trainerVersion) this.inherentByVersion.push(new StalenessHistogram());
    this.inherentByVersion[trainerVersion]!.add(staleness);
  }

  /** An actor update completed now, training `tokens` tokens of `trajectories`; stops the run after the last step. */
  stepEnded(tokens: number, trajectories: number): void {
    this.stepEnds.push(this.sim.now);
    this.stepTokens.push(tokens);
    this.stepTrajectories.push(trajectories);
    if (this.stepEnds.length >= this.steps) this.sim.stop();
  }

  /**
   * Conservation against the engines themselves, not only the ledger's own counts: every
   * trajectory the ledger has generating is held by exactly one engine (or finished in a step
   * whose end is not reported yet: the engines count it finished, the ledger not yet completed),
   * and every one it has moving is in a move in flight. A driver that drops a trajectory on the
   * floor or submits one twice breaks one of these. O(engines), so a driver can audit at every
   * repack move; `recount` adds the ledger's O(ids) recount (the end of a run).
   */
  audit(recount = false): LedgerTotals {
    const totals = recount ? this.ledger.check() : this.ledger.totals;
    let held = 0;
    let finished = 0;
    for (const a of this.actors) {
      held += a.engine.heldCount;
      finished += a.engine.stats.finished;
    }
    // A turn's end is a finish to the engine, not a completion; a trajectory at its tool is in no engine.
    const inCall = this.tools?.inCall ?? 0;
    const unreported = finished - (this.tools?.turnEnds ?? 0) - (totals.buffered + totals.consumed + totals.dropped);
    if (unreported < 0 || totals.generating !== held + unreported + inCall || totals.moving !== this.movingNow) {
      throw new LaminarError(
        ErrorCodes.INTERNAL,
        `simulator conservation: the ledger has ${totals.generating} generating and ${totals.moving} moving; the engines hold ${held} (+${unreported} finished, not yet reported, +${inCall} at a tool) and ${this.movingNow} are in moves`,
        { details: { ...totals, held, unreported, inCall, movingNow: this.movingNow } },
      );
    }
    return totals;
  }

  private toolScheduleResult(): ScenarioRunResult['toolSchedule'] {
    if (this.toolSchedule === null || this.tools === null) return undefined;
    const p = this.tools.provisioning;
    const { queued, queuedMs } = this.tools.queueing;
    const calls = this.tools.calls;
    const turns = this.turnScheduler;
    return {
      schedule: this.toolSchedule,
      sandboxSlots: p.slots === null ? null : p.kind === 'shared' ? p.slots : p.slots * this.placement.rollouts,
      queuedCalls: queued,
      meanQueueWaitS: queued > 0 ? queuedMs / queued / 1e3 : 0,
      meanCallS: calls > 0 ? (this.tools.callLatencyMs + queuedMs) / calls / 1e3 : 0,
      meanCallsInFlight: this.sim.now > 0 ? this.tools.callLatencyMs / this.sim.now : 0,
      returnedElsewhere: this.tools.returnedElsewhere,
      movedAtTools: turns?.stats.movedAtTools ?? 0,
      predictions: turns?.stats.predictions ?? 0,
      predictionMaeTokens: turns?.maeTokens ?? null,
    };
  }

  result(events: number, wallMs: number): ScenarioRunResult {
    const ledger = this.audit(true);
    const end = this.stepEnds[this.stepEnds.length - 1] ?? this.sim.now;
    const from = this.warmupSteps > 0 ? this.stepEnds[this.warmupSteps - 1]! : 0;
    let tokens = 0;
    let trajectories = 0;
    for (let i = this.warmupSteps; i < this.stepEnds.length; i++) {
      tokens += this.stepTokens[i]!;
      trajectories += this.stepTrajectories[i]!;
    }
    const spanS = (end - from) / 1e3;
    let kvTokenMs = 0;
    let decoded = 0;
    let preemptions = 0;
    let eventSteps = 0;
    let leapedSteps = 0;
    let prefillTokens = 0;
    let engineGpuBusyMs = 0;
    for (const a of this.actors) {
      a.engine.advanceTo(end);
      const st = a.engine.stats;
      kvTokenMs += st.kvTokenMs;
      decoded += st.tokens;
      preemptions += st.preemptions;
      eventSteps += st.eventSteps;
      leapedSteps += st.leapedSteps;
      prefillTokens += st.prefillTokens;
      engineGpuBusyMs += Math.min(st.busyMs, end) * this.placement.tp;
    }
    // The last step's training ends at `end`; a run stopped there has trained for at most that long.
    const gpuBusyMs = engineGpuBusyMs + Math.min(this.trainBusyMs, end) * this.placement.trainGpus;
    const cap = this.profile.kvCapacityTokens;
    return {
      scenario: this.scenario.name,
      system: this.placement.system,
      gpus: this.placement.gpus,
      placement: this.placement,
      steps: this.stepEnds.length,
      warmupSteps: this.warmupSteps,
      virtualS: end / 1e3,
      stepEndsS: this.stepEnds.map((t) => t / 1e3),
      throughput: { tokensPerS: spanS > 0 ? tokens / spanS : 0, trajectoriesPerS: spanS > 0 ? trajectories / spanS : 0 },
      generationTokensPerS: end > 0 ? decoded / (end / 1e3) : 0,
      staleness: {
        inherent: this.inherent.summary(),
        consumption: this.consumption.summary(),
        inherentByVersion: this.inherentByVersion.map((h) => {
          const { count, p50, p90, max, mean } = h.summary();
          return { count, p50, p90, max, mean };
        }),
      },
      kvUtilisation: end > 0 && this.actors.length > 0 ? kvTokenMs / (cap * this.actors.length * end) : 0,
      idleGpuShare: end > 0 ? Math.max(0, 1 - gpuBusyMs / (this.placement.gpus * end)) : 0,
      engines: { count: this.actors.length, kvCapacityTokens: cap, preemptions, eventSteps, leapedSteps, prefillTokens },
      repack: { ...this.repack },
      toolCalls: this.tools?.calls ?? 0,
      ...(this.toolSchedule === null ? {} : { toolSchedule: this.toolScheduleResult() }),
      failures: this.failures.map((f) => ({ ...f })),
      chainRepairs: this.chainRepairs,
      timeline: this.timeline,
      timelineWithoutFailures: null,
      ledger,
      events,
      wallMs,
    };
  }
}
