/**
 * A simulated rollout engine on the real SDK: continuous batching over the engine core
 * (engine-core.ts) driven by a virtual clock, so that minutes of generation run in seconds
 * (`timeScale` simulated seconds per wall second).
 *
 * The rollout's life is the paper's (§3.2, §5): pull the newest weights from the local relay,
 * claim a batch of prompts, generate until the batch is done, and start over with the newest
 * weights. Repack can empty it earlier (its trajectories move to a denser rollout) or fill it
 * (it resumes another's trajectories with the same weights).
 *
 * Output lengths are a function of the trajectory id (long-tail, p99 ≈ 10 × median), so a
 * trajectory resumed elsewhere keeps the length it would have had.
 */
import type { Logger } from 'pino';
import { delay } from '../../common/concurrency.js';
import { silentLogger } from '../../common/logger.js';
import type { EngineLoad, GenerationTask, RolloutClient, RolloutEngine } from '../../rollout/index.js';
import { DEFAULT_ENGINE_PROFILE, EngineCore, type EngineProfile, type SimRequest } from '../engine-core.js';
import { makeRng, outputLengthOf, samplePromptLength, seedOf } from '../lengths.js';

export interface SimEngineOptions {
  profile?: Partial<EngineProfile>;
  /** Simulated seconds per wall second. */
  timeScale?: number;
  /** Prompts claimed per batch (each brings its group of n samples). */
  batchPrompts?: number;
  outputMedian?: number;
  p99OverMedian?: number;
  outputMax?: number;
  promptMedian?: number;
  seed?: number;
  /**
   * Where weights come from when the rollout has no local relay: the version to generate with
   * (tests and benchmarks that leave the weight path out). With a relay, weights are pulled.
   */
  weightVersion?: () => number;
  /** Called for each trajectory this engine finished (benchmarks: staleness, lengths). */
  onFinished?: (task: GenerationTask, outcome: 'completed' | 'duplicate' | 'lost') => void;
  /** Wall time of one engine rebuild (reinitialise), simulated. */
  reinitialiseMs?: number;
  logger?: Logger;
}

export interface SimEngineStats {
  tokens: number;
  completed: number;
  lost: number;
  batches: number;
  /** Simulated seconds the engine had requests, and the KV-utilisation integral over them. */
  busySimSeconds: number;
  kvSeconds: number;
  simSeconds: number;
}

const TICK_MS = 10;
const STEP_BUDGET_MS = 4;
/** Behind the scaled wall clock by more than this (wall ms), the simulation slows down rather than catch up. */
const MAX_LAG_MS = 50;

export class SimRolloutEngine implements RolloutEngine {
  private core: EngineCore;
  private readonly profile: EngineProfile;
  private readonly timeScale: number;
  private readonly tasks = new Map<string, GenerationTask>();
  private readonly rng: () => number;
  private client: RolloutClient | null = null;
  private timer: NodeJS.Timeout | null = null;
  private simNow = 0;
  private wallStart = 0;
  private stopping = false;
  private refilling = false;
  private paused = false;
  private readonly recent: { at: number; tokens: number }[] = [];
  readonly stats: SimEngineStats = { tokens: 0, completed: 0, lost: 0, batches: 0, busySimSeconds: 0, kvSeconds: 0, simSeconds: 0 };
  private readonly log: Logger;

  constructor(private readonly options: SimEngineOptions = {}) {
    this.profile = { ...DEFAULT_ENGINE_PROFILE, ...options.profile };
    this.timeScale = options.timeScale ?? 1;
    this.rng = makeRng(options.seed ?? 1);
    this.core = new EngineCore(this.profile, this.rng);
    this.log = (options.logger ?? silentLogger).child({ component: 'sim-engine' });
  }

  /** Starts generating through `client` (weights, claims, tokens, completions). */
  start(client: RolloutClient): void {
    this.client = client;
    this.wallStart = performance.now();
    this.timer = setInterval(() => this.advance(), TICK_MS);
  }

  stop(tasks: readonly GenerationTask[]): Promise<void> {
    // Steps run synchronously inside advance(): between two ticks nothing is half-appended.
    // (The executor runs at once; what it throws rejects the promise.)
    return new Promise((resolve) => {
      this.core.remove(tasks.map((t) => t.trajectoryId));
      for (const t of tasks) this.tasks.delete(t.trajectoryId);
      resolve();
    });
  }

  resume(tasks: readonly GenerationTask[]): Promise<void> {
    // The executor runs at once; a request submit() refuses rejects the promise.
    return new Promise((resolve) => {
      for (const t of tasks) {
        this.tasks.set(t.trajectoryId, t);
        this.core.submit({
          id: t.trajectoryId,
          promptTokens: t.promptTokens.length,
          targetTokens: Math.max(t.generated + 1, this.outputLength(t.trajectoryId, t.promptTokens.length)),
          generated: Array.from(t.generatedTokens),
          logprobs: Array.from(t.generatedLogprobs),
        });
      }
      resolve();
    });
  }

  async updateWeights(): Promise<void> {
    // Nothing to do now: an engine does not swap weights under running requests, and this one
    // takes the newest weights before every batch but its first (refill) anyway.
  }

  async reinitialise(): Promise<void> {
    this.paused = true;
    this.core.drain();
    this.tasks.clear();
    await delay((this.options.reinitialiseMs ?? 2000) / this.timeScale);
    this.core = new EngineCore(this.profile, this.rng);
    this.paused = false;
  }

  load(): EngineLoad {
    const now = performance.now();
    while (this.recent.length > 0 && now - this.recent[0]!.at > 2000) this.recent.shift();
    const tokens = this.recent.reduce((a, r) => a + r.tokens, 0);
    return { kvUsed: this.core.kvUtilisation, running: this.core.running, waiting: this.core.waiting, tokensPerSecond: tokens / 2 };
  }

  tokenize(payload: unknown): Int32Array {
    const rng = makeRng(seedOf(JSON.stringify(payload ?? null)));
    const length = samplePromptLength(rng, { median: this.options.promptMedian ?? 128, max: Math.floor(this.profile.kvCapacityTokens / 4) });
    const out = new Int32Array(length);
    for (let i = 0; i < length; i++) out[i] = Math.floor(rng() * 151_936);
    return out;
  }

  close(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    return Promise.resolve();
  }

  get owned(): number {
    return this.tasks.size;
  }

  private outputLength(trajectoryId: string, promptTokens: number): number {
    const max = Math.min(this.options.outputMax ?? 4096, Math.floor(this.profile.kvCapacityTokens / 8), this.profile.kvCapacityTokens - promptTokens - 1);
    return outputLengthOf(trajectoryId, {
      median: this.options.outputMedian ?? 512,
      p99OverMedian: this.options.p99OverMedian ?? 10,
      max,
    });
  }

  /** Runs the engine until simulated time catches up with the scaled wall clock. */
  private advance(): void {
    if (this.stopping || this.paused || !this.client) return;
    const target = (performance.now() - this.wallStart) * this.timeScale;
    if (this.core.idle) {
      this.stats.simSeconds = target / 1e3;
      this.simNow = target;
      this.client.setState('idle');
      void this.refill();
      return;
    }
    this.client.setState('generating');
    // A few milliseconds of steps per tick at most: the event loop also carries this rollout's
    // control plane (and, in one process, other rollouts). When the machine cannot keep up,
    // simulated time runs slower instead of the loop blocking.
    const budgetEnd = performance.now() + STEP_BUDGET_MS;
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- `idle` is a getter that step() changes; TS keeps the narrowing from the check above
    while (this.simNow < target && !this.core.idle && performance.now() < budgetEnd) {
      const kv = this.core.kvUtilisation;
      const step = this.core.step();
      const ms = Math.max(step.ms, 0.001);
      this.simNow += ms;
      this.stats.busySimSeconds += ms / 1e3;
      this.stats.kvSeconds += (kv * ms) / 1e3;
      this.deliver(step.tokens, step.finished);
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- `idle` is a getter that step() changes; TS keeps the narrowing from the check above
    if (this.core.idle) this.simNow = Math.max(this.simNow, target);
    const lagMs = (target - this.simNow) / this.timeScale;
    if (lagMs > MAX_LAG_MS) this.wallStart += lagMs;
    this.stats.simSeconds = this.simNow / 1e3;
  }

  private deliver(tokens: { id: string; token: number; logprob: number }[], finished: SimRequest[]): void {
    let count = 0;
    for (const t of tokens) {
      const task = this.tasks.get(t.id);
      if (!task) continue;
      if (!task.append([t.token], [t.logprob])) {
        // Taken by another rollout (we were declared dead and came back): drop it.
        this.core.remove([t.id]);
        this.tasks.delete(t.id);
        this.stats.lost++;
        continue;
      }
      count++;
    }
    this.stats.tokens += count;
    this.recent.push({ at: performance.now(), tokens: count });
    for (const f of finished) {
      const task = this.tasks.get(f.id);
      if (!task) continue;
      this.tasks.delete(f.id);
      // A verifiable-reward stand-in: deterministic per trajectory.
      const reward = makeRng(seedOf(`${f.id}/reward`))() < 0.5 ? 1 : 0;
      void this.completeWithRetry(task, reward);
    }
  }

  /** Completes a finished trajectory, retrying through store outages (the task stays ours meanwhile). */
  private async completeWithRetry(task: GenerationTask, reward: number): Promise<void> {
    for (let attempt = 0; !this.stopping; attempt++) {
      try {
        const outcome = await task.complete({ reward });
        if (outcome === 'lost') this.stats.lost++;
        else this.stats.completed++;
        this.options.onFinished?.(task, outcome);
        return;
      } catch (err) {
        this.log.warn({ trajectory: task.trajectoryId, attempt, err: (err as Error).message }, 'completion failed (retrying)');
        await delay(Math.min(5000, 200 * 2 ** attempt));
      }
    }
  }

  /** An idle engine takes the newest weights and the next batch of prompts. */
  private async refill(): Promise<void> {
    if (this.refilling || !this.client) return;
    this.refilling = true;
    try {
      const client = this.client;
      const newer = client.version === null || this.stats.batches > 0;
      if (newer && this.options.weightVersion) {
        client.setWeightVersion(this.options.weightVersion());
      } else if (newer) {
        try {
          const { lease } = await client.acquireWeights({ atLeast: client.version ?? 0, timeoutMs: 5000 });
          // The simulated load of the weights into the engine: the tensors are read from shared memory.
          await lease.release();
        } catch (err) {
          if (client.version === null) {
            this.log.debug({ err: (err as Error).message }, 'no weights yet');
            return;
          }
          // Trajectories were resumed here meanwhile (a repack-in): generating them comes first.
          if (!this.core.idle) return;
        }
      }
      const tasks = await client.claim(this.options.batchPrompts ?? 32);
      if (tasks.length === 0) {
        await delay(200);
        return;
      }
      this.stats.batches++;
      await this.resume(tasks);
      this.wallStart = performance.now() - this.simNow / this.timeScale;
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'refill failed (retrying)');
      await delay(500);
    } finally {
      this.refilling = false;
    }
  }
}
