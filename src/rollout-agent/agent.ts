/**
 * `laminar rollout-agent`: one inference server (SGLang, vLLM, the reference engine) taking part in
 * a laminar job, driven over HTTP by the rollout SDK. The agent runs next to the engine and its
 * host's relay; to the manager it is a rollout like any other.
 *
 * Its life, per engine session:
 * 1. wait until the engine answers its health check; clear what a previous agent left running
 *    there (abort every request, continue a paused generation);
 * 2. register a RolloutClient (the manager sees a new incarnation of this rollout);
 * 3. loop: when nothing generates, take the newest version from the local relay and have the
 *    engine load it from the version's directory (`update_weights_from_disk`), then claim the
 *    next batch of prompts; every sample is one streamed request (http-engine.ts);
 * 4. the engine unreachable: stop the requests, store every token, close the client (its
 *    heartbeats stop: the manager declares the rollout dead and moves its trajectories to
 *    rollouts of the same version) and go back to 1.
 *
 * Weights: the lease on the version the engine serves is held until the engine's load of the
 * next version returned, and released only then; a version the engine refuses is reported to the
 * manager (status, metrics) and not tried again, and the engine keeps the one it has. A LoRA
 * adapter version (src/relay/lora/) is loaded as an adapter beside the base instead, and the
 * trajectories that start on it name it in their requests (adapter-switch.ts).
 *
 * A trajectory is generated with one weight version from its first token to its last: new
 * weights are loaded only when nothing generates (the manager's repack empties engines of their
 * long tails so that they get there). `partialRollout` lifts this: a newer version is loaded while
 * trajectories run (pause in place, load, continue), and their records carry the version they
 * started with and `info.versions` the span.
 *
 * `progressivePriority` (turn-priority.ts): each turn is sent with its trajectory's predicted
 * remaining length as priority, the longest first; the predictor learns from what this agent
 * finishes, across engine sessions.
 *
 * `claimOrder: 'longest-first'`: the agent claims the prompts whose groups ran longest when last
 * seen first, and records in the prompt pool the length of every trajectory it finishes (that
 * history is what the next epoch's claims order by): the long tail of a step starts first.
 */
import { hostname } from 'node:os';
import type { WeightsVariant } from '../relay/fp8/model-id.js';
import type { NatsConnection } from '@nats-io/transport-node';
import type { PoolRedis } from '../data/prompts/redis-address.js';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { delay, settledOrDelay } from '../common/concurrency.js';
import { ErrorCodes } from '../common/errors.js';
import { silentLogger } from '../common/logger.js';
import { createRegistry } from '../common/metrics.js';
import { RelayClient, loraBaseOf, type Lease, type LoraBase } from '../relay/client/index.js';
import { openRolloutPools, type RolloutPools } from '../rollout/pools.js';
import { mustEmptyFirst, promptsToClaim } from '../rollout/claim-policy.js';
import { RolloutClient } from '../rollout/rollout-client.js';
import { EngineAdapters } from './adapter-switch.js';
import type { EngineClient, ServerInfo } from './engine-client.js';
import { Episodes, type EpisodeOptions } from './episode.js';
import { EngineError } from './http.js';
import { HttpRolloutEngine } from './http-engine.js';
import { AgentMetrics } from './metrics.js';
import type { RequestDefaults } from './requests.js';
import type { RewardFunction } from './rewards.js';
import { ProgressivePriority } from './turn-priority.js';
import type { RemainingLengthPredictor } from '../manager/agentic/remaining-length.js';
import type { ClaimOrder } from '../data/index.js';
import type { GenerationTask } from '../rollout/task.js';

/** How often the agent looks for a newer version at the relay when its version watch is not subscribed. */
const UNWATCHED_LOOK_MS = 5000;

/** Load polls the engine must miss in a row, while idle, to be taken for down. */
const UNREACHABLE_POLLS = 3;

/**
 * How long the version watch waits before its `attempt`-th try again (1, 2, ...) in a session:
 * 250 ms doubling up to 5 s, so that a relay started after the agent (or restarted) is watched
 * soon without a dead socket being knocked on four times a second.
 */
export function watchRetryMs(attempt: number): number {
  return Math.min(5000, 250 * 2 ** Math.max(0, Math.min(attempt - 1, 5)));
}

/**
 * The sequences the engine decodes at once, for the heartbeat (the dp planner's B): its max
 * running requests, or fewer where the agent sends fewer at once (`maxInFlight`, 0: no limit);
 * null when neither is known.
 */
export function decodeBatchOf(engineMaxRunning: number | null, maxInFlight: number): number | null {
  const bounds = [engineMaxRunning, maxInFlight > 0 ? maxInFlight : null].filter((b): b is number => b !== null && Number.isSafeInteger(b) && b > 0);
  return bounds.length === 0 ? null : Math.min(...bounds);
}

export interface RolloutAgentOptions {
  nc: NatsConnection;
  /** The prompt pool's Redis: one server, Sentinel or Cluster (createPoolRedis). */
  redis: PoolRedis;
  job: string;
  id: string;
  model: string;
  /** The host's relay, where versions and their directories come from. */
  relaySocket: string;
  /** The weights the engine loads: each version as published, or its FP8 variant (`--weights`). Default bf16. */
  weights?: WeightsVariant;
  engine: EngineClient;
  defaults: RequestDefaults;
  reward: RewardFunction;
  /** Prompts claimed per batch (each brings its n samples). */
  batchPrompts: number;
  /** Load newer versions while trajectories run (their tokens then mix versions). Default false. */
  partialRollout?: boolean;
  /**
   * Multi-turn episodes with tool calls (episode.ts): generate until a call, run it as an action,
   * append the observation, go on. Absent: a trajectory is one request. The engine must tokenize
   * tool messages (`toolMessageIds`).
   */
  multiTurn?: MultiTurnOptions;
  /**
   * 0 (default): batch mode, the paper's rollout loop: claim `batchPrompts` prompts, generate
   * until all are done, take the newest weights, claim again. N > 0: continuous mode: keep up to
   * N trajectories generating, claiming as they finish, as long as no newer version waits (then
   * drain, load it, go on).
   *
   * With `multiTurn`, N bounds the trajectories at the engine: one waiting at a tool call holds
   * nothing there and does not count; a tool result that comes back while N generate waits its
   * turn (longest waiting first, engine-slots.ts).
   */
  maxInFlight?: number;
  /**
   * Continuous mode with `multiTurn`: trajectories owned beyond `maxInFlight` while some wait at
   * tools; the agent owns at most `maxInFlight + maxAtTools` (generating, in line for the engine
   * and at tools together). Default: `maxInFlight` (twice as many owned as generate).
   */
  maxAtTools?: number;
  /**
   * Progressive priority: each turn goes to the engine (and into the agent's line for a place
   * there) with its trajectory's predicted remaining time as priority (remaining tokens at the
   * measured decode rate plus remaining tool calls at the measured tool latency, in ms), longest
   * first. The
   * engine must order by it: SGLang and the reference engine with `--enable-priority-scheduling`,
   * vLLM with `--scheduling-policy priority`. Default false (first come, first served).
   */
  progressivePriority?: boolean;
  /** The remaining-length predictor of progressive priority. Default: LengthPredictor (src/manager/agentic). */
  lengthPredictor?: RemainingLengthPredictor;
  /**
   * Which pending prompt a claim takes: 'fifo' (default), or 'longest-first': the prompt whose group
   * ran longest when last seen, from the lengths this agent (and every longest-first agent of the
   * pool) records as its trajectories end. Heddle's longest-first applied where a group starts.
   */
  claimOrder?: ClaimOrder;
  host?: string;
  labels?: Record<string, string>;
  heartbeatMs?: number;
  promptPool?: string;
  partialPool?: string;
  buffer?: string;
  /** Replicas of the buffer, the partial pool and the control bucket if this agent creates them (3 on a NATS cluster). */
  replicas?: number;
  /** How often the engine's /metrics are read for the load the heartbeat reports. Default: the heartbeat. */
  loadPollMs?: number;
  registry?: Registry;
  logger?: Logger;
}

/** What the agent's flags set of an episode; the rest (metrics, the newest version, the engine's tokenizer) is the agent's. */
export type MultiTurnOptions = Omit<EpisodeOptions, 'metrics' | 'log' | 'newestVersion' | 'observationIds'>;

/** One engine session: from the engine found up to it found down (or the agent closed). */
interface Session {
  client: RolloutClient;
  engine: HttpRolloutEngine;
  down: Promise<Error>;
  markDown(err: Error): void;
  isDown: boolean;
  /** Ends the version watch with the session. */
  stopWatching: AbortController;
  /** The relay's version watch is subscribed (new versions are known as they complete). */
  watching: boolean;
  /** LoRA adapters loaded at the engine in this session, and the trajectories using each. */
  adapters: EngineAdapters;
}

export class RolloutAgent {
  readonly metrics: AgentMetrics;
  private readonly log: Logger;
  private readonly registry: Registry;
  private session: Session | null = null;
  /** The lease on the version the engine serves; released once the engine serves another. */
  private held: Lease | null = null;
  /** A version the engine refused: not offered to it again. */
  private refused: number | null = null;
  /** The full version this agent had the engine load (null: what it started with, unknown). */
  private baseServed: LoraBase | null = null;
  private closed = false;
  private readonly closing = new AbortController();
  private loop: Promise<void> | null = null;
  /** The newest version the relay announced (null: none seen yet). */
  private newest: number | null = null;
  private pools: RolloutPools | null = null;
  /** Wakes the serve loop (new weights asked for, the engine down, closing). */
  private readonly wakers = new Set<() => void>();
  private weightChain: Promise<unknown> = Promise.resolve();
  private sessions = 0;
  /** Progressive priority's predictions (null: off); kept across engine sessions, as its history is. */
  readonly priorities: ProgressivePriority | null;

  private constructor(private readonly options: RolloutAgentOptions) {
    this.registry = options.registry ?? createRegistry({ defaultMetrics: false });
    this.metrics = new AgentMetrics(this.registry);
    this.priorities = options.progressivePriority
      ? new ProgressivePriority({
          error: this.metrics.remainingTokensError,
          ...(options.lengthPredictor ? { predictor: options.lengthPredictor } : {}),
        })
      : null;
    this.log = (options.logger ?? silentLogger).child({ component: 'rollout-agent', rollout: options.id, engine: options.engine.url });
  }

  /** Opens the pools and starts serving; returns at once (the engine may not be up yet). */
  static async start(options: RolloutAgentOptions): Promise<RolloutAgent> {
    const agent = new RolloutAgent(options);
    const { registry, log: logger } = agent;
    agent.pools = await openRolloutPools({ ...options, registry, logger });
    agent.loop = agent.run();
    return agent;
  }

  /** The RolloutClient of the current engine session (null while the engine is away). */
  get client(): RolloutClient | null {
    return this.session?.client ?? null;
  }

  /** Engine sessions so far (1 once the engine was first found up; +1 per restart of it). */
  get sessionCount(): number {
    return this.sessions;
  }

  get heldVersion(): number | null {
    return this.held?.version ?? null;
  }

  status(): Record<string, unknown> {
    return {
      id: this.options.id,
      engine: this.options.engine.url,
      kind: this.options.engine.kind,
      up: this.session !== null && !this.session.isDown,
      version: this.session?.client.version ?? null,
      inFlight: this.session?.engine.inFlight ?? 0,
      atEngine: this.session?.engine.atEngine ?? 0,
      betweenTurns: this.session?.engine.betweenTurns ?? 0,
      inLine: this.session?.engine.inLine ?? 0,
      refused: this.refused,
      sessions: this.sessions,
      watching: this.session?.watching ?? false,
      adapters: this.session?.adapters.names ?? [],
    };
  }

  /** Stops generating (tokens stored, trajectories left in the partial pool), lets go of the lease, closes. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.closing.abort();
    this.wakeAll();
    await this.loop?.catch(() => undefined);
    await this.held?.release().catch(() => undefined);
    this.held = null;
    await this.pools?.partials.close();
  }

  // ---- sessions ----------------------------------------------------------------------------

  private async run(): Promise<void> {
    while (!this.closed) {
      try {
        await this.waitForEngine();
        if (this.isClosed()) return;
        const session = await this.openSession();
        try {
          await this.serve(session);
        } finally {
          // However the session ends (the engine down, closing, or a throw), its client stops
          // heartbeating: left registered, the rollout would look alive to the manager while
          // nothing generates, and the next session would register beside it.
          await this.closeSession(session).catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'closing the engine session failed'));
        }
      } catch (err) {
        if (this.isClosed()) return;
        this.log.error({ err: (err as Error).message, code: (err as { code?: string }).code }, 'engine session failed; starting again');
        await this.pause(1000);
      }
    }
  }

  private async waitForEngine(): Promise<void> {
    const { engine } = this.options;
    let waitMs = 200;
    let said = 0;
    const since = performance.now();
    while (!this.closed) {
      if (await engine.health(this.closing.signal).catch(() => false)) return;
      const now = performance.now();
      if (now - said > 10_000) {
        said = now;
        this.log.info({ waitingS: Math.round((now - since) / 1000) }, 'waiting for the engine to answer its health check');
      }
      await this.pause(waitMs);
      waitMs = Math.min(2000, waitMs * 2);
    }
  }

  private async openSession(): Promise<Session> {
    const { engine } = this.options;
    // What a previous agent (or this one, before the engine restarted) left there is nobody's now.
    await engine.abortAll().catch((err: unknown) => this.log.debug({ err: (err as Error).message }, 'abort_request'));
    await engine.resume().catch((err: unknown) => this.log.debug({ err: (err as Error).message }, 'continue_generation'));
    const info: ServerInfo = await engine.serverInfo().catch(() => ({ kvCapacityTokens: null, description: engine.kind }));
    let markDown!: (err: Error) => void;
    const down = new Promise<Error>((resolve) => (markDown = resolve));
    const session = {} as Session;
    session.isDown = false;
    session.watching = false;
    session.stopWatching = new AbortController();
    session.adapters = new EngineAdapters(engine, this.log);
    // A new engine session may be a restarted engine, with the weights it starts with.
    this.baseServed = null;
    session.down = down;
    session.markDown = (err) => {
      if (session.isDown) return;
      session.isDown = true;
      markDown(err);
      this.wakeAll();
    };
    session.engine = new HttpRolloutEngine({
      client: engine,
      defaults: this.options.defaults,
      reward: this.options.reward,
      metrics: this.metrics,
      kvCapacityTokens: info.kvCapacityTokens,
      versionsMayMix: this.options.partialRollout ?? false,
      episodes: this.episodes(),
      maxAtEngine: this.options.maxInFlight ?? 0,
      decodeBatch: decodeBatchOf(info.maxRunning ?? null, this.options.maxInFlight ?? 0),
      priorities: this.priorities,
      ...(this.options.claimOrder === 'longest-first' || this.priorities !== null ? { finished: (task: GenerationTask) => this.recordLength(task) } : {}),
      adapters: session.adapters,
      log: this.log,
      hooks: {
        engineDown: (err) => session.markDown(err),
        updateWeights: async () => {
          // Loaded when nothing generates (the serve loop); partial rollout loads now.
          if (this.options.partialRollout) await this.swapInPlace(session);
          else this.wakeAll();
        },
        reinitialise: () => this.reinitialise(session),
      },
    });
    await session.engine.refreshLoad();
    const { prompts, partials, writer } = this.pools!;
    session.client = await RolloutClient.connect({
      nc: this.options.nc,
      job: this.options.job,
      id: this.options.id,
      model: this.options.model,
      engine: session.engine,
      prompts,
      partials,
      writer,
      relaySocket: this.options.relaySocket,
      host: this.options.host ?? hostname(),
      labels: { engine: engine.kind, ...this.options.labels },
      ...(this.options.heartbeatMs ? { heartbeatMs: this.options.heartbeatMs } : {}),
      ...(this.options.replicas !== undefined ? { replicas: this.options.replicas } : {}),
      registry: this.registry,
      logger: this.log,
    });
    this.sessions++;
    this.metrics.engineUp.set(1);
    this.log.info({ engine: info.description, kvCapacityTokens: info.kvCapacityTokens, session: this.sessions }, 'engine up: serving it');
    this.session = session;
    return session;
  }

  /** The episodes of multi-turn trajectories, or null when a trajectory is one request. */
  private episodes(): Episodes | null {
    const { multiTurn, engine } = this.options;
    if (!multiTurn) return null;
    const toolMessageIds = engine.toolMessageIds?.bind(engine);
    if (!toolMessageIds) throw new EngineError(ErrorCodes.INVALID_ARG, `a ${engine.kind} engine client cannot tokenize tool messages: no multi-turn episodes`);
    return new Episodes({
      ...multiTurn,
      observationIds: toolMessageIds,
      newestVersion: () => this.newest,
      metrics: this.metrics,
      log: this.log,
    });
  }

  private async closeSession(session: Session): Promise<void> {
    this.metrics.engineUp.set(0);
    await session.engine.close();
    await session.client.close();
    this.session = null;
  }

  /** The session's work: weights, claims, generation, until the engine goes down or the agent closes. */
  private async serve(session: Session): Promise<void> {
    const pollMs = this.options.loadPollMs ?? this.options.heartbeatMs ?? 1000;
    // The load poll doubles as the engine's liveness check while nothing generates (a request in
    // flight notices a dead engine at once): unreachable this many polls in a row, it is down.
    let unreachable = 0;
    const poller = setInterval(() => {
      void session.engine.refreshLoad().then((reached) => {
        unreachable = reached ? 0 : unreachable + 1;
        if (unreachable >= UNREACHABLE_POLLS)
          session.markDown(new EngineError(ErrorCodes.ENGINE_UNAVAILABLE, `${this.options.engine.url} did not answer ${unreachable} load polls in a row`));
      });
    }, pollMs);
    const watcher = this.watchVersions(session);
    const policy = { batchPrompts: this.options.batchPrompts, maxInFlight: this.options.maxInFlight ?? 0, maxAtTools: this.maxAtTools() };
    /** Samples per prompt seen in the last claim (what one more prompt brings). */
    let perPrompt = 1;
    let lastLook = 0;
    try {
      while (!this.closed && !session.isDown) {
        const engine = session.engine;
        const current = session.client.version;
        // The relay's version watch says when a newer version is there; without it (the relay
        // away at the start of the session) the agent looks every few seconds. Looking only then
        // matters: an acquire in flight makes the SDK refuse a repack-in meant for this rollout.
        const unwatched = !session.watching && performance.now() - lastLook >= UNWATCHED_LOOK_MS;
        const newer = current === null || unwatched || (this.newest !== null && this.newest > current && this.newest !== this.refused);
        if (mustEmptyFirst(policy, engine.inFlight, newer)) {
          // A newer version waits, or batch mode: nothing new starts until the engine is empty
          // (a trajectory keeps one version from its first token to its last).
          await this.until(session, engine.idle());
          continue;
        }
        if (newer) {
          lastLook = performance.now();
          if (!(await this.refreshWeights(session))) {
            await this.pause(500);
            continue;
          }
        }
        // The rule is claim-policy.ts's (the cluster simulator's rollouts follow it too). Those
        // between turns (at tool calls) hold nothing at the engine: they count only as owned.
        // Owned is the SDK's count, the one the heartbeat reports: it also holds trajectories
        // being written to the buffer, which the engine has let go of already.
        const owned = this.options.multiTurn ? Math.max(engine.inFlight, session.client.owned.size) : engine.inFlight;
        const count = promptsToClaim(policy, engine.inFlight - engine.betweenTurns, perPrompt, owned);
        if (count === 0) {
          await this.until(session, engine.ended());
          continue;
        }
        let tasks;
        try {
          tasks = await session.client.claim(count);
        } catch (err) {
          this.log.warn({ err: (err as Error).message }, 'claim failed (retrying)');
          await this.pause(500);
          continue;
        }
        if (tasks.length === 0) {
          // The prompt pool is empty, or every prompt is leased: look again shortly (a new
          // version wakes the loop at once).
          await this.until(session, engine.inFlight > 0 ? settledOrDelay(engine.ended(), 200, this.closing.signal) : this.pause(200));
          continue;
        }
        perPrompt = Math.max(1, tasks[0]!.groupSize);
        // The SDK reports the state (generating while it holds trajectories): nothing to set here.
        await engine.resume(tasks);
      }
    } finally {
      clearInterval(poller);
      session.stopWatching.abort();
      await watcher;
    }
    if (session.isDown) {
      const err = await session.down;
      this.metrics.engineDowns.inc();
      this.log.warn(
        { err: err.message, inFlight: session.engine.inFlight },
        'engine unreachable: leaving the job until it is back (trajectories stay in the partial pool)',
      );
    }
  }

  /**
   * A trajectory ended here: its length goes to the prompt pool, which orders the next epoch's
   * longest-first claims by it and hands it with the prompt's next claim to progressive priority
   * (turn-priority.ts; recorded when either is on). Not awaited, and a failure only logged: it is a hint, and the
   * trajectory's record must not wait for it.
   */
  private recordLength(task: GenerationTask): void {
    this.pools?.prompts
      .recordLength(task.groupId, task.modelTokens)
      .catch((err: unknown) => this.log.debug({ err: (err as Error).message, group: task.groupId }, 'recording the prompt length failed'));
  }

  /** Owned beyond `maxInFlight` while trajectories wait at tools (single-turn: none). */
  private maxAtTools(): number {
    if (!this.options.multiTurn) return 0;
    return this.options.maxAtTools ?? this.options.maxInFlight ?? 0;
  }

  // ---- weights -----------------------------------------------------------------------------

  /**
   * Brings the engine to the newest version of the local relay (it waits for a first one).
   * False while the engine has no weights at all.
   */
  private refreshWeights(session: Session): Promise<boolean> {
    return this.serialised(() => this.refreshWeightsNow(session));
  }

  private async refreshWeightsNow(session: Session): Promise<boolean> {
    const client = session.client;
    const current = client.version;
    try {
      const { lease } = await client.acquireWeights({
        atLeast: current ?? (this.refused !== null ? this.refused + 1 : 0),
        timeoutMs: current === null ? 5000 : 0,
        signal: this.closing.signal,
        weights: this.options.weights ?? 'bf16',
        load: (lease) => this.loadIntoEngine(session, lease),
      });
      this.keep(lease);
      return true;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === ErrorCodes.ENGINE_UNAVAILABLE) session.markDown(err as Error);
      else if (code !== ErrorCodes.TIMEOUT && code !== ErrorCodes.ENGINE_RELOAD && code !== ErrorCodes.ABORTED) {
        this.log.warn({ code, err: (err as Error).message }, 'no new weights (going on with the version in use)');
      }
      return client.version !== null;
    }
  }

  /**
   * The engine loads `lease`'s version from its directory, full weights or a LoRA adapter beside
   * the base (adapter-switch.ts); the manager hears of a refusal.
   */
  private async loadIntoEngine(session: Session, lease: Lease): Promise<void> {
    if (lease.version === this.held?.version && lease.version === session.client.version) return;
    if (lease.version === this.refused) throw new EngineError(ErrorCodes.ENGINE_RELOAD, `version ${lease.version} was refused by the engine before`);
    const dir = lease.dir;
    if (dir === null)
      throw new EngineError(ErrorCodes.ENGINE_RELOAD, `the relay gives no directory for version ${lease.version} (a relay older than version directories?)`);
    const started = performance.now();
    try {
      if (EngineAdapters.isAdapter(lease)) {
        await this.loadBaseOf(lease);
      } else {
        await this.options.engine.loadWeights(dir, lease.version);
        this.baseServed = { model: lease.model, version: lease.version };
      }
      // An adapter is loaded; the one served before is unloaded once no trajectory uses it.
      await session.adapters.switchTo(lease);
    } catch (err) {
      const e = err as EngineError;
      if (e.code === ErrorCodes.ENGINE_RELOAD) {
        this.metrics.reloads.inc({ result: 'refused' });
        this.refused = lease.version;
        session.client.reportWeightError({ version: lease.version, code: e.code, message: e.message.slice(0, 1000) });
        this.log.error(
          { version: lease.version, dir, err: e.message, serving: session.client.version },
          'the engine refused a weight version; it keeps the one it has',
        );
      } else {
        this.metrics.reloads.inc({ result: 'failed' });
      }
      throw err;
    }
    this.metrics.reloads.inc({ result: 'ok' });
    this.metrics.reloadSeconds.observe((performance.now() - started) / 1000);
    session.client.reportWeightError(null);
    this.log.info({ version: lease.version, ms: Math.round(performance.now() - started) }, 'engine loaded weights');
  }

  /**
   * Before an adapter: the engine loads the base version the adapter names, unless it serves it
   * already (an agent that starts, or an engine that restarted, on an adapter version). The relay
   * keeps that base while it holds the adapter, whose lease the agent holds: the base's lease is
   * needed only for the load. An adapter that names no base version goes on what the engine has.
   */
  private async loadBaseOf(adapter: Lease): Promise<void> {
    const base = loraBaseOf(adapter.metadata);
    if (base?.version == null) return;
    if (this.baseServed?.model === base.model && this.baseServed.version === base.version) return;
    const relay = await RelayClient.connect({ socketPath: this.options.relaySocket, name: `agent ${this.options.id} (adapter base)` });
    try {
      await using lease = await relay.acquire({ model: base.model, version: base.version });
      if (lease.dir === null) throw new EngineError(ErrorCodes.ENGINE_RELOAD, `the relay gives no directory for base version ${base.version} of ${base.model}`);
      await this.options.engine.loadWeights(lease.dir, base.version);
      this.baseServed = base;
      this.log.info({ base, adapter: adapter.version }, 'engine loaded the base of an adapter version');
    } finally {
      relay.close();
    }
  }

  /** Keeps the lease of the version the engine now serves; the previous one goes only now. */
  private keep(lease: Lease): void {
    if (this.held && this.held.version === lease.version) {
      void lease.release().catch(() => undefined);
      return;
    }
    const previous = this.held;
    this.held = lease;
    void previous?.release().catch(() => undefined);
  }

  /** Partial rollout: load a newer version with trajectories running (pause in place, load, continue). */
  private swapInPlace(session: Session): Promise<void> {
    return this.serialised(async () => {
      if (session.isDown || this.closed) return;
      const { engine } = this.options;
      const started = performance.now();
      try {
        await engine.pause('in_place');
      } catch (err) {
        if ((err as { code?: string }).code === ErrorCodes.ENGINE_UNAVAILABLE) session.markDown(err as Error);
        else this.log.warn({ err: (err as Error).message }, 'the engine did not pause: the new version waits for the next batch');
        return;
      }
      try {
        await this.refreshWeightsNow(session);
      } finally {
        await engine.resume().catch((err: unknown) => session.markDown(err as Error));
        this.metrics.pausedSeconds.observe((performance.now() - started) / 1000);
      }
    });
  }

  /** Weight changes one at a time (the serve loop, the manager's command and the version watch may all ask). */
  private serialised<T>(work: () => Promise<T>): Promise<T> {
    const next = this.weightChain.catch(() => undefined).then(work);
    this.weightChain = next;
    return next;
  }

  /**
   * Watches the local relay for versions as they complete: an idle or draining engine takes a
   * new one at once instead of at its next look, and with partial rollout each is swapped in
   * while trajectories run. A watch that cannot connect (the relay not up yet, or restarting) or
   * that ends is tried again for the whole session, at watchRetryMs; meanwhile the serve loop
   * looks between batches.
   */
  private async watchVersions(session: Session): Promise<void> {
    const stop = AbortSignal.any([this.closing.signal, session.stopWatching.signal]);
    // Read through a call: the awaits below may see it aborted (TS would keep the loop's narrowing).
    const stopped = (): boolean => stop.aborted;
    let attempt = 0;
    while (!stopped()) {
      const relay = await RelayClient.connect({ socketPath: this.options.relaySocket, name: `agent ${this.options.id} (version watch)` }).catch(
        (err: unknown) => {
          if (attempt === 0) this.log.info({ err: (err as Error).message }, 'the version watch cannot reach the relay yet; trying again');
          return null;
        },
      );
      if (relay) await this.watchOnce(session, relay, stop, () => (attempt = 0));
      if (stopped()) return;
      attempt++;
      await delay(watchRetryMs(attempt), stop).catch(() => undefined);
    }
  }

  /** One watch on one connection, until it ends; `heard` is called at each event. */
  private async watchOnce(session: Session, relay: RelayClient, stop: AbortSignal, heard: () => void): Promise<void> {
    try {
      // The replay delivers the newest complete version first: from then on the watch knows.
      for await (const event of relay.watch({ model: this.options.model, replay: true, signal: stop })) {
        heard();
        session.watching = true;
        this.newest = Math.max(this.newest ?? -1, event.version);
        const current = session.client.version;
        if (current === null || event.version <= current || event.version === this.refused) continue;
        if (this.options.partialRollout && session.engine.inFlight > 0) await this.swapInPlace(session);
        else this.wakeAll();
      }
    } catch (err) {
      if (!stop.aborted)
        this.log.warn({ err: (err as Error).message }, 'version watch ended; watching again (new versions are looked for between batches meanwhile)');
    } finally {
      session.watching = false;
      relay.close();
    }
  }

  /** The manager asked for a rebuild: for an HTTP engine, clear it and load the version in use again. */
  private async reinitialise(session: Session): Promise<void> {
    const { engine } = this.options;
    await session.engine.stopAll();
    await engine.abortAll();
    // An adapter stays loaded beside the base: there are no full weights of it to load again.
    if (this.held?.dir && !EngineAdapters.isAdapter(this.held)) {
      await engine.loadWeights(this.held.dir, this.held.version);
    }
  }

  // ---- waiting -----------------------------------------------------------------------------

  /** Read through a call: close() may run while the loop awaits (TS would keep a narrowing of the field). */
  private isClosed(): boolean {
    return this.closed;
  }

  /** Resolves when `work` does, the session's engine goes down, the agent closes, or something wakes the loop. */
  private async until(session: Session, work: Promise<unknown>): Promise<void> {
    let waker!: () => void;
    const woken = new Promise<void>((resolve) => (waker = resolve));
    this.wakers.add(waker);
    try {
      await Promise.race([work.catch(() => undefined), session.down, woken]);
    } finally {
      this.wakers.delete(waker);
    }
  }

  private wakeAll(): void {
    for (const w of [...this.wakers]) w();
  }

  /** Waits `ms`, or less when the agent closes. */
  private pause(ms: number): Promise<void> {
    return delay(ms, this.closing.signal).catch(() => undefined);
  }
}
