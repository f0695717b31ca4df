/**
 * The rollout SDK: what an inference engine links with to take part in a laminar job.
 *
 *   const rollout = await RolloutClient.connect({ nc, redis, id: 'rollout-3', model, engine, relaySocket });
 *   const weights = await rollout.acquireWeights();     // latest version from the local relay
 *   for (const task of await rollout.claim(8)) ...      // prompts -> GenerationTasks (n per prompt)
 *   task.append(tokens, logprobs); await task.complete({ reward });
 *
 * The client registers with the manager and heartbeats the engine's load (the repack planner's
 * input), and carries out the manager's commands through the engine's hooks (engine.ts):
 * repack-out (stop, flush, hand over), repack-in (take over from the partial pool, resume),
 * update-weights and reinitialise.
 *
 * A claimed prompt becomes n trajectories started in the partial pool, after which the claim is
 * completed: from then on the partial pool is where the work lives, and failover or repack move
 * it from there. Trajectory ids derive from the claim (ids.ts), so nothing is generated twice.
 *
 * Parts: local-relay.ts (the connection to the host's relay, where weights come from),
 * ownership.ts (what this rollout owns in the partial pool, take-overs and reconciliation),
 * task.ts (one trajectory). This file holds the client's state (weight version, tasks, engine
 * state), claims, and the manager's commands, which run one at a time.
 *
 * The engine state the manager sees (and the repack planner selects on: only `generating`
 * rollouts are repacked) is the SDK's to keep, so that an engine written as the docs show never
 * sets it: `loading` while weights are acquired and loaded, `reinitialising` during a reinitialise,
 * else `generating` while the rollout holds trajectories and `idle` when it holds none (settle()).
 */
import { hostname } from 'node:os';
import { variantModelId, type WeightsVariant } from '../relay/fp8/model-id.js';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { ErrorCodes, LaminarError } from '../common/errors.js';
import { InFlight } from '../common/concurrency.js';
import { silentLogger } from '../common/logger.js';
import { createRegistry } from '../common/metrics.js';
import { MemberAgent } from '../control/member-agent.js';
import { MAX_REPORTED_TRAJECTORIES, type Command, type RolloutLoad } from '../control/schema.js';
import {
  PARKED_OWNER,
  type ExperienceWriter,
  type PartialPool,
  type PartialState,
  type PartialTrajectory,
  type PromptClaim,
  type PromptPool,
} from '../data/index.js';
import type { Lease, RelayClient } from '../relay/client/index.js';
import type { EngineLoad, RolloutEngine } from './engine.js';
import { trajectoryIdOf } from './ids.js';
import { LocalRelay } from './local-relay.js';
import { RolloutMetrics } from './metrics.js';
import { Ownership, type ResumeOutcome } from './ownership.js';
import { GenerationTask, type TaskOutcome } from './task.js';

export class RolloutError extends LaminarError {}

export interface RolloutClientOptions {
  nc: NatsConnection;
  job: string;
  id: string;
  model: string;
  engine: RolloutEngine;
  prompts: PromptPool;
  partials: PartialPool;
  writer: ExperienceWriter;
  /** The local relay's socket; weights come from there. Null: the engine gets weights itself. */
  relaySocket?: string | null;
  host?: string;
  labels?: Record<string, string>;
  heartbeatMs?: number;
  /** Replicas of the control bucket if this client creates it (3 on a NATS cluster). */
  replicas?: number;
  /** Prompt lease while its samples are being started (short: it is completed at once). */
  claimLeaseMs?: number;
  /**
   * How often the rollout compares what the partial pool says it owns with what it generates
   * (default 15 s; 0: never). A trajectory owned here but not generated, seen twice in a row, is
   * resumed (same weight version) or returned to the prompt pool: a repack that failed halfway
   * leaves nothing stranded.
   */
  reconcileMs?: number;
  registry?: Registry;
  logger?: Logger;
}

export type RolloutState = RolloutLoad['state'];

export interface AcquireWeightsOptions {
  atLeast?: number;
  timeoutMs?: number;
  signal?: AbortSignal;
  /**
   * Which weights the engine loads: the version as published (`bf16`, the default) or its FP8
   * variant, which the relay makes on request (`<model>@fp8`, src/relay/fp8/variants.ts). The
   * version number is the same either way.
   */
  weights?: WeightsVariant;
  /**
   * Loads the leased version into the engine before it becomes the rollout's version. When it
   * throws, the lease is released, the version in use does not change, and the error is rethrown.
   */
  load?: (lease: Lease) => Promise<void>;
}

export interface AcquiredWeights {
  version: number;
  /** The relay lease: the shared-memory view of the tensors; release it once the engine has loaded them. */
  lease: Lease;
}

export class RolloutClient {
  readonly id: string;
  readonly metrics: RolloutMetrics;
  private readonly agent: MemberAgent;
  private readonly tasks = new Map<string, GenerationTask>();
  private readonly log: Logger;
  /** The host's relay (null: the engine gets weights itself). */
  private readonly relay: LocalRelay | null;
  private readonly ownership: Ownership;
  /** Claims on their way (close waits for them). */
  private readonly claiming = new InFlight();
  /**
   * A weight version change and a resume of trajectories never overlap (a trajectory keeps one
   * version from its first token to its last): an acquire waits for a resume in flight
   * (ownership.resuming); during an acquire a repack-in is refused, a reconciliation skipped, and
   * a reinitialise waits.
   */
  private readonly loads = new InFlight();
  private weightVersion: number | null = null;
  private weightError: RolloutLoad['weightError'] = undefined;
  private state: RolloutState = 'idle';
  private kvPrev = 0;
  /** Commands run one at a time: a repack must not interleave with a reinitialise. */
  private commandChain: Promise<unknown> = Promise.resolve();
  private closed = false;
  private reconcileTimer: NodeJS.Timeout | null = null;
  private readonly taskHost: ConstructorParameters<typeof GenerationTask>[0];

  private constructor(private readonly options: RolloutClientOptions) {
    this.id = options.id;
    this.taskHost = {
      rolloutId: options.id,
      partials: options.partials,
      released: (task: GenerationTask, outcome: TaskOutcome | 'handed-over' | 'returned'): void => {
        this.tasks.delete(task.trajectoryId);
        this.ownership.taskLeft(task.trajectoryId, outcome === 'handed-over');
        this.metrics.tasks.inc({ outcome });
        this.metrics.owned.set(this.tasks.size);
        // The last trajectory done: idle (unless loading or reinitialising, which end by themselves).
        if (this.tasks.size === 0) this.settle();
      },
      returnToPool: (task, partial, reason) => this.ownership.returnToPool(partial, task, reason),
    };
    this.log = (options.logger ?? silentLogger).child({ component: 'rollout', rollout: options.id });
    this.metrics = new RolloutMetrics(options.registry ?? createRegistry({ defaultMetrics: false }));
    this.relay = options.relaySocket
      ? new LocalRelay({
          socketPath: options.relaySocket,
          name: `rollout ${options.id}`,
          log: this.log,
          closed: () => this.closed,
          closedError: () => new RolloutError(ErrorCodes.CLOSED, 'the rollout client is closed'),
          weightVersion: () => this.weightVersion,
        })
      : null;
    this.ownership = new Ownership({
      rolloutId: options.id,
      partials: options.partials,
      prompts: options.prompts,
      metrics: this.metrics,
      log: this.log,
      tasks: this.tasks,
      weightVersion: () => this.weightVersion,
      adopt: (partial, state) => this.adopt(partial, state),
      resume: async (tasks) => {
        this.state = 'generating';
        await this.options.engine.resume(tasks);
      },
    });
    this.agent = new MemberAgent({
      nc: options.nc,
      job: options.job,
      id: options.id,
      kind: 'rollout',
      host: options.host ?? hostname(),
      labels: options.labels ?? {},
      heartbeatMs: options.heartbeatMs ?? 1000,
      ...(options.replicas !== undefined ? { replicas: options.replicas } : {}),
      state: () => ({ epoch: null, holds: [], receiving: [], downstream: null }),
      rolloutLoad: () => this.load(),
      onCommand: (command) => this.onCommand(command),
      onBadInput: (code) => this.metrics.rejected.inc({ code }),
      logger: this.log,
    });
  }

  static async connect(options: RolloutClientOptions): Promise<RolloutClient> {
    const client = new RolloutClient(options);
    await client.relay?.start();
    client.agent.start();
    const every = options.reconcileMs ?? 15_000;
    if (every > 0) {
      client.reconcileTimer = setInterval(() => {
        client.commandChain = client.commandChain.catch(() => undefined).then(() => client.reconcile());
      }, every);
      client.reconcileTimer.unref();
    }
    return client;
  }

  /** Weight version in use (null before the first acquire). */
  get version(): number | null {
    return this.weightVersion;
  }

  get owned(): ReadonlyMap<string, GenerationTask> {
    return this.tasks;
  }

  get registered(): boolean {
    return this.agent.isRegistered;
  }

  /** close() has run: no heartbeats, claims or commands any more. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** What the engine is doing, as the manager sees it (and as the SDK keeps it: see the top of this file). */
  get engineState(): RolloutState {
    return this.state;
  }

  /**
   * Overrides the state the SDK keeps, for an engine that knows better for a while (an engine
   * that holds trajectories but is paused, say `idle`, so that the repack planner leaves it out).
   * Not needed otherwise: the SDK's next change of its own (a load, a claim, the last trajectory
   * done, a command) replaces it.
   */
  setState(state: RolloutState): void {
    this.state = state;
  }

  /** Out of a transition (or when the tasks changed): `generating` while it holds trajectories, else `idle`. */
  private settle(): void {
    if (this.loads.size > 0 || this.state === 'reinitialising') return;
    this.state = this.tasks.size > 0 ? 'generating' : 'idle';
  }

  /**
   * The latest version of the model from the local relay (waiting up to `timeoutMs` for one at
   * least `atLeast`), recorded as the version in use. The engine loads the tensors from the lease
   * and releases it.
   */
  async acquireWeights(options: AcquireWeightsOptions = {}): Promise<AcquiredWeights> {
    const local = this.relay;
    if (!local)
      throw new RolloutError(ErrorCodes.NO_WEIGHTS, 'this rollout has no local relay (relaySocket); use setWeightVersion() after loading weights yourself');
    const resuming = this.ownership.resuming;
    if (resuming) {
      const resumed = (await resuming.catch(() => null))?.taken ?? 0;
      if (resumed > 0) {
        throw new RolloutError(
          ErrorCodes.ROLLOUT_BUSY,
          `${resumed} trajectories of version ${this.weightVersion} were resumed here while new weights were asked for: generate them first`,
        );
      }
    }
    const started = performance.now();
    this.state = 'loading';
    const load = local.acquire({
      model: variantModelId(this.options.model, options.weights ?? 'bf16'),
      atLeast: options.atLeast ?? 0,
      timeoutMs: options.timeoutMs ?? 60_000,
      ...(options.signal ? { signal: options.signal } : {}),
    });
    let relay: RelayClient;
    let lease: Lease;
    try {
      ({ relay, lease } = await this.loads.track(
        load.then(async (acquired) => {
          if (!options.load) return acquired;
          // The engine loads inside the tracked load: a repack-in or a reconciliation never
          // sees the new version before the engine holds it, nor after it refused it.
          try {
            await options.load(acquired.lease);
          } catch (err) {
            await acquired.lease.release().catch(() => undefined);
            throw err;
          }
          return acquired;
        }),
      ));
    } catch (err) {
      const code = (err as { code?: string }).code ?? ErrorCodes.INTERNAL;
      this.metrics.weightAcquireFailures.inc({ code });
      local.failed(err as Error);
      // Whether the relay or the engine failed, the rollout goes on with what it had.
      this.settle();
      throw err;
    }
    local.succeeded(relay, lease.version);
    this.setWeightVersion(lease.version);
    this.settle();
    this.metrics.weightLoadSeconds.observe((performance.now() - started) / 1e3);
    return { version: lease.version, lease };
  }

  /**
   * A version the engine refused to load (null: the last load succeeded). The manager shows it
   * beside the rollout in its status until a load succeeds.
   */
  reportWeightError(error: { version: number; code: string; message: string } | null): void {
    this.weightError = error;
  }

  /** Records the weight version the engine now generates with (reported to the manager). */
  setWeightVersion(version: number): void {
    this.weightVersion = version;
    this.metrics.weightVersion.set(version);
  }

  /**
   * Claims up to `prompts` prompts and starts their samples in the partial pool, with the weight
   * version in use. Samples already started or completed elsewhere (a re-claimed prompt) are
   * skipped. Returns the tasks to generate.
   */
  async claim(prompts: number): Promise<GenerationTask[]> {
    if (this.closed) throw new RolloutError(ErrorCodes.CLOSED, 'the rollout client is closed');
    const version = this.weightVersion;
    if (version === null) throw new RolloutError(ErrorCodes.NO_WEIGHTS, 'acquire weights before claiming prompts');
    return this.claiming.track(
      (async () => {
        const claims = await this.options.prompts.claim(this.id, prompts, this.options.claimLeaseMs ?? 60_000);
        const started = (await Promise.all(claims.map((claim) => this.startClaim(claim, version)))).flat();
        // Trajectories held: generating (the engine is handed them next).
        this.settle();
        return started;
      })(),
    );
  }

  /** Stops, hands over and closes; the tasks stay in the partial pool for the manager to move. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.reconcileTimer) clearInterval(this.reconcileTimer);
    await this.agent.close();
    // A claim on its way starts its samples and completes its prompt claim before close returns:
    // cut in between, the prompt would wait for its lease to run out before it is claimed again.
    await this.claiming.settled();
    // A completion on its way (record to the buffer, then out of the partial pool) finishes
    // before close returns: the caller closes the pools and drains NATS next, which would cut
    // it between its steps and leave the trajectory for the manager to sort out.
    await Promise.allSettled([...this.tasks.values()].map((t) => t.settled()));
    await Promise.allSettled([...this.tasks.values()].map((t) => t.flush()));
    this.relay?.close();
  }

  // ---- claims ------------------------------------------------------------------------------

  private async startClaim(claim: PromptClaim & { samples?: number[] }, version: number): Promise<GenerationTask[]> {
    let promptTokens: Int32Array;
    try {
      promptTokens = await this.options.engine.tokenize(claim.payload);
    } catch (err) {
      if ((err as { code?: string }).code !== ErrorCodes.BAD_PROMPT_PAYLOAD) throw err;
      // A payload the engine can never take would come back every time its lease expired: it is
      // completed (taken out of the pool) and said loudly instead.
      this.log.error({ prompt: claim.id, err: (err as Error).message }, 'prompt dropped: its payload cannot be generated');
      this.metrics.tasks.inc({ outcome: 'bad-prompt' }, claim.n);
      await this.options.prompts.complete(claim).catch(() => undefined);
      return [];
    }
    const samples = claim.samples ?? Array.from({ length: claim.n }, (_, i) => i);
    const createdAt = Date.now();
    // Samples start concurrently: a batch of hundreds would otherwise wait on as many round trips.
    const results = await Promise.allSettled(samples.map((sampleIndex) => this.startSample(claim, sampleIndex, version, promptTokens, createdAt)));
    const started = results.flatMap((r) => (r.status === 'fulfilled' && r.value !== null ? [r.value] : []));
    this.metrics.owned.set(this.tasks.size);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      // Not completed: the lease expires, the prompt is claimed again and only the samples that
      // did not start are started then (the others are skipped by id).
      this.log.warn({ prompt: claim.id, err: (failed.reason as Error).message }, 'some samples did not start; the prompt returns when its lease expires');
      return started;
    }
    // Every sample lives in the partial pool now: the prompt's claim is done.
    await this.options.prompts.complete(claim).catch((err: unknown) => {
      // A lease lost meanwhile: whoever claims the prompt again skips these samples by id.
      const e = err as Error & { code?: string };
      this.log.warn({ prompt: claim.id, code: e.code, err: e.message }, 'prompt claim not completed');
    });
    return started;
  }

  private async startSample(
    claim: PromptClaim,
    sampleIndex: number,
    version: number,
    promptTokens: Int32Array,
    createdAt: number,
  ): Promise<GenerationTask | null> {
    const trajectoryId = trajectoryIdOf(claim.groupId, sampleIndex);
    if (await this.options.writer.has(trajectoryId)) {
      this.metrics.tasks.inc({ outcome: 'skipped' });
      return null;
    }
    const start = {
      trajectoryId,
      promptId: claim.id,
      groupId: claim.groupId,
      sampleIndex,
      groupSize: claim.n,
      weightVersion: version,
      promptLength: promptTokens.length,
      promptTokens: new Uint8Array(promptTokens.buffer, promptTokens.byteOffset, promptTokens.byteLength),
      payload: claim.payload,
      createdAt,
    };
    let partial;
    try {
      partial = await this.ownership.write(trajectoryId, () => this.options.partials.start(this.id, start));
    } catch (err) {
      if ((err as { code?: string }).code !== ErrorCodes.TRAJECTORY_EXISTS) throw err;
      try {
        // The manager gave up on this sample's old version and parked it: start it afresh, in
        // one step (a crash cannot leave it in neither pool).
        partial = await this.ownership.write(trajectoryId, () => this.options.partials.restart(this.id, start, { from: PARKED_OWNER }));
      } catch (err2) {
        if ((err2 as { code?: string }).code !== ErrorCodes.NOT_OWNER) throw err2;
        // Another rollout generates it (this prompt was claimed before): not ours.
        this.ownership.notOurs(trajectoryId);
        this.metrics.tasks.inc({ outcome: 'skipped' });
        return null;
      }
    }
    const task = new GenerationTask(this.taskHost, partial, { ...start, promptTokens, groupLastLength: claim.lastLength });
    this.tasks.set(trajectoryId, task);
    this.metrics.tasks.inc({ outcome: 'started' });
    return task;
  }

  // ---- commands ----------------------------------------------------------------------------

  private onCommand(command: Command): Promise<Record<string, unknown> | undefined> | undefined {
    if (command.t === 'reregister' || command.t === 'load') return;
    const run = async (): Promise<Record<string, unknown> | undefined> => {
      const started = performance.now();
      try {
        const result = await this.execute(command);
        this.metrics.commands.inc({ command: command.t, result: 'done' });
        return result;
      } catch (err) {
        this.metrics.commands.inc({ command: command.t, result: (err as { code?: string }).code ?? ErrorCodes.INTERNAL });
        throw err;
      } finally {
        this.metrics.commandSeconds.observe({ command: command.t }, (performance.now() - started) / 1e3);
      }
    };
    const next = this.commandChain.catch(() => undefined).then(run);
    this.commandChain = next;
    return next;
  }

  private async execute(command: Command): Promise<Record<string, unknown> | undefined> {
    switch (command.t) {
      case 'repack-out':
        return this.repackOut(command.to, command.version, command.trajectories);
      case 'repack-in':
        return this.repackIn(command.from, command.version, command.trajectories);
      case 'update-weights':
        await this.options.engine.updateWeights(command.version);
        return;
      case 'reinitialise':
        return this.reinitialise(command.reason);
      default:
        return;
    }
  }

  /**
   * Stops everything this rollout generates (or only the trajectories `only` lists: a tool-call
   * move, the rest goes on), stores every token, and lets go of it.
   */
  private async repackOut(to: string, version: number, only?: readonly string[]): Promise<{ moved: string[] }> {
    if (this.weightVersion !== version) {
      throw new RolloutError(ErrorCodes.VERSION_MISMATCH, `repack-out for version ${version}, but ${this.id} generates with ${this.weightVersion}`);
    }
    const tasks = only === undefined ? [...this.tasks.values()] : only.flatMap((id) => this.tasks.get(id) ?? []);
    await this.options.engine.stop(tasks);
    await Promise.all(tasks.map((t) => t.flush()));
    const moved: string[] = [];
    for (const t of tasks) {
      if (!t.active) continue;
      t.handOver();
      moved.push(t.trajectoryId);
    }
    this.log.info({ to, moved: moved.length, some: only !== undefined }, 'repack-out: trajectories handed over');
    if (only === undefined) this.state = 'idle';
    else this.settle();
    return { moved };
  }

  /** Takes the listed trajectories over from `from` (or whoever the partial pool says) and resumes them. */
  private async repackIn(
    from: string,
    version: number,
    ids: string[],
  ): Promise<{ taken: number; completed: number; lost: number; completing: ResumeOutcome['completing'] }> {
    if (this.weightVersion !== version) {
      throw new RolloutError(ErrorCodes.VERSION_MISMATCH, `repack-in for version ${version}, but ${this.id} generates with ${this.weightVersion}`);
    }
    if (this.loads.size > 0) {
      throw new RolloutError(ErrorCodes.VERSION_MISMATCH, `repack-in for version ${version}, but ${this.id} is loading new weights`);
    }
    const { taken, completed, lost, returned, completing } = await this.ownership.takeOverAndResume(ids, from, 'version_mismatch');
    // Those being completed are left to their owner; the manager asks again once their grace is over.
    this.log.info({ from, taken, completed, lost: lost + returned, completing: completing.length }, 'repack-in: trajectories resumed');
    return { taken, completed, lost: lost + returned, completing };
  }

  /** Rebuilds the engine on the same devices and resumes what this rollout still owns. */
  private async reinitialise(reason: string): Promise<{ taken: number; lost: number }> {
    this.log.warn({ reason }, "reinitialising the engine at the manager's request");
    this.state = 'reinitialising';
    try {
      const tasks = [...this.tasks.values()];
      await this.options.engine.stop(tasks);
      await Promise.allSettled(tasks.map((t) => t.flush()));
      for (const t of tasks) t.handOver();
      await this.options.engine.reinitialise();
      // New weights being loaded land first: what is resumed below is checked against them.
      await this.loads.settled();
      // Resume from what the partial pool holds: it is the truth after a hiccup.
      const owned = (await this.options.partials.list(this.id)).map((t) => t.trajectoryId);
      const { taken, lost, returned } = await this.ownership.takeOverAndResume(owned, this.id, 'version_mismatch');
      return { taken, lost: lost + returned };
    } finally {
      // Done or failed, it is no longer reinitialising: what it holds says the rest.
      if (this.engineState === 'reinitialising') this.state = 'idle'; // (read through the getter: the await above may have changed it)
      this.settle();
    }
  }

  /** The periodic reconciliation (ownership.ts), skipped while new weights load. */
  private async reconcile(): Promise<void> {
    // During a weight load the engine is between versions: the next round looks again.
    if (this.closed || this.loads.size > 0) return;
    await this.ownership.reconcile();
  }

  private adopt(partial: PartialTrajectory, state: PartialState): GenerationTask {
    const s = state.start;
    const promptBytes = s.promptTokens;
    const promptTokens = promptBytes
      ? new Int32Array(promptBytes.buffer.slice(promptBytes.byteOffset, promptBytes.byteOffset + promptBytes.byteLength))
      : new Int32Array(s.promptLength ?? 0);
    const task = new GenerationTask(this.taskHost, partial, {
      trajectoryId: s.trajectoryId,
      promptId: s.promptId,
      groupId: s.groupId,
      sampleIndex: s.sampleIndex,
      groupSize: s.groupSize,
      weightVersion: s.weightVersion,
      payload: s.payload,
      promptTokens,
      generatedTokens: state.tokens,
      generatedLogprobs: state.logprobs,
      createdAt: s.createdAt ?? Date.now(),
    });
    this.tasks.set(s.trajectoryId, task);
    this.metrics.tasks.inc({ outcome: 'resumed' });
    this.metrics.owned.set(this.tasks.size);
    return task;
  }

  private load(): RolloutLoad {
    let engine: EngineLoad;
    try {
      engine = this.options.engine.load();
    } catch {
      engine = { kvUsed: 0, running: 0, waiting: 0, tokensPerSecond: 0 };
    }
    const kvUsed = clamp01(engine.kvUsed);
    const report: RolloutLoad = {
      state: this.state,
      model: this.options.model,
      weightVersion: this.weightVersion,
      kvUsed,
      kvPrev: this.kvPrev,
      running: Math.max(0, Math.floor(engine.running)),
      waiting: Math.max(0, Math.floor(engine.waiting)),
      owned: this.tasks.size,
      tokensPerSecond: Math.max(0, engine.tokensPerSecond),
      ...(engine.decodeBatch !== undefined && Number.isSafeInteger(engine.decodeBatch) && engine.decodeBatch > 0 ? { decodeBatch: engine.decodeBatch } : {}),
      ...(this.weightError ? { weightError: this.weightError } : {}),
      ...(engine.trajectories ? { trajectories: engine.trajectories.slice(0, MAX_REPORTED_TRAJECTORIES) } : {}),
    };
    this.kvPrev = kvUsed;
    this.metrics.kvUsed.set(kvUsed);
    this.metrics.running.set(report.running);
    this.metrics.waiting.set(report.waiting);
    this.metrics.tokensPerSecond.set(report.tokensPerSecond);
    return report;
  }
}

function clamp01(x: number): number {
  return Number.isFinite(x) ? Math.min(1, Math.max(0, x)) : 0;
}
