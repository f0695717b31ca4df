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
 */
import { hostname } from 'node:os';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { ErrorCodes, LaminarError } from '../common/errors.js';
import { InFlight, mapLimit } from '../common/concurrency.js';
import { silentLogger } from '../common/logger.js';
import { createRegistry } from '../common/metrics.js';
import { MemberAgent } from '../control/member-agent.js';
import type { Command, RolloutLoad } from '../control/schema.js';
import { DataErrorCodes, type ExperienceWriter, type PartialPool, type PartialState, type PartialSummary, type PartialTrajectory, type PromptClaim, type PromptPool } from '../data/index.js';
import { RelayClient } from '../relay/client/relay-client.js';
import type { Lease } from '../relay/client/lease.js';
import type { EngineLoad, RolloutEngine } from './engine.js';
import { PARKED_OWNER, trajectoryIdOf } from './ids.js';
import { RolloutMetrics } from './metrics.js';
import { GenerationTask, type TaskOutcome } from './task.js';

export const RolloutErrorCodes = {
  VERSION_MISMATCH: 'ERR_VERSION_MISMATCH',
  NO_WEIGHTS: 'ERR_NO_WEIGHTS',
  BUSY: 'ERR_ROLLOUT_BUSY',
} as const;

export class RolloutError extends LaminarError {}

const TAKEOVER_CONCURRENCY = 16;


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
  private relay: RelayClient | null = null;
  /** The last acquire found the relay gone (ERR_CLOSED); cleared by the next one that succeeds. */
  private relayAway = false;
  private relayConnecting: Promise<RelayClient> | null = null;
  /** Claims on their way (close waits for them). */
  private readonly claiming = new InFlight();
  /**
   * A weight version change and a resume of trajectories never overlap (a trajectory keeps one
   * version from its first token to its last): an acquire waits for a resume in flight; during
   * an acquire a repack-in is refused, a reconciliation skipped, and a reinitialise waits.
   */
  private resuming: Promise<{ taken: number }> | null = null;
  private readonly loads = new InFlight();
  private weightVersion: number | null = null;
  private state: RolloutState = 'idle';
  private kvPrev = 0;
  /** Commands run one at a time: a repack must not interleave with a reinitialise. */
  private commandChain: Promise<unknown> = Promise.resolve();
  private closed = false;
  private reconcileTimer: NodeJS.Timeout | null = null;
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
  private readonly taskHost: ConstructorParameters<typeof GenerationTask>[0];

  private constructor(private readonly options: RolloutClientOptions) {
    this.id = options.id;
    this.taskHost = {
      rolloutId: options.id,
      partials: options.partials,
      released: (task: GenerationTask, outcome: TaskOutcome | 'handed-over'): void => {
        this.tasks.delete(task.trajectoryId);
        // Completed (purged) or taken by another rollout: gone. Handed over: ours until the
        // destination's take-over shows in the pool, which the next reconciliation checks.
        if (outcome === 'handed-over') this.mayOwn.add(task.trajectoryId);
        else this.mayOwn.delete(task.trajectoryId);
        this.metrics.tasks.inc({ outcome });
        this.metrics.owned.set(this.tasks.size);
      },
    };
    this.log = (options.logger ?? silentLogger).child({ component: 'rollout', rollout: options.id });
    this.metrics = new RolloutMetrics(options.registry ?? createRegistry({ defaultMetrics: false }));
    this.agent = new MemberAgent({
      nc: options.nc,
      job: options.job,
      id: options.id,
      kind: 'rollout',
      host: options.host ?? hostname(),
      labels: options.labels ?? {},
      heartbeatMs: options.heartbeatMs ?? 1000,
      state: () => ({ epoch: null, holds: [], receiving: [], downstream: null }),
      rolloutLoad: () => this.load(),
      onCommand: (command) => this.onCommand(command),
      onBadInput: (code) => this.metrics.rejected.inc({ code }),
      logger: this.log,
    });
  }

  static async connect(options: RolloutClientOptions): Promise<RolloutClient> {
    const client = new RolloutClient(options);
    if (options.relaySocket) {
      // A relay not up yet (services started in any order) is the same as one that went away:
      // the rollout starts, and acquireWeights() connects once the relay is there.
      client.relay = await client.connectRelay(options.relaySocket).catch((err: LaminarError) => {
        if (err.code !== ErrorCodes.CLOSED) throw err;
        client.relayAwayNow(err);
        return null;
      });
    }
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

  /** What the engine is doing, as the manager sees it. */
  setState(state: RolloutState): void {
    this.state = state;
  }

  /**
   * The latest version of the model from the local relay (waiting up to `timeoutMs` for one at
   * least `atLeast`), recorded as the version in use. The engine loads the tensors from the lease
   * and releases it.
   */
  async acquireWeights(options: { atLeast?: number; timeoutMs?: number; signal?: AbortSignal } = {}): Promise<AcquiredWeights> {
    const socket = this.options.relaySocket;
    if (!socket) throw new RolloutError(RolloutErrorCodes.NO_WEIGHTS, 'this rollout has no local relay (relaySocket); use setWeightVersion() after loading weights yourself');
    const resuming = this.resuming;
    if (resuming) {
      const resumed = (await resuming.catch(() => null))?.taken ?? 0;
      if (resumed > 0) {
        throw new RolloutError(
          RolloutErrorCodes.BUSY,
          `${resumed} trajectories of version ${this.weightVersion} were resumed here while new weights were asked for: generate them first`,
        );
      }
    }
    const started = performance.now();
    this.state = 'loading';
    const load = (async () => {
      const relay = await this.localRelay(socket);
      const lease = await relay.acquire({
        model: this.options.model,
        atLeast: options.atLeast ?? 0,
        timeoutMs: options.timeoutMs ?? 60_000,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      return { relay, lease };
    })();
    let relay: RelayClient;
    let lease: Lease;
    try {
      ({ relay, lease } = await this.loads.track(load));
    } catch (err) {
      const code = (err as LaminarError).code ?? 'ERR_UNKNOWN';
      this.metrics.weightAcquireFailures.inc({ code });
      if (code === ErrorCodes.CLOSED) this.relayAwayNow(err as Error);
      throw err;
    }
    if (this.relayAway) {
      this.relayAway = false;
      this.log.info({ version: lease.version, relay: relay.relayId }, 'the local relay is back');
    }
    this.setWeightVersion(lease.version);
    this.metrics.weightLoadSeconds.observe((performance.now() - started) / 1e3);
    return { version: lease.version, lease };
  }

  private connectRelay(socketPath: string): Promise<RelayClient> {
    return RelayClient.connect({ socketPath, name: `rollout ${this.id}` });
  }

  /** The relay client, connected on first use when the relay was not up at start (one attempt at a time). */
  private async localRelay(socketPath: string): Promise<RelayClient> {
    if (this.relay) return this.relay;
    this.relayConnecting ??= this.connectRelay(socketPath).finally(() => {
      this.relayConnecting = null;
    });
    const relay = await this.relayConnecting;
    if (this.closed) {
      relay.close();
      throw new RolloutError(ErrorCodes.CLOSED, 'the rollout client is closed');
    }
    this.relay ??= relay;
    return this.relay;
  }

  /** Said once per outage: the engine goes on with the weights it has meanwhile. */
  private relayAwayNow(err: Error): void {
    if (this.relayAway) return;
    this.relayAway = true;
    this.log.warn({ version: this.weightVersion, err: err.message }, 'the local relay is away: keeping the weights in use; every acquire tries to connect again');
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
    if (version === null) throw new RolloutError(RolloutErrorCodes.NO_WEIGHTS, 'acquire weights before claiming prompts');
    return this.claiming.track(
      (async () => {
        const claims = await this.options.prompts.claim(this.id, prompts, this.options.claimLeaseMs ?? 60_000);
        return (await Promise.all(claims.map((claim) => this.startClaim(claim, version)))).flat();
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
    const promptTokens = await this.options.engine.tokenize(claim.payload);
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
    await this.options.prompts.complete(claim).catch((err: Error & { code?: string }) => {
      // A lease lost meanwhile: whoever claims the prompt again skips these samples by id.
      this.log.warn({ prompt: claim.id, code: err.code, err: err.message }, 'prompt claim not completed');
    });
    return started;
  }

  private async startSample(claim: PromptClaim, sampleIndex: number, version: number, promptTokens: Int32Array, createdAt: number): Promise<GenerationTask | null> {
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
      partial = await this.ownershipWrite(trajectoryId, () => this.options.partials.start(this.id, start));
    } catch (err) {
      if ((err as { code?: string }).code !== DataErrorCodes.TRAJECTORY_EXISTS) throw err;
      try {
        // The manager gave up on this sample's old version and parked it: start it afresh, in
        // one step (a crash cannot leave it in neither pool).
        partial = await this.ownershipWrite(trajectoryId, () => this.options.partials.restart(this.id, start, { from: PARKED_OWNER }));
      } catch (err2) {
        if ((err2 as { code?: string }).code !== DataErrorCodes.NOT_OWNER) throw err2;
        // Another rollout generates it (this prompt was claimed before): not ours.
        this.mayOwn.delete(trajectoryId);
        this.metrics.tasks.inc({ outcome: 'skipped' });
        return null;
      }
    }
    const task = new GenerationTask(this.taskHost, partial, { ...start, promptTokens });
    this.tasks.set(trajectoryId, task);
    this.metrics.tasks.inc({ outcome: 'started' });
    return task;
  }

  // ---- commands ----------------------------------------------------------------------------

  private onCommand(command: Command): Promise<Record<string, unknown> | void> | void {
    if (command.t === 'reregister' || command.t === 'load') return;
    const run = async (): Promise<Record<string, unknown> | void> => {
      const started = performance.now();
      try {
        const result = await this.execute(command);
        this.metrics.commands.inc({ command: command.t, result: 'done' });
        return result;
      } catch (err) {
        this.metrics.commands.inc({ command: command.t, result: (err as { code?: string }).code ?? 'ERR_INTERNAL' });
        throw err;
      } finally {
        this.metrics.commandSeconds.observe({ command: command.t }, (performance.now() - started) / 1e3);
      }
    };
    const next = this.commandChain.catch(() => undefined).then(run);
    this.commandChain = next;
    return next;
  }

  private async execute(command: Command): Promise<Record<string, unknown> | void> {
    switch (command.t) {
      case 'repack-out':
        return this.repackOut(command.to, command.version);
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

  /** Stops everything this rollout generates, stores every token, and lets go of it. */
  private async repackOut(to: string, version: number): Promise<{ moved: string[] }> {
    if (this.weightVersion !== version) {
      throw new RolloutError(RolloutErrorCodes.VERSION_MISMATCH, `repack-out for version ${version}, but ${this.id} generates with ${this.weightVersion}`);
    }
    const tasks = [...this.tasks.values()];
    await this.options.engine.stop(tasks);
    await Promise.all(tasks.map((t) => t.flush()));
    const moved: string[] = [];
    for (const t of tasks) {
      if (!t.active) continue;
      t.handOver();
      moved.push(t.trajectoryId);
    }
    this.log.info({ to, moved: moved.length }, 'repack-out: trajectories handed over');
    this.state = 'idle';
    return { moved };
  }

  /** Takes the listed trajectories over from `from` (or whoever the partial pool says) and resumes them. */
  private async repackIn(from: string, version: number, ids: string[]): Promise<{ taken: number; completed: number; lost: number }> {
    if (this.weightVersion !== version) {
      throw new RolloutError(RolloutErrorCodes.VERSION_MISMATCH, `repack-in for version ${version}, but ${this.id} generates with ${this.weightVersion}`);
    }
    if (this.loads.size > 0) {
      throw new RolloutError(RolloutErrorCodes.VERSION_MISMATCH, `repack-in for version ${version}, but ${this.id} is loading new weights`);
    }
    const { taken, completed, lost, returned } = await this.takeOverAndResume(ids, from, 'version_mismatch');
    this.log.info({ from, taken, completed, lost: lost + returned }, 'repack-in: trajectories resumed');
    return { taken, completed, lost: lost + returned };
  }

  /** Rebuilds the engine on the same devices and resumes what this rollout still owns. */
  private async reinitialise(reason: string): Promise<{ taken: number; lost: number }> {
    this.log.warn({ reason }, 'reinitialising the engine at the manager\'s request');
    this.state = 'reinitialising';
    const tasks = [...this.tasks.values()];
    await this.options.engine.stop(tasks);
    await Promise.allSettled(tasks.map((t) => t.flush()));
    for (const t of tasks) t.handOver();
    await this.options.engine.reinitialise();
    // New weights being loaded land first: what is resumed below is checked against them.
    await this.loads.settled();
    // Resume from what the partial pool holds: it is the truth after a hiccup.
    const owned = (await this.options.partials.list(this.id)).map((t) => t.trajectoryId);
    const { taken, lost, returned } = await this.takeOverAndResume(owned, this.id, 'version_mismatch');
    if (taken === 0) this.state = 'idle';
    return { taken, lost: lost + returned };
  }

  /** Resumes (or returns) trajectories the partial pool says are ours but nobody generates. */
  private async reconcile(): Promise<void> {
    // During a weight load the engine is between versions: the next round looks again.
    if (this.closed || this.loads.size > 0) return;
    let owned: PartialSummary[];
    try {
      owned = this.reconciledOnce ? await this.ownedNotGenerated() : await this.options.partials.list(this.id);
    } catch {
      return;
    }
    if (!this.reconciledOnce) for (const s of owned) this.mayOwn.add(s.trajectoryId);
    this.reconciledOnce = true;
    const stray = new Set(owned.filter((s) => s.state !== 'completing' && !this.tasks.has(s.trajectoryId)).map((s) => s.trajectoryId));
    // Seen stray twice in a row: not a trajectory between its start and its task, nor a hand-over in progress.
    const confirmed = [...stray].filter((id) => this.strays.has(id));
    this.strays = new Set([...stray].filter((id) => !this.strays.has(id)));
    if (confirmed.length === 0) return;
    const { taken, returned } = await this.takeOverAndResume(confirmed, this.id, 'stranded');
    this.metrics.tasks.inc({ outcome: 'reconciled' }, taken);
    this.metrics.tasks.inc({ outcome: 'returned' }, returned);
    this.log.warn({ resumed: taken, returned }, 'stranded trajectories of this rollout picked up');
  }

  /**
   * An ownership write (start, restart, take-over) for `trajectoryId`. The trajectory may be ours
   * from before the write: one whose answer is lost may still have made it ours.
   */
  private async ownershipWrite<T>(trajectoryId: string, write: () => Promise<T>): Promise<T> {
    this.mayOwn.add(trajectoryId);
    this.ownershipWrites.add(trajectoryId);
    try {
      return await write();
    } finally {
      this.ownershipWrites.delete(trajectoryId);
    }
  }

  /** Of the trajectories this process may own and does not generate, those the pool says it owns. */
  private async ownedNotGenerated(): Promise<PartialSummary[]> {
    const candidates = [...this.mayOwn].filter((id) => !this.tasks.has(id) && !this.ownershipWrites.has(id));
    const summaries = await mapLimit(candidates, TAKEOVER_CONCURRENCY, (id) => this.options.partials.summary(id));
    const owned: PartialSummary[] = [];
    candidates.forEach((id, i) => {
      const s = summaries[i];
      if (s?.owner === this.id) owned.push(s);
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
   * finds it.
   */
  private takeOverAndResume(ids: readonly string[], from: string, reason: string): Promise<{ taken: number; completed: number; lost: number; returned: number }> {
    const work = this.takeOverAndResumeNow(ids, from, reason);
    this.resuming = work;
    const clear = (): void => {
      if (this.resuming === work) this.resuming = null;
    };
    work.then(clear, clear);
    return work;
  }

  private async takeOverAndResumeNow(ids: readonly string[], from: string, reason: string): Promise<{ taken: number; completed: number; lost: number; returned: number }> {
    const resumed: GenerationTask[] = [];
    let completed = 0;
    let lost = 0;
    let returned = 0;
    // Take-overs are independent round trips (read the log, conditional marker): run several at once.
    await mapLimit(ids, TAKEOVER_CONCURRENCY, async (trajectoryId) => {
      try {
        const result = await this.ownershipWrite(trajectoryId, () => this.options.partials.takeOver(trajectoryId, this.id, { from }));
        if (result.status === 'completed') {
          this.mayOwn.delete(trajectoryId);
          completed++;
          return;
        }
        const start = result.state.start;
        if (start.weightVersion === this.weightVersion) {
          resumed.push(this.adopt(result.trajectory, result.state));
          return;
        }
        result.trajectory.release();
        this.log.warn({ trajectory: trajectoryId, version: start.weightVersion, mine: this.weightVersion, reason }, 'trajectory of another weight version: returned to the prompt pool');
        const parked = await this.options.partials.takeOver(trajectoryId, PARKED_OWNER, { from: this.id });
        if (parked.status === 'taken') {
          this.mayOwn.delete(trajectoryId);
          parked.trajectory.release();
          await this.options.prompts.returnSamples({ groupId: start.groupId, samples: [start.sampleIndex], reason });
          returned++;
        }
      } catch (err) {
        const code = (err as { code?: string }).code;
        lost++;
        if (code === DataErrorCodes.NOT_OWNER || code === DataErrorCodes.UNKNOWN_TRAJECTORY) this.mayOwn.delete(trajectoryId);
        else {
          this.log.warn({ trajectory: trajectoryId, from, code, err: (err as Error).message }, 'trajectory not taken over');
        }
      }
    });
    if (resumed.length > 0) {
      this.state = 'generating';
      await this.options.engine.resume(resumed);
    }
    return { taken: resumed.length, completed, lost, returned };
  }

  private adopt(partial: PartialTrajectory, state: PartialState): GenerationTask {
    const s = state.start;
    const promptBytes = s.promptTokens;
    const promptTokens = promptBytes ? new Int32Array(promptBytes.buffer.slice(promptBytes.byteOffset, promptBytes.byteOffset + promptBytes.byteLength)) : new Int32Array(s.promptLength ?? 0);
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
