/**
 * The rollout SDK's engine contract (rollout/engine.ts) carried out over an inference server's
 * HTTP API: each trajectory this rollout generates is one streamed `generate` request, whose
 * tokens go into the task as they arrive (and from there to the partial pool) and whose end
 * completes the task with its reward.
 *
 * - stop(): aborts the requests (the HTTP stream is cut, which aborts them at the engine) and
 *   resolves once their streams have ended, so no token of theirs is appended afterwards.
 * - resume(): sends prompt + the tokens generated so far; with seeded sampling the engine
 *   continues token for token (requests.ts).
 * - A request the engine aborted on its own (a pause in abort mode) is sent again, continuing.
 * - The engine found unreachable (a request's connection refused or cut) is reported once to the
 *   agent, which takes the rollout out of the job until the engine is back (agent.ts).
 * - At most `maxAtEngine` requests at once (engine-slots.ts): a trajectory takes a place for each
 *   turn and gives it up at the turn's end, so one waiting at a tool call holds nothing at the
 *   engine; when its result is back it waits its turn, longest waiting first.
 * - With progressive priority (turn-priority.ts) each turn is predicted its trajectory's remaining
 *   time (tokens at the streams' decode rate plus tool calls at the tools' measured latency),
 *   which orders the line for a place and goes to the engine as the request's priority.
 */
import type { Logger } from 'pino';
import { delay } from '../common/concurrency.js';
import { ErrorCodes } from '../common/errors.js';
import type { EngineLoad, RolloutEngine, TrajectoryLoad } from '../rollout/engine.js';
import type { GenerationTask } from '../rollout/task.js';
import type { EngineClient, EngineLoadSample, FinishReason } from './engine-client.js';
import type { AfterTurn, Episodes } from './episode.js';
import { EngineSlots } from './engine-slots.js';
import type { ProgressivePriority } from './turn-priority.js';
import type { AgentMetrics } from './metrics.js';
import { alreadyFinished, promptOf, requestFor, type RequestDefaults } from './requests.js';
import { computeReward, type RewardFunction } from './rewards.js';
import type { TrajectoryAdapters } from './adapter-switch.js';

export interface HttpEngineHooks {
  /** The engine could not be reached during a request (called once per outage). */
  engineDown(err: Error): void;
  /** The manager asked for new weights. */
  updateWeights(version: number | null): Promise<void>;
  /** The manager asked for a rebuild of the engine. */
  reinitialise(): Promise<void>;
}

export interface HttpEngineOptions {
  client: EngineClient;
  defaults: RequestDefaults;
  reward: RewardFunction;
  metrics: AgentMetrics;
  hooks: HttpEngineHooks;
  /** KV capacity in tokens (from the engine's server info), for the load estimate when its metrics say nothing. */
  kvCapacityTokens: number | null;
  /** Tokens of one trajectory with a version other than its own are counted, not refused (partial rollout). */
  versionsMayMix: boolean;
  /** Multi-turn episodes with tool calls (episode.ts); absent: one request per trajectory. */
  episodes?: Episodes | null;
  /** Requests at the engine at once at most (the agent's `maxInFlight`); 0: no limit. */
  maxAtEngine?: number;
  /** Sequences the engine decodes at once (the heartbeat's `decodeBatch`, the dp planner's B); null: unknown. */
  decodeBatch?: number | null;
  /** Progressive priority: each turn's priority from its trajectory's predicted remaining length; absent: FCFS. */
  priorities?: ProgressivePriority | null;
  /** Told of each trajectory that ended here, before its record is written (the agent records its length). */
  finished?: (task: GenerationTask) => void;
  /** The LoRA adapter each trajectory runs with (adapter-switch.ts); absent: every request on the base. */
  adapters?: TrajectoryAdapters | null;
  log: Logger;
}

/**
 * Where an owned trajectory is: generating a turn at the engine; in line for a place there; or
 * between turns (at a tool call, or its turn's end being handled), holding nothing at the engine.
 */
type Place = 'engine' | 'in_line' | 'between_turns';

interface Running {
  task: GenerationTask;
  controller: AbortController;
  /** Resolves when the request's stream has ended and nothing more of it reaches the task. */
  done: Promise<void>;
  place: Place;
}

/** Codes with which the experience buffer refuses a record for good (the rest are retried: the store is away). */
const REFUSED_RECORDS: ReadonlySet<string> = new Set([
  ErrorCodes.BAD_TRAJECTORY,
  ErrorCodes.LENGTH_MISMATCH,
  ErrorCodes.NEGATIVE_LENGTH,
  ErrorCodes.FUTURE_VERSION,
  ErrorCodes.PAYLOAD_TOO_LARGE,
  ErrorCodes.UNKNOWN_GROUP,
  ErrorCodes.GROUP_MISMATCH,
  // A multi-turn trajectory whose segments do not describe its response: retried, the same
  // record is refused again (a moved trajectory was retried 43 times with ERR_SEGMENT_LENGTHS).
  ErrorCodes.BAD_SEGMENTS,
  ErrorCodes.SEGMENT_LENGTHS,
  ErrorCodes.TOO_MANY_SEGMENTS,
  ErrorCodes.OBSERVATION_LOGPROB,
]);

/** True when the experience buffer will never take the record `err` refused (retrying cannot help). */
export function refusedForGood(err: unknown): boolean {
  const code = (err as { code?: string } | null)?.code;
  return code !== undefined && REFUSED_RECORDS.has(code);
}

/** A request the engine fails with a 5xx this many times in a row is given up. */
const SERVER_ERROR_RETRIES = 3;

/** How long the token-rate window is. */
const RATE_WINDOW_MS = 2000;

export class HttpRolloutEngine implements RolloutEngine {
  private readonly running = new Map<string, Running>();
  private sample: EngineLoadSample = { kvUsed: null, running: null, waiting: null, tokensPerSecond: null };
  private readonly recent: { at: number; tokens: number }[] = [];
  private endWaiters: (() => void)[] = [];
  private closed = false;
  /** Completions on their way (close waits for them). */
  private readonly completing = new Set<Promise<void>>();

  private readonly slots: EngineSlots;

  constructor(private readonly options: HttpEngineOptions) {
    this.slots = new EngineSlots(options.maxAtEngine ?? 0);
  }

  /** Trajectories this engine session owns and runs: at the engine, in line for it, or between turns. */
  get inFlight(): number {
    return this.running.size;
  }

  /** Trajectories with a request at the engine now. */
  get atEngine(): number {
    return this.slots.inUse;
  }

  /** Trajectories between turns (at a tool call): they hold nothing at the engine. */
  get betweenTurns(): number {
    return this.running.size - this.slots.inUse - this.slots.waiting;
  }

  /** Trajectories in line for a place at the engine (their tool result is back, or they are new). */
  get inLine(): number {
    return this.slots.waiting;
  }

  /** Resolves when no trajectory is owned any more. */
  async idle(): Promise<void> {
    while (this.running.size > 0) await this.ended();
  }

  /**
   * Resolves when the next trajectory stops generating: it finished, was stopped or failed, or
   * its turn ended at a tool call (its place at the engine is free for other work); and when a
   * finished one's record is stored (the SDK no longer owns it).
   */
  ended(): Promise<void> {
    return new Promise((resolve) => this.endWaiters.push(resolve));
  }

  async tokenize(payload: unknown): Promise<Int32Array> {
    const prompt = promptOf(payload);
    try {
      return Int32Array.from('ids' in prompt ? prompt.ids : await this.options.client.tokenize(prompt.text));
    } catch (err) {
      if ((err as { code?: string }).code === ErrorCodes.BAD_PROMPT_PAYLOAD) this.options.metrics.badPayloads.inc();
      throw err;
    }
  }

  resume(tasks: readonly GenerationTask[]): Promise<void> {
    for (const task of tasks) this.start(task);
    return Promise.resolve();
  }

  async stop(tasks: readonly GenerationTask[]): Promise<void> {
    const stopping = tasks.map((t) => this.running.get(t.trajectoryId)).filter((r): r is Running => r !== undefined);
    for (const r of stopping) r.controller.abort();
    await Promise.all(stopping.map((r) => r.done));
  }

  /** Stops everything (the engine went away, or the agent shuts down). */
  stopAll(): Promise<void> {
    return this.stop([...this.running.values()].map((r) => r.task));
  }

  updateWeights(version: number | null): Promise<void> {
    return this.options.hooks.updateWeights(version);
  }

  reinitialise(): Promise<void> {
    return this.options.hooks.reinitialise();
  }

  load(): EngineLoad {
    const now = performance.now();
    while (this.recent.length > 0 && now - this.recent[0]!.at > RATE_WINDOW_MS) this.recent.shift();
    const ownRate = (this.recent.reduce((a, r) => a + r.tokens, 0) * 1000) / RATE_WINDOW_MS;
    return {
      kvUsed: this.sample.kvUsed ?? this.estimatedKvUsed(),
      running: this.sample.running ?? this.slots.inUse,
      waiting: this.sample.waiting ?? 0,
      tokensPerSecond: this.sample.tokensPerSecond ?? ownRate,
      ...(this.options.decodeBatch ? { decodeBatch: this.options.decodeBatch } : {}),
      // Only with predictions to place them by: a heartbeat listing hundreds of trajectories is
      // a cost every second, worth paying only for the manager's dp planner.
      ...(this.options.episodes && this.options.priorities ? { trajectories: this.trajectoryLoads() } : {}),
    };
  }

  /**
   * Multi-turn with progressive priority: what the manager's repack round needs of each
   * trajectory (the heartbeat carries it): its predicted remaining tokens, whether it waits at a
   * tool call, its request ended and its KV free, so that it moves at no cost but a re-prefill,
   * and its context length, which that re-prefill costs.
   */
  private trajectoryLoads(): TrajectoryLoad[] {
    const priorities = this.options.priorities ?? null;
    return [...this.running.values()].map(({ task, place }) => ({
      id: task.trajectoryId,
      predictedTokens: priorities?.current(task.trajectoryId)?.tokens ?? null, // null: not yet predicted
      atTool: place === 'between_turns' && task.waitingFor !== undefined,
      contextTokens: task.promptTokens.length + task.generated,
    }));
  }

  /**
   * Reads the engine's load from its metrics (the heartbeat reads the cached sample). False when
   * the engine could not be reached at all.
   */
  async refreshLoad(): Promise<boolean> {
    try {
      this.sample = await this.options.client.load();
      return true;
    } catch (err) {
      // The engine is away or has no metrics: the estimate from our own requests stands in.
      this.sample = { kvUsed: null, running: null, waiting: null, tokensPerSecond: null };
      return (err as { code?: string }).code !== ErrorCodes.ENGINE_UNAVAILABLE;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.stopAll();
    await Promise.allSettled([...this.completing]);
  }

  /** Read through a call: close() may run while a request awaits (TS would keep a narrowing of the field). */
  private isClosed(): boolean {
    return this.closed;
  }

  /** KV in use by our requests (prompt + response so far) as a share of the engine's capacity. */
  private estimatedKvUsed(): number {
    const capacity = this.options.kvCapacityTokens;
    if (!capacity) return 0;
    let tokens = 0;
    for (const r of this.running.values()) if (r.place === 'engine') tokens += r.task.promptTokens.length + r.task.generated;
    return Math.min(1, tokens / capacity);
  }

  private start(task: GenerationTask): void {
    if (this.running.has(task.trajectoryId)) return;
    const controller = new AbortController();
    const entry: Running = { task, controller, done: Promise.resolve(), place: 'between_turns' };
    this.running.set(task.trajectoryId, entry);
    entry.done = this.generate(entry).finally(() => {
      this.leaveEngine(entry);
      // Gone unfinished (stopped, moved, refused): its predictions are dropped (a finished one's are scored already).
      this.options.priorities?.left(task.trajectoryId);
      this.options.adapters?.done(task.trajectoryId);
      if (this.running.get(task.trajectoryId) === entry) this.running.delete(task.trajectoryId);
      this.notifyEnded();
    });
  }

  private notifyEnded(): void {
    const ended = this.endWaiters;
    this.endWaiters = [];
    for (const w of ended) w();
  }

  /** Waits in line for a place at the engine; false when the trajectory was stopped meanwhile. */
  private async takePlace(entry: Running, priority: number): Promise<boolean> {
    if (entry.place === 'engine') return true;
    entry.place = 'in_line';
    const admitted = await this.slots.acquire(entry.controller.signal, priority);
    entry.place = admitted ? 'engine' : 'between_turns';
    return admitted;
  }

  /** Gives up the trajectory's place at the engine (its turn ended, or it did), to the next in line. */
  private leaveEngine(entry: Running): void {
    if (entry.place === 'engine') this.slots.release();
    entry.place = 'between_turns';
  }

  /** One trajectory to its end: streamed, sent again if the engine aborted it, then completed. */
  private async generate(entry: Running): Promise<void> {
    const { task, controller } = entry;
    const { client, metrics, log } = this.options;
    const version = String(task.weightVersion);
    // The versions the engine reported for this trajectory's tokens (more than one only with partial rollout).
    const versions = new Set([version]);
    let serverErrors = 0;
    const episodes = this.options.episodes ?? null;
    // The adapter of its version, for every turn (null: the base). The engine then reports the base's weight version.
    const lora = this.options.adapters?.use(task.trajectoryId, task.weightVersion) ?? null;
    for (;;) {
      // Predicted at the turn boundary, before the wait for a place (the line is ordered by it).
      const priority = this.options.priorities?.priorityOf(task, episodes?.maxTurns(task)) ?? null;
      if (!(await this.takePlace(entry, priority ?? 0))) {
        metrics.requests.inc({ result: 'stopped' });
        return;
      }
      const request = { ...requestFor(task, this.options.defaults, episodes?.stopTokenIds), priority, ...(lora !== null ? { lora } : {}) };
      let finish: FinishReason | null = alreadyFinished(task, request, episodes?.stopTokenIds);
      if (finish === null) {
        // The stream's decode time for progressive priority: from its first chunk to its last,
        // so that neither the wait in the engine's queue nor the prefill counts.
        let firstChunkAt = -1;
        let lastChunkAt = -1;
        let tokensAfterFirst = 0;
        try {
          const result = await client.generate(request, {
            signal: controller.signal,
            onTokens: (tokens, logprobs, weightVersion) => {
              if (controller.signal.aborted) return;
              if (lora === null && weightVersion !== null && weightVersion !== version) {
                versions.add(weightVersion);
                metrics.versionMismatches.inc(tokens.length);
                if (!this.options.versionsMayMix)
                  log.error({ trajectory: task.trajectoryId, expected: version, got: weightVersion }, 'the engine generated with another weight version');
              }
              if (!task.append(tokens, logprobs)) {
                // Another rollout took the trajectory (this one was declared dead and came back).
                controller.abort();
                return;
              }
              metrics.tokens.inc(tokens.length);
              const now = performance.now();
              this.recent.push({ at: now, tokens: tokens.length });
              if (firstChunkAt < 0) firstChunkAt = now;
              else tokensAfterFirst += tokens.length;
              lastChunkAt = now;
            },
          });
          finish = result.finishReason;
          if (tokensAfterFirst > 0) this.options.priorities?.decoded(tokensAfterFirst, lastChunkAt - firstChunkAt);
        } catch (err) {
          if (controller.signal.aborted) {
            metrics.requests.inc({ result: 'stopped' });
            return;
          }
          const code = (err as { code?: string }).code ?? ErrorCodes.INTERNAL;
          metrics.requests.inc({ result: 'failed' });
          metrics.engineErrors.inc({ code });
          if (code === ErrorCodes.ENGINE_UNAVAILABLE) {
            this.options.hooks.engineDown(err as Error);
            return;
          }
          const status = (err as { details?: { status?: number } }).details?.status;
          if (status !== undefined && status >= 500 && ++serverErrors <= SERVER_ERROR_RETRIES) {
            // The engine's own trouble (503 while it loads, an internal error): try again shortly.
            log.warn({ trajectory: task.trajectoryId, status, attempt: serverErrors, err: (err as Error).message }, 'the engine failed a request (retrying)');
            await delay(500 * serverErrors);
            if (this.isClosed() || aborted(controller.signal)) return;
            continue;
          }
          // The engine refused this request (too long for its context, a bad sampling field):
          // the trajectory stays in the partial pool; the SDK's reconciliation offers it again.
          log.error({ trajectory: task.trajectoryId, code, err: (err as Error).message }, 'the engine refused a trajectory');
          return;
        }
      }
      if (controller.signal.aborted || !task.active) {
        metrics.requests.inc({ result: 'stopped' });
        return;
      }
      metrics.requests.inc({ result: finish });
      if (finish === 'abort') {
        // Aborted by the engine (a pause in abort mode, an operator): continue where it stopped.
        await delay(100);
        // stop() may have aborted it meanwhile: read the signal again (through a call, past TS's narrowing).
        if (this.isClosed() || aborted(controller.signal)) return;
        continue;
      }
      if (episodes) {
        const after = await this.turnBoundary(entry, episodes, finish);
        if (after.next === 'gone') return;
        if (after.next === 'generate') {
          if (after.logged) this.stopIfUnlogged(entry, after.logged);
          continue;
        }
        finish = after.finish;
      }
      this.options.priorities?.finished(task);
      this.options.finished?.(task);
      const completion = this.complete(task, finish, versions, request.sampling.stopTokenIds);
      this.completing.add(completion);
      // The SDK lets go of the task only once its record is stored: the agent's serve loop, which
      // bounds what it owns by the SDK's count, hears of it then too.
      void completion.finally(() => {
        this.completing.delete(completion);
        this.notifyEnded();
      });
      return;
    }
  }

  /**
   * A turn ended: the episode decides what follows (episode.ts). A failure there (the action
   * service or the engine's tokenizer away) leaves the trajectory in the partial pool, where the
   * SDK's reconciliation offers it again.
   */
  private async turnBoundary(entry: Running, episodes: Episodes, finish: FinishReason): Promise<AfterTurn> {
    const { task, controller } = entry;
    // Nothing of it at the engine until its next turn: the place goes to the next in line, and
    // the agent's serve loop hears of the room (it may claim new work for it).
    this.leaveEngine(entry);
    this.notifyEnded();
    try {
      return await episodes.afterTurn(task, finish, controller.signal);
    } catch (err) {
      if (controller.signal.aborted) return { next: 'gone' };
      const code = (err as { code?: string }).code ?? ErrorCodes.INTERNAL;
      this.options.metrics.engineErrors.inc({ code });
      if (code === ErrorCodes.ENGINE_UNAVAILABLE) this.options.hooks.engineDown(err as Error);
      else
        this.options.log.error(
          { trajectory: task.trajectoryId, code, err: (err as Error).message },
          'a turn boundary failed: the trajectory stays in the partial pool',
        );
      return { next: 'gone' };
    }
  }

  /**
   * The next turn started with its observation still being logged: if the log fails (the store
   * away past its retries), the turn is stopped and the trajectory stays in the partial pool, as
   * when a turn boundary fails; if another rollout took the trajectory, the task refuses the
   * turn's tokens and the request stops so.
   */
  private stopIfUnlogged(entry: Running, logged: Promise<boolean>): void {
    logged.catch((err: unknown) => {
      if (entry.controller.signal.aborted) return;
      const code = (err as { code?: string }).code ?? ErrorCodes.INTERNAL;
      this.options.metrics.engineErrors.inc({ code });
      this.options.log.error(
        { trajectory: entry.task.trajectoryId, code, err: (err as Error).message },
        'an observation could not be logged: the trajectory stays in the partial pool',
      );
      entry.controller.abort();
    });
  }

  /** Rewards and completes a finished trajectory, retrying through store outages (the task stays ours meanwhile). */
  private async complete(task: GenerationTask, finish: FinishReason, versions: ReadonlySet<string>, stopTokenIds: readonly number[]): Promise<void> {
    const { metrics, log } = this.options;
    let reward: number;
    try {
      reward = await computeReward(this.options.reward, {
        trajectoryId: task.trajectoryId,
        payload: task.payload,
        promptTokens: Array.from(task.promptTokens),
        responseTokens: Array.from(task.generatedTokens),
        finishReason: finish,
        stopTokenIds,
        ...(task.segments.length > 0 ? { segments: task.segments } : {}),
      });
    } catch (err) {
      metrics.rewardFailures.inc();
      log.error({ trajectory: task.trajectoryId, err: (err as Error).message }, 'no reward: the trajectory stays in the partial pool');
      return;
    }
    metrics.turns.observe(Math.max(1, task.segments.filter((s) => s.kind === 'generated').length));
    for (let attempt = 0; !this.closed || attempt === 0; attempt++) {
      try {
        const info: Record<string, string> = { finish_reason: finish };
        if (versions.size > 1) info.versions = [...versions].join(',');
        await task.complete({ reward, info });
        return;
      } catch (err) {
        if (refusedForGood(err)) {
          const code = (err as { code: string }).code;
          // The buffer will never take this record (its group is not in this job's prompt pool,
          // it breaks the schema): retrying cannot help. It stays in the partial pool, said loudly.
          metrics.engineErrors.inc({ code });
          log.error(
            { trajectory: task.trajectoryId, code, err: (err as Error).message },
            'the experience buffer refuses the trajectory; it stays in the partial pool',
          );
          return;
        }
        log.warn({ trajectory: task.trajectoryId, attempt, err: (err as Error).message }, 'completion failed (retrying)');
        await delay(Math.min(5000, 200 * 2 ** attempt));
      }
    }
  }
}

function aborted(signal: AbortSignal): boolean {
  return signal.aborted;
}
