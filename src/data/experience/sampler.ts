/**
 * The trainer's side of the experience buffer. It indexes the stream's records (metadata only),
 * applies the eviction policy and the rate limiter, lets the sampling strategy choose each
 * batch and, with prefetch on, assembles the next batch while the current one trains, so that
 * sample() of a ready batch returns at once. Memory: the index (a few hundred bytes per
 * trajectory) plus the payloads of the batches being prefetched; the memory of a batch the
 * trainer released (Batch.release()) is kept for the next one (arena-pool.ts).
 *
 * This file is the API and the sample() loop; the parts are buffer-books.ts (the index and what
 * enters and leaves it), batch-assembly.ts (loading a batch and handing it over), prefetch.ts
 * (the next batch assembled ahead) and sampler-metrics.ts.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstream, type JetStreamManager } from '@nats-io/jetstream';
import { openJetStreamManager } from '../jetstream-manager.js';
import type { Registry } from 'prom-client';
import { createRegistry } from '../../common/metrics.js';
import { silentLogger, type Logger } from '../../common/logger.js';
import { ClosedError, TimeoutError } from '../../common/errors.js';
import { AbortedError, DataInputError, ImpossibleRequestError } from '../errors.js';
import { onCollect } from '../../common/metric-factory.js';
import { RejectionCounter } from '../metrics.js';
import { ChangeNotifier } from '../waiter.js';
import type { BufferEntry } from './entry.js';
import { resolveEviction, type EvictionOptions, type ResolvedEviction } from './eviction.js';
import { RateLimiter, type RateLimitOptions } from './rate-limiter.js';
import { fifo } from './strategies/basic.js';
import { seededRandom, type SamplingStrategy } from './strategies/strategy.js';
import { ensureBufferStream, type BufferNames, type BufferStreamOptions } from './stream.js';
import { CompletionMarks } from './completion-marks.js';
import { batchSummaryPublisher } from './batch-summary.js';
import { IndexFeed } from './index-feed.js';
import { ReadActivity } from './read-activity.js';
import type { Batch } from './batch.js';
import { BatchAssembler, RecordsMissing, type Picked } from './batch-assembly.js';
import { BufferBooks } from './buffer-books.js';
import { Prefetch } from './prefetch.js';
import { privateArenas, type ArenaAllocator } from './arena-allocator.js';
import { samplerMetrics, type SamplerMetrics } from './sampler-metrics.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface SamplerOptions extends BufferStreamOptions {
  nc: NatsConnection;
  /** Trajectories per batch (the prefetched batch has this size). */
  batchSize: number;
  strategy?: SamplingStrategy;
  eviction?: EvictionOptions;
  rateLimit?: RateLimitOptions;
  /**
   * When the next batch is assembled. true (default): as soon as the current one is handed
   * over, so that it is ready by the next sample(); the trainer's batch and the next one are
   * both in memory. 'after-release': once the trainer releases the current batch
   * (Batch.release()), into its memory, or at the next sample() if it never does; a trainer that
   * releases after its device copy holds about one batch, and the next batch has the rest of
   * the training step to assemble. false: inside sample().
   */
  prefetch?: boolean | 'after-release';
  /** Buffers of released batches kept for later batches (arena-pool.ts). Default 1; 0 never reuses. */
  spareArenas?: number;
  /**
   * Where batch memory comes from (arena-allocator.ts). Default: private ArrayBuffers of this
   * process (privateArenas()); the sampler service gives shared-memory files a trainer in
   * another process maps. Released blocks are reused either way (spareArenas).
   */
  arenas?: ArenaAllocator;
  /** The trainer's weight version at start (staleness = trainer - trajectory version). */
  trainerVersion?: number;
  /** Seed of the random source used by strategies. */
  seed?: number;
  /** Direct gets in flight while loading a batch. Default 64. */
  fetchConcurrency?: number;
  /**
   * A chunk that no record has claimed this long after it was stored (server time) is an orphan
   * of a writer that crashed mid-write, and is deleted (counted). Keep it well above the
   * longest a writer may take between its first chunk and its record. Default 15 min.
   */
  orphanChunkAgeMs?: number;
  /**
   * Sampled-out and evicted records are deleted from the stream between two batch assemblies
   * (a deletion slows down a batch's fetch that runs beside it), waiting at most this long for
   * such a moment. Default 10 s.
   */
  maxDeletionDelayMs?: number;
  /** Called with what each eviction removed and why (also counted in metrics). */
  onEvict?: (entries: readonly BufferEntry[], reason: string) => void;
  /**
   * Publish a summary of each batch handed over (its trainer version and staleness counts) on
   * `laminar.expbatch.<buffer>`, where the manager reports consumption staleness from. Default true.
   */
  publishBatchSummaries?: boolean;
  registry?: Registry;
  logger?: Logger;
}

export interface SampleOptions {
  /** Default: wait forever. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface SamplerStats {
  items: number;
  bytes: number;
  reserved: number;
  inserts: number;
  samples: number;
  evicted: Record<string, number>;
  corrupt: number;
  /** Orphan chunks (left by writers that crashed mid-write) found and deleted. */
  orphanChunks: number;
  readyBatches: number;
  /** Memory of released batches kept for the next ones. */
  spareArenaBytes: number;
  /** Stream messages (records and chunks) waiting to be deleted. */
  pendingDeletions: number;
  trainerVersion: number;
}

export class ExperienceSampler {
  readonly names: BufferNames;
  private readonly books: BufferBooks;
  private readonly changed = new ChangeNotifier();
  private readonly limiter: RateLimiter;
  private readonly eviction: ResolvedEviction;
  private readonly strategy: SamplingStrategy;
  private readonly reads = new ReadActivity();
  private readonly feed: IndexFeed;
  private readonly assembler: BatchAssembler;
  private readonly prefetch: Prefetch;
  private readonly rejections: RejectionCounter;
  private readonly logger: Logger;
  private readonly unhookSettle: () => void;
  private trainerVersion: number;
  private closed = false;
  private readonly m: SamplerMetrics;

  private constructor(
    private readonly options: SamplerOptions,
    jsm: JetStreamManager,
    names: BufferNames,
    registry: Registry,
  ) {
    this.names = names;
    this.logger = (options.logger ?? silentLogger).child({ component: 'experience-sampler', buffer: names.buffer });
    this.rejections = new RejectionCounter(registry, 'sampler');
    this.m = samplerMetrics(registry, names.buffer);
    this.limiter = new RateLimiter(options.rateLimit);
    this.eviction = resolveEviction(options.eviction);
    this.strategy = options.strategy ?? fifo();
    this.trainerVersion = options.trainerVersion ?? 0;
    const marks = new CompletionMarks(jetstream(options.nc), jsm, names);
    this.books = new BufferBooks({
      buffer: names.buffer,
      jsm,
      stream: names.stream,
      eviction: this.eviction,
      random: seededRandom(options.seed ?? 0x1a31a5),
      trainerVersion: () => this.trainerVersion,
      lastFedSeq: () => this.feed.lastSeq,
      reads: this.reads,
      orphanChunkAgeMs: options.orphanChunkAgeMs ?? 15 * 60_000,
      maxDeletionDelayMs: options.maxDeletionDelayMs,
      markCompleted: (ids) => marks.mark(ids),
      metrics: this.m,
      rejections: this.rejections,
      changed: this.changed,
      onEvict: options.onEvict,
      logger: this.logger,
    });
    this.feed = new IndexFeed(
      jetstream(options.nc),
      names,
      {
        record: (seq, meta, timeMs) => this.books.record(seq, meta, timeMs),
        chunk: (seq, timeMs) => this.books.chunk(seq, timeMs),
        corrupt: (seq, err) => this.books.corruptRecord(seq, err),
      },
      this.logger,
    );
    this.assembler = new BatchAssembler({
      buffer: names.buffer,
      js: jetstream(options.nc),
      jsm,
      stream: names.stream,
      recordFilter: names.recordFilter,
      fetchConcurrency: options.fetchConcurrency ?? 64,
      spareArenas: options.spareArenas ?? 1,
      arenas: options.arenas ?? privateArenas(),
      books: this.books,
      strategy: this.strategy,
      maxTimesSampled: this.eviction.maxTimesSampled,
      trainerVersion: () => this.trainerVersion,
      onHandedOver: options.publishBatchSummaries === false ? undefined : batchSummaryPublisher(options.nc, names.buffer),
      reads: this.reads,
      metrics: this.m,
      rejections: this.rejections,
      changed: this.changed,
      released: (holding) => this.prefetch.released(holding),
    });
    this.prefetch = new Prefetch({
      books: this.books,
      assembler: this.assembler,
      pick: () => this.pickSafely(),
      closed: () => this.closed,
      reads: this.reads,
      changed: this.changed,
      logger: this.logger,
    });
    // A scrape sees the index with the bookkeeping of handed-over batches applied.
    this.unhookSettle = onCollect(this.m.items, () => this.books.settle());
  }

  /** Opens the sampler: rebuilds the index from the stream, then keeps following it. */
  static async open(options: SamplerOptions): Promise<ExperienceSampler> {
    if (!Number.isInteger(options.batchSize) || options.batchSize < 1)
      throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `batchSize must be an integer >= 1, got ${options.batchSize}`);
    if (options.orphanChunkAgeMs !== undefined && !(options.orphanChunkAgeMs >= 0)) {
      throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `orphanChunkAgeMs must be a number >= 0, got ${options.orphanChunkAgeMs}`);
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- validates options from JavaScript callers of the public API, where the type does not hold
    if (options.prefetch !== undefined && typeof options.prefetch !== 'boolean' && options.prefetch !== 'after-release') {
      throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `prefetch must be true, false or 'after-release', got ${String(options.prefetch)}`);
    }
    if (options.spareArenas !== undefined && !(Number.isInteger(options.spareArenas) && options.spareArenas >= 0)) {
      throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `spareArenas must be an integer >= 0, got ${options.spareArenas}`);
    }
    if (options.maxDeletionDelayMs !== undefined && !(options.maxDeletionDelayMs >= 0 && Number.isFinite(options.maxDeletionDelayMs))) {
      throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `maxDeletionDelayMs must be a finite number >= 0, got ${options.maxDeletionDelayMs}`);
    }
    const jsm = await openJetStreamManager(options.nc);
    const names = await ensureBufferStream(jsm, options);
    const s = new ExperienceSampler(options, jsm, names, options.registry ?? createRegistry({ defaultMetrics: false }));
    s.checkPossible(options.batchSize);
    if (s.limiter.minSize > s.eviction.maxItems) {
      throw new ImpossibleRequestError(
        ErrorCodes.BATCH_IMPOSSIBLE,
        `minSizeToSample ${s.limiter.minSize} exceeds the capacity of ${s.eviction.maxItems} items`,
      );
    }
    await s.feed.start();
    await s.feed.ready;
    if (options.prefetch !== false) s.prefetch.start();
    return s;
  }

  /** The trainer moved to a new weight version: staleness is measured against it. */
  setTrainerVersion(version: number): void {
    if (!Number.isInteger(version) || version < this.trainerVersion) {
      throw this.rejections.record(
        new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `trainer version must be an integer >= ${this.trainerVersion}, got ${version}`),
      );
    }
    this.trainerVersion = version;
    this.changed.notify();
  }

  /** Sets the priority of a trajectory still in the buffer (prioritized strategy). */
  updatePriority(id: string, priority: number): boolean {
    this.books.settle();
    const e = this.books.index.get(id);
    if (!e || !(priority >= 0) || !Number.isFinite(priority)) return false;
    e.priority = priority;
    this.changed.notify();
    return true;
  }

  /**
   * The next batch of `batchSize` trajectories. Blocks until the strategy and the rate limiter
   * allow one (timeoutMs -> ERR_TIMEOUT, signal -> ERR_ABORTED); a batch that can never exist
   * is ERR_BATCH_IMPOSSIBLE at once.
   */
  async sample(options: SampleOptions = {}): Promise<Batch> {
    const started = performance.now();
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    try {
      for (;;) {
        if (this.closed) throw new ClosedError('the sampler is closed');
        this.checkPossible(this.options.batchSize);
        let batch = this.prefetch.take();
        // Room for the next prefetch; woken after this call returns, so that assembling the
        // next batch does not delay the hand-over of this one.
        if (batch) setImmediate(() => this.changed.notify());
        else if (this.prefetch.awaiting) {
          // 'after-release': the trainer wants the next batch without releasing the last one.
          this.prefetch.stopAwaitingRelease();
        } else if (this.options.prefetch === false) {
          const picked = this.pick(this.options.batchSize);
          if (picked) {
            try {
              batch = await this.assembler.assemble(picked, false);
            } catch (err) {
              if (err instanceof RecordsMissing) continue;
              this.unpick(picked);
              throw err;
            }
            // The caller gave up while the payloads loaded (the sampler service's client went
            // away): handing the batch over would count its records as trained on, and nobody
            // would have them. They stay in the buffer for the next sample().
            if (options.signal?.aborted) {
              this.unpick(picked);
              batch.batch.release();
              this.changed.notify();
              throw new AbortedError('sample() was aborted while its batch was assembled', options.signal.reason);
            }
          }
        }
        if (batch) {
          const handed = this.assembler.handOver(batch);
          if (handed) {
            if (this.options.prefetch === 'after-release') this.prefetch.awaitRelease(batch.holding);
            this.m.latency.observe({ buffer: this.names.buffer, prefetched: String(handed.prefetched) }, (performance.now() - started) / 1000);
            return handed;
          }
          continue;
        }
        await this.changed.wait({ deadline, signal: options.signal, what: 'sample()' });
      }
    } catch (err) {
      if (err instanceof TimeoutError)
        throw this.rejections.record(new TimeoutError(`no batch of ${this.options.batchSize} within ${options.timeoutMs} ms`, { ...this.stats() }));
      throw this.rejections.record(err);
    }
  }

  stats(): SamplerStats {
    const books = this.books;
    books.settle();
    return {
      items: books.index.size,
      bytes: books.index.bytes,
      reserved: books.index.reservedCount,
      inserts: books.inserts,
      samples: books.samples,
      evicted: { ...books.evicted },
      corrupt: books.corrupt,
      orphanChunks: books.orphanChunks,
      readyBatches: this.prefetch.readyCount,
      spareArenaBytes: this.assembler.spareBytes,
      pendingDeletions: books.pendingDeletions,
      trainerVersion: this.trainerVersion,
    };
  }

  /** Metadata of every indexed trajectory, oldest first (for tools and tests). */
  entries(): readonly BufferEntry[] {
    this.books.settle();
    return this.books.index.all();
  }

  /** Waits for pending stream deletions (tests, shutdown). */
  async flush(): Promise<void> {
    this.books.settle();
    await this.books.idle();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.changed.notify();
    await this.feed.stop();
    await this.prefetch.close();
    this.assembler.close();
    this.books.settle();
    this.unhookSettle();
    this.m.staleness.dispose();
    await this.books.idle();
  }

  // ---- choosing a batch ----

  private checkPossible(count: number): void {
    const why =
      count > this.eviction.maxItems
        ? `a batch of ${count} is larger than the buffer's capacity of ${this.eviction.maxItems} items`
        : this.strategy.impossible?.(count, this.books.context());
    if (why) throw new ImpossibleRequestError(ErrorCodes.BATCH_IMPOSSIBLE, why, { details: { count, strategy: this.strategy.name } });
  }

  /** Chooses and reserves the entries of a batch, or undefined when not possible yet. */
  private pick(count: number): Picked | undefined {
    const books = this.books;
    books.settle();
    const state = { size: books.index.size, inserts: books.inserts, samples: books.samples };
    if (!this.limiter.allows(count, state)) return undefined;
    const chosen = this.strategy.select(books.index.candidates(), count, books.context());
    if (chosen.length < count) return undefined;
    const entries = chosen.slice(0, count);
    books.index.reserve(entries);
    books.samples += entries.length;
    return { entries };
  }

  /** Undoes pick(): the entries are free for another batch and count as never sampled. */
  private unpick(picked: Picked): void {
    this.books.index.release(picked.entries);
    this.books.samples -= picked.entries.length;
  }

  private pickSafely(): Picked | undefined {
    try {
      return this.pick(this.options.batchSize);
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'strategy failed');
      return undefined;
    }
  }
}
