/**
 * The simulated trainer of an RL job: it consumes the experience buffer and produces weight
 * versions the way a real trainer does, without a GPU. It publishes its start version (so that
 * rollouts have weights), then repeats: sample a batch from the buffer, "train" for the train
 * time (scaled by the time scale), publish the next version with synthetic tensors, and move the
 * sampler's trainer version on (staleness is trainer version - trajectory version).
 *
 *   const trainer = await SimTrainer.open({ nc, batchSize: 64, steps: 100, publisher });
 *   trainer.events.on('step', (s) => console.log(s.version, s.staleness.mean));
 *   const summary = await trainer.run();   // closes the sampler, publisher and owned NATS at the end
 *
 * Stopping: stop() (or `duration`) ends the run after the step in hand: a wait for a batch is
 * aborted, a batch already sampled is trained and published. stop({ abortStep: true }) abandons
 * the step in hand as well (its batch is dropped; a publish in flight is no longer waited for).
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Registry } from 'prom-client';
import { ClosedError, LaminarError, toLaminarError } from '../../common/errors.js';
import { silentLogger, type Logger } from '../../common/logger.js';
import { createRegistry } from '../../common/metrics.js';
import { histogramPercentile } from '../../common/stats.js';
import { DEFAULT_JOB, connectControl, type ControlOptions } from '../../control/nats-options.js';
import { ExperienceSampler, type Batch, type SamplerOptions } from '../../data/index.js';
import type { TrainerClientOptions } from '../../trainer/index.js';
import { simTrainerMetrics, type SimTrainerMetrics } from './metrics.js';
import { SimTrainerOptionError, parseSimTrainerOptions, strategyOf, type SimTrainerConfig, type SimTrainerOptionsInput } from './options.js';
import { SyntheticWeights, TrainerClientPublisher, type WeightPublishResult, type WeightPublisher } from './weights.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { VersionClock, type StalenessStats } from './version-clock.js';

export interface SimTrainerOptions extends SimTrainerOptionsInput {
  /** An open NATS connection (JetStream for the buffer, control plane for TrainerClient); left open. */
  nc?: NatsConnection;
  /** Or the control plane to connect to (the connection is closed with the trainer). */
  control?: ControlOptions;
  /** Job name for TrainerClient when `nc` is given (default: control.job, else 'laminar'). */
  job?: string;
  /** Where versions go. Default: a TrainerClient to the master relay of the job. */
  publisher?: WeightPublisher;
  /** TrainerClient options (id, host, secret, secretFile, chunkSize, masterWaitMs, forceRemote). */
  trainer?: Omit<TrainerClientOptions, 'nats' | 'logger'>;
  /** Extra sampler options (eviction, rate limit, fetch concurrency, stream limits). */
  sampler?: Pick<SamplerOptions, 'eviction' | 'rateLimit' | 'fetchConcurrency' | 'orphanChunkAgeMs' | 'maxStreamBytes' | 'duplicateWindowMs' | 'onEvict'>;
  /** Registry of the trainer's and the sampler's metrics (default: a private one). */
  registry?: Registry;
  logger?: Logger;
}

export type { StalenessStats };

/** One completed training step. */
export interface SimTrainerStep {
  /** 1-based, counted from the start of this run. */
  step: number;
  /** The version published at the end of the step. */
  version: number;
  /** The trainer version the batch was trained at (its staleness is measured against it). */
  trainedOn: number;
  /** Trajectories in the batch. */
  batch: number;
  /** GRPO groups in the batch. */
  groups: number;
  /** Payload bytes of the batch. */
  bytes: number;
  /** Whether the batch was assembled ahead of time (prefetch). */
  prefetched: boolean;
  /** Wall-clock time spent waiting for the batch. */
  sampleMs: number;
  /** Wall-clock time of the simulated training (train time / time scale). */
  trainMs: number;
  /** Time the publish of `version` blocked the trainer. */
  publishStallMs: number;
  /** Consumption staleness: `trainedOn` − the generating version. */
  staleness: StalenessStats;
  /** Inherent staleness (Figure 10): the trainer's version when the trajectory completed − the generating version. */
  inherent: StalenessStats;
  /** Date.now() at the end of the step. */
  at: number;
}

export type SimTrainerPhase = 'sampling' | 'training' | 'publishing';

export interface SimTrainerPublish {
  version: number;
  /** 'retry': a version the master refused, offered again while the trainer waited for a batch. */
  kind: 'initial' | 'step' | 'retry';
  stallMs: number;
  result: WeightPublishResult;
  /** The master refused the version for lack of room (not published; offered again until it is, or a newer one is). */
  refused?: string;
}

export type SimTrainerStopReason = 'steps' | 'duration' | 'stopped' | 'error';

export interface SimTrainerSummary {
  reason: SimTrainerStopReason;
  /** Steps completed in this run. */
  steps: number;
  /** Newest version published (the start version when none was). */
  version: number;
  trajectories: number;
  elapsedMs: number;
  error?: LaminarError;
}

export interface SimTrainerEvents {
  /** A step entered a phase. */
  phase: [{ step: number; phase: SimTrainerPhase }];
  /** The batch a step trains on (payloads included: do not keep it). */
  sampled: [{ step: number; batch: Batch }];
  /** A version was published (the initial one included). */
  published: [SimTrainerPublish];
  step: [SimTrainerStep];
  /** The run ended and everything is closed. */
  stopped: [SimTrainerSummary];
}

/** Every this long without a batch, the trainer logs what the buffer holds. */
const WAITING_LOG_MS = 10_000;
/** While a batch is awaited, a version the master refused is offered again this often. */
const REDELIVER_EVERY_MS = 1000;

export class SimTrainer {
  readonly events = new EventEmitter<SimTrainerEvents>();
  readonly registry: Registry;
  private readonly log: Logger;
  private readonly m: SimTrainerMetrics;
  private readonly weights: SyntheticWeights;
  private currentVersion: number;
  /** When each version became current: the inherent staleness of what is trained on. */
  private readonly clock = new VersionClock();
  private stepsDone = 0;
  private trajectories = 0;
  private stopReason: SimTrainerStopReason | null = null;
  private readonly sampleAbort = new AbortController();
  private readonly stepAbort = new AbortController();
  private runPromise: Promise<SimTrainerSummary> | null = null;
  private shutdownPromise: Promise<void> | null = null;
  private lastSummary: SimTrainerSummary | null = null;
  /**
   * The newest version, when the master refused it (no room) and no version since got through.
   * Rollouts cannot have it, so the data they write is as old as the last version delivered:
   * with a staleness bound, all of it could be too stale to train on, and the trainer would wait
   * for a batch that never comes. It is offered again while the trainer waits.
   */
  private undelivered: number | null = null;

  private constructor(
    readonly config: Readonly<SimTrainerConfig>,
    /** The experience sampler (stats(), entries() for displays and tests). */
    readonly sampler: ExperienceSampler,
    private readonly publisher: WeightPublisher,
    private readonly nc: NatsConnection,
    private readonly ownsConnection: boolean,
    registry: Registry,
    logger: Logger,
  ) {
    this.registry = registry;
    this.log = logger;
    this.m = simTrainerMetrics(registry);
    this.weights = new SyntheticWeights(config.sizeBytes, config.tensors);
    this.currentVersion = config.startVersion;
  }

  /**
   * Validates the options (SimTrainerOptionError / ERR_BAD_MODEL_ID before anything is
   * connected), connects to NATS unless `nc` is given, opens the sampler and the publisher.
   */
  static async open(options: SimTrainerOptions): Promise<SimTrainer> {
    const config = parseSimTrainerOptions(options);
    if (options.nc === undefined && options.control === undefined) {
      throw new SimTrainerOptionError('nats', 'the simulated trainer needs the NATS servers of the job (or an open connection)');
    }
    const logger = (options.logger ?? silentLogger).child({ component: 'sim-trainer', model: config.model });
    const registry = options.registry ?? createRegistry({ defaultMetrics: false });
    const owns = options.nc === undefined;
    const nc = options.nc ?? (await connectControl(options.control!, `sim-trainer ${hostname()}:${process.pid}`));
    let sampler: ExperienceSampler | undefined;
    try {
      sampler = await ExperienceSampler.open({
        ...options.sampler,
        nc,
        buffer: config.buffer,
        replicas: config.replicas,
        batchSize: config.batchSize,
        strategy: strategyOf(config),
        prefetch: config.prefetch,
        trainerVersion: config.startVersion,
        ...(config.seed !== null ? { seed: config.seed } : {}),
        registry,
        logger,
      });
      const publisher =
        options.publisher ??
        (await TrainerClientPublisher.connect({
          ...options.trainer,
          nats: { nc, job: options.job ?? options.control?.job ?? DEFAULT_JOB },
          model: config.model,
          logger,
        }));
      return new SimTrainer(config, sampler, publisher, nc, owns, registry, logger);
    } catch (err) {
      await sampler?.close().catch(() => undefined);
      if (owns) await nc.close().catch(() => undefined);
      throw err;
    }
  }

  /** Newest version published (the start version until one is). */
  get version(): number {
    return this.currentVersion;
  }

  get completedSteps(): number {
    return this.stepsDone;
  }

  get running(): boolean {
    return this.runPromise !== null && this.lastSummary === null;
  }

  /**
   * Runs until `steps`, `duration`, stop() or an error, then closes the sampler, the publisher
   * and the NATS connection if it owns it. Resolves with a summary; rejects with the error that
   * ended the run (a LaminarError: ERR_BATCH_IMPOSSIBLE, ERR_VERSION_STALE, ...). A second call
   * returns the same promise.
   */
  run(): Promise<SimTrainerSummary> {
    if (this.runPromise) return this.runPromise;
    if (this.shutdownPromise) return Promise.reject(new ClosedError('the simulated trainer is closed'));
    this.runPromise = this.loop();
    return this.runPromise;
  }

  /**
   * Ends the run after the step in hand (abortStep: abandon it too). Resolves with the run's
   * summary once everything is closed (undefined when the run failed or never started).
   */
  async stop(options: { abortStep?: boolean } = {}): Promise<SimTrainerSummary | undefined> {
    this.requestStop('stopped', options.abortStep ?? false);
    if (!this.runPromise) return undefined;
    return this.runPromise.catch(() => undefined);
  }

  /** Stops (abandoning the step in hand) and closes everything. Idempotent. */
  async close(): Promise<void> {
    this.requestStop('stopped', true);
    if (this.runPromise) await this.runPromise.catch(() => undefined);
    await this.shutdown();
  }

  /**
   * The steps completed from now until the run ends, as an async iterator (for displays):
   *   for await (const s of trainer.steps()) render(s);
   */
  steps(): AsyncIterableIterator<SimTrainerStep> {
    const queue: SimTrainerStep[] = [];
    let ended = this.lastSummary !== null || this.shutdownPromise !== null;
    let wake: (() => void) | undefined;
    const onStep = (s: SimTrainerStep): void => {
      queue.push(s);
      wake?.();
    };
    const onStopped = (): void => {
      ended = true;
      wake?.();
    };
    this.events.on('step', onStep);
    this.events.on('stopped', onStopped);
    const unsubscribe = (): void => {
      this.events.off('step', onStep);
      this.events.off('stopped', onStopped);
    };
    const iterator: AsyncIterableIterator<SimTrainerStep> = {
      [Symbol.asyncIterator]: () => iterator,
      next: async () => {
        for (;;) {
          const s = queue.shift();
          if (s) return { value: s, done: false };
          if (ended) {
            unsubscribe();
            return { value: undefined, done: true };
          }
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
        }
      },
      return: () => {
        ended = true;
        queue.length = 0;
        unsubscribe();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
    return iterator;
  }

  private requestStop(reason: SimTrainerStopReason, abortStep: boolean): void {
    this.stopReason ??= reason;
    this.sampleAbort.abort();
    if (abortStep) this.stepAbort.abort();
  }

  private async loop(): Promise<SimTrainerSummary> {
    const started = performance.now();
    const { durationMs, steps } = this.config;
    const timer = durationMs !== null ? setTimeout(() => this.requestStop('duration', false), durationMs) : undefined;
    let error: unknown;
    this.log.info(
      {
        version: this.currentVersion,
        buffer: this.config.buffer,
        batchSize: this.config.batchSize,
        strategy: strategyOf(this.config).name,
        bytes: this.weights.bytes,
        tensors: this.config.tensors,
        trainWallMs: this.config.trainWallMs,
      },
      'simulated trainer started',
    );
    try {
      if (this.config.initialPublish && this.stopReason === null) await this.publish(this.currentVersion, 'initial');
      while (this.stopReason === null) {
        if (steps !== null && this.stepsDone >= steps) {
          this.stopReason = 'steps';
          break;
        }
        if ((await this.step()) === undefined) break;
      }
    } catch (err) {
      error = err;
    } finally {
      clearTimeout(timer);
    }
    try {
      await this.shutdown();
    } catch (err) {
      error ??= err;
    }
    const summary: SimTrainerSummary = {
      reason: error !== undefined ? 'error' : (this.stopReason ?? 'stopped'),
      steps: this.stepsDone,
      version: this.currentVersion,
      trajectories: this.trajectories,
      elapsedMs: performance.now() - started,
      ...(error !== undefined ? { error: toLaminarError(error) } : {}),
    };
    this.lastSummary = summary;
    if (error !== undefined) this.log.error({ err: summary.error, steps: summary.steps, version: summary.version }, 'simulated trainer failed');
    else this.log.info({ reason: summary.reason, steps: summary.steps, version: summary.version }, 'simulated trainer stopped');
    this.events.emit('stopped', summary);
    if (summary.error) throw summary.error;
    return summary;
  }

  /** One step; undefined when a stop cut it short. */
  private async step(): Promise<SimTrainerStep | undefined> {
    const n = this.stepsDone + 1;
    this.events.emit('phase', { step: n, phase: 'sampling' });
    const sampleStarted = performance.now();
    let batch: Batch;
    const waiting = setInterval(() => {
      const stats = this.sampler.stats();
      this.log.info(
        { step: n, waitedS: Math.round((performance.now() - sampleStarted) / 1000), items: stats.items, batchSize: this.config.batchSize },
        'waiting for a batch',
      );
    }, WAITING_LOG_MS);
    const redelivery = new AbortController();
    const redelivering = this.redeliverUntil(redelivery.signal);
    try {
      batch = await this.sampler.sample({ signal: this.sampleAbort.signal });
    } catch (err) {
      if (this.stopReason !== null && (err as LaminarError).code === ErrorCodes.ABORTED) return undefined;
      throw err;
    } finally {
      clearInterval(waiting);
      redelivery.abort();
      // A re-offer under way finishes before this step's own publish (they share the weight buffers).
      await redelivering;
    }
    const sampleMs = performance.now() - sampleStarted;
    this.events.emit('sampled', { step: n, batch });
    // A real trainer copies the batch to its GPUs here; the host bytes are then free for the
    // next batch (the simulated step only needs the batch's metadata from now on).
    batch.release();
    this.events.emit('phase', { step: n, phase: 'training' });
    const trainStarted = performance.now();
    try {
      await sleep(this.config.trainWallMs, undefined, { signal: this.stepAbort.signal });
    } catch (err) {
      if (!this.stepAbort.signal.aborted) throw err;
      this.log.warn({ step: n, trajectories: batch.items.length }, 'step abandoned while training: its batch is dropped');
      return undefined;
    }
    const trainMs = performance.now() - trainStarted;
    this.events.emit('phase', { step: n, phase: 'publishing' });
    const next = this.currentVersion + 1;
    const published = await this.publish(next, 'step');
    if (published === undefined) return undefined;
    this.sampler.setTrainerVersion(next);
    this.stepsDone = n;
    this.trajectories += batch.items.length;
    const record: SimTrainerStep = {
      step: n,
      version: next,
      trainedOn: batch.trainerVersion,
      batch: batch.items.length,
      groups: batch.groups.length,
      bytes: batch.bytes,
      prefetched: batch.prefetched,
      sampleMs,
      trainMs,
      publishStallMs: published.stallMs,
      staleness: {
        p50: histogramPercentile(batch.staleness.histogram, 0.5),
        min: batch.staleness.min,
        max: batch.staleness.max,
        mean: batch.staleness.mean,
        histogram: { ...batch.staleness.histogram },
      },
      inherent: this.clock.inherent(batch.items),
      at: Date.now(),
    };
    this.m.steps.inc();
    this.m.batchSize.set(record.batch);
    this.m.trajectories.inc(record.batch);
    for (const [value, count] of Object.entries(batch.staleness.histogram)) for (let i = 0; i < count; i++) this.m.staleness.observe(Number(value));
    for (const [value, count] of Object.entries(record.inherent.histogram)) for (let i = 0; i < count; i++) this.m.inherentStaleness.observe(Number(value));
    this.m.sampleWait.observe(sampleMs / 1000);
    this.m.train.observe(trainMs / 1000);
    this.log.debug({ ...record, histogram: undefined }, 'step');
    this.events.emit('step', record);
    return record;
  }

  /**
   * SHA-256 of the bytes of the version published last (its tensors in order), as the trainer
   * wrote them: the record a soak or an audit compares what every relay holds against. Call it
   * from a 'published' listener: the buffers are stamped again at the next publish.
   */
  publishedChecksum(): string {
    const hash = createHash('sha256');
    for (const t of this.weights.tensors) hash.update(t.data);
    return hash.digest('hex');
  }

  /** Offers the refused version again every REDELIVER_EVERY_MS until it gets through or `signal` aborts. */
  private async redeliverUntil(signal: AbortSignal): Promise<void> {
    while (this.undelivered !== null && !signal.aborted) {
      try {
        await sleep(REDELIVER_EVERY_MS, undefined, { signal });
      } catch {
        return; // the batch came
      }
      const version = this.undelivered;
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- a publish elsewhere may have cleared it during the sleep
      if (version === null) return;
      try {
        await this.publish(version, 'retry');
      } catch (err) {
        // Not this step's failure: its own publish reports what persists.
        this.log.warn({ version, err: (err as Error).message }, 'offering the refused version again failed');
      }
    }
  }

  /** Publishes `version`; undefined when the step was abandoned before the publish finished. */
  private async publish(version: number, kind: SimTrainerPublish['kind']): Promise<SimTrainerPublish | undefined> {
    const signal = this.stepAbort.signal;
    if (signal.aborted) return undefined;
    const pending = this.publisher.publish(version, this.weights.stamp(version));
    let result: WeightPublishResult;
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<undefined>((resolve) => {
      onAbort = () => resolve(undefined);
      signal.addEventListener('abort', onAbort, { once: true });
    });
    const started = performance.now();
    try {
      const r = await Promise.race([pending, aborted]);
      if (r === undefined) {
        pending.catch(() => undefined);
        this.log.warn({ version }, 'publish abandoned (stopping)');
        return undefined;
      }
      result = r;
    } catch (err) {
      // A master out of room (its memory budget held by leased versions) refuses this version;
      // training goes on and the next step's version is offered instead, as a real trainer
      // would rather than stop the job.
      if ((err as LaminarError).code !== ErrorCodes.MEMORY_BUDGET) throw err;
      this.m.publishRefused.inc({ kind });
      if (kind !== 'retry')
        this.log.warn(
          { version, err: (err as Error).message },
          'the master refused this version (no room): training goes on, and it is offered again until it gets through',
        );
      this.undelivered = version;
      this.currentVersion = version;
      this.clock.published(version, Date.now());
      this.m.version.set(version);
      const stallMs = performance.now() - started;
      return { version, kind, stallMs, result: { stallMs }, refused: ErrorCodes.MEMORY_BUDGET };
    } finally {
      signal.removeEventListener('abort', onAbort!);
    }
    const stallMs = result.stallMs;
    if (this.undelivered !== null && version >= this.undelivered) {
      if (kind === 'retry') this.log.info({ version }, 'the refused version got through');
      this.undelivered = null;
    }
    this.currentVersion = version;
    this.clock.published(version, Date.now());
    this.m.version.set(version);
    this.m.publishes.inc({ kind });
    this.m.publishStall.observe({ kind }, stallMs / 1000);
    // The master verifies the version while the next step trains (TrainerClient's log says why one failed).
    void result.visible?.then(
      (v) => this.m.publishVisible.observe({ kind }, v.visibleSeconds),
      () => this.m.publishRefused.inc({ kind }),
    );
    const record: SimTrainerPublish = { version, kind, stallMs, result };
    this.events.emit('published', record);
    return record;
  }

  /** Closes the sampler, the publisher and the owned connection, once. */
  private shutdown(): Promise<void> {
    this.shutdownPromise ??= (async () => {
      let first: unknown;
      const attempt = async (what: string, fn: () => Promise<unknown>): Promise<void> => {
        try {
          await fn();
        } catch (err) {
          this.log.warn({ err: (err as Error).message }, `closing the ${what} failed`);
          first ??= err;
        }
      };
      await attempt('sampler', () => this.sampler.close());
      await attempt('publisher', () => this.publisher.close());
      if (this.ownsConnection) await attempt('NATS connection', () => this.nc.drain());
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- rethrows the first close() failure exactly as it was thrown (`unknown`, narrowed to `{} | null`)
      if (first !== undefined) throw first;
    })();
    return this.shutdownPromise;
  }
}

/** Re-exported from its pure home (src/common/stats.ts), so that importers of sim-trainer keep it. */
export { histogramPercentile as percentile };

/**
 * The `--json --removals` line of trajectories leaving the buffer: {removed: reason, ids}. The
 * sampler reports removals before it sends their deletion, so an audit that reads these lines
 * knows every record the trainer deleted.
 */
export function removalJson(entries: readonly { id: string }[], reason: string): { removed: string; ids: string[] } {
  return { removed: reason, ids: entries.map((e) => e.id) };
}

/** The `--json` line of a step: {step, version, batch, sample_ms, train_ms, publish_stall_ms, staleness: {p50, max, mean, histogram}, inherent: {...}}. */
export function stepJson(s: SimTrainerStep): {
  step: number;
  version: number;
  batch: number;
  sample_ms: number;
  train_ms: number;
  publish_stall_ms: number;
  staleness: StalenessJson;
  inherent: StalenessJson;
} {
  const ms = (x: number): number => Math.round(x * 1000) / 1000;
  return {
    step: s.step,
    version: s.version,
    batch: s.batch,
    sample_ms: ms(s.sampleMs),
    train_ms: ms(s.trainMs),
    publish_stall_ms: ms(s.publishStallMs),
    staleness: stalenessJson(s.staleness),
    inherent: stalenessJson(s.inherent),
  };
}

/**
 * A batch's staleness in the `--json` line. The histogram lets a reader summarise a whole run over
 * its trajectories (the median of the batches' medians is not the run's median, and can fall
 * between two versions).
 */
export interface StalenessJson {
  p50: number;
  max: number;
  mean: number;
  /** staleness value -> trajectories of the batch. */
  histogram: Record<number, number>;
}

function stalenessJson(s: StalenessStats): StalenessJson {
  return { p50: s.p50, max: s.max, mean: Math.round(s.mean * 1e4) / 1e4, histogram: { ...s.histogram } };
}

/** A short human line for a step (stderr of the CLI). */
export function formatStep(s: SimTrainerStep): string {
  return (
    `step ${s.step} -> v${s.version}: ${s.batch} trajectories (${s.groups} groups), ` +
    `staleness p50 ${s.staleness.p50} max ${s.staleness.max} mean ${s.staleness.mean.toFixed(2)} ` +
    `(inherent p50 ${s.inherent.p50} max ${s.inherent.max}), ` +
    `sample ${s.sampleMs.toFixed(0)} ms, train ${s.trainMs.toFixed(0)} ms, publish stall ${s.publishStallMs.toFixed(0)} ms`
  );
}
