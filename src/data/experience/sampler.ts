/**
 * The trainer's side of the experience buffer. It indexes the stream's records (metadata only),
 * applies the eviction policy and the rate limiter, lets the sampling strategy choose each
 * batch and, with prefetch on, assembles the next batch while the current one trains, so that
 * sample() of a ready batch returns at once. Memory: the index (a few hundred bytes per
 * trajectory) plus the payloads of the batches being prefetched; the memory of a batch the
 * trainer released (Batch.release()) is kept for the next one (arena-pool.ts).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { createRegistry } from '../../common/metrics.js';
import { silentLogger, type Logger } from '../../common/logger.js';
import { ClosedError, TimeoutError } from '../../common/errors.js';
import { DataErrorCodes, DataInputError, ImpossibleRequestError } from '../errors.js';
import { DeferredHistogram, RejectionCounter, counter, gauge, histogram, onCollect } from '../metrics.js';
import { ChangeNotifier } from '../waiter.js';
import type { RecordMeta } from '../codec/record-meta.js';
import { BufferIndex } from './buffer-index.js';
import { entryOf, type BufferEntry } from './entry.js';
import { resolveEviction, type EvictionOptions, type ResolvedEviction } from './eviction.js';
import { RateLimiter, type RateLimitOptions } from './rate-limiter.js';
import { fifo } from './strategies/basic.js';
import { seededRandom, type SamplingStrategy, type StrategyContext } from './strategies/strategy.js';
import { ensureBufferStream, type BufferNames, type BufferStreamOptions } from './stream.js';
import { IndexFeed } from './index-feed.js';
import { PayloadLoader } from './payload-loader.js';
import { RecordDeleter } from './record-deleter.js';
import { ReadActivity } from './read-activity.js';
import { ChunkTracker } from './chunk-tracker.js';
import { summarizeStaleness, type Batch, type SampledTrajectory } from './batch.js';
import { ArenaPool, detach } from './arena-pool.js';

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

interface Picked {
  entries: BufferEntry[];
}

/** The memory behind a batch's payloads, until the trainer releases it. */
interface Holding {
  buffer: ArrayBuffer | undefined;
}

/**
 * A batch assembled ahead of sample(), with its entries (still reserved), the version its
 * staleness was computed at and its memory.
 */
interface Assembled {
  batch: Batch;
  entries: BufferEntry[];
  version: number;
  holding: Holding;
}

const STALENESS_BUCKETS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64];

export class ExperienceSampler {
  readonly names: BufferNames;
  private readonly index = new BufferIndex();
  private readonly changed = new ChangeNotifier();
  private readonly limiter: RateLimiter;
  private readonly eviction: ResolvedEviction;
  private readonly strategy: SamplingStrategy;
  private readonly random: () => number;
  private readonly loader: PayloadLoader;
  private readonly deleter: RecordDeleter;
  private readonly reads = new ReadActivity();
  private readonly feed: IndexFeed;
  private readonly chunks: ChunkTracker;
  private orphanChunks = 0;
  private readonly rejections: RejectionCounter;
  private readonly logger: Logger;
  private readonly ready: Assembled[] = [];
  private readonly arenas: ArenaPool;
  /**
   * prefetch 'after-release': the batch handed over last, until the trainer releases it (its
   * release starts the next assembly: a read about to start, see ReadActivity).
   */
  private awaitingRelease: { holding: Holding; endRead: () => void } | undefined;
  /** Index bookkeeping of handed-over batches, applied after sample() returns (see settle()). */
  private unsettled: Array<{ entries: BufferEntry[]; spent: BufferEntry[] }> = [];
  private settleScheduled = false;
  private readonly unhookSettle: () => void;
  private prefetchLoop: Promise<void> = Promise.resolve();
  private trainerVersion: number;
  private inserts = 0;
  private samples = 0;
  private corrupt = 0;
  private readonly evicted: Record<string, number> = {};
  private closed = false;
  private readonly m: {
    items: Gauge<string>;
    bytes: Gauge<string>;
    inserts: Counter<string>;
    sampled: Counter<string>;
    evicted: Counter<string>;
    evictedBytes: Counter<string>;
    orphanChunks: Counter<string>;
    staleness: DeferredHistogram;
    latency: Histogram<string>;
    spareBytes: Gauge<string>;
    pendingDeletions: Gauge<string>;
  };

  private constructor(
    private readonly options: SamplerOptions,
    jsm: JetStreamManager,
    names: BufferNames,
    registry: Registry,
  ) {
    this.names = names;
    this.logger = (options.logger ?? silentLogger).child({ component: 'experience-sampler', buffer: names.buffer });
    this.rejections = new RejectionCounter(registry, 'sampler');
    this.limiter = new RateLimiter(options.rateLimit);
    this.eviction = resolveEviction(options.eviction);
    this.strategy = options.strategy ?? fifo();
    this.random = seededRandom(options.seed ?? 0x1a31a5);
    this.trainerVersion = options.trainerVersion ?? 0;
    this.loader = new PayloadLoader(jetstream(options.nc), jsm, names.stream, names.recordFilter, options.fetchConcurrency ?? 64);
    this.deleter = new RecordDeleter(jsm, names.stream, this.logger, {
      reads: this.reads,
      maxDelayMs: options.maxDeletionDelayMs,
      onPending: (n) => this.m.pendingDeletions.set({ buffer: names.buffer }, n),
    });
    this.chunks = new ChunkTracker(options.orphanChunkAgeMs ?? 15 * 60_000);
    this.feed = new IndexFeed(
      jetstream(options.nc),
      names,
      {
        record: (seq, meta, timeMs) => {
          this.chunks.claim(meta.chunkSeqs, timeMs);
          this.onRecord(seq, meta);
          this.collectOrphans();
        },
        chunk: (seq, timeMs) => {
          this.chunks.chunk(seq, timeMs);
          this.collectOrphans();
        },
        corrupt: (seq, err) => this.onCorrupt(seq, err),
      },
      this.logger,
    );
    const b = { buffer: names.buffer };
    this.m = {
      items: gauge(registry, 'laminar_buffer_items', 'Trajectories in the experience buffer (indexed by the sampler)', ['buffer']),
      bytes: gauge(registry, 'laminar_buffer_bytes', 'Payload bytes in the experience buffer', ['buffer']),
      inserts: counter(registry, 'laminar_buffer_inserts_total', 'Trajectories indexed by the sampler', ['buffer']),
      sampled: counter(registry, 'laminar_buffer_sampled_total', 'Trajectories handed to the trainer', ['buffer']),
      evicted: counter(registry, 'laminar_buffer_evicted_total', 'Trajectories removed from the buffer, by reason (capacity, sampled, stale, ...)', ['buffer', 'reason']),
      evictedBytes: counter(registry, 'laminar_buffer_evicted_bytes_total', 'Payload bytes removed from the buffer, by reason', ['buffer', 'reason']),
      orphanChunks: counter(registry, 'laminar_buffer_orphan_chunks_total', 'Chunks that no record claimed (a writer crashed mid-write), deleted', ['buffer']),
      staleness: new DeferredHistogram(
        histogram(registry, 'laminar_buffer_staleness', 'Staleness (trainer version - trajectory version) of sampled trajectories', STALENESS_BUCKETS, ['buffer']),
        b,
      ),
      latency: histogram(registry, 'laminar_buffer_sample_seconds', 'Time sample() took, by whether the batch was prefetched', [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], ['buffer', 'prefetched']),
      spareBytes: gauge(registry, 'laminar_buffer_spare_arena_bytes', 'Memory of batches the trainer released, kept for the next batches', ['buffer']),
      pendingDeletions: gauge(registry, 'laminar_buffer_pending_deletions', 'Stream messages of removed trajectories waiting for a moment between batch assemblies to be deleted', ['buffer']),
    };
    this.m.items.set(b, 0);
    this.m.bytes.set(b, 0);
    this.m.spareBytes.set(b, 0);
    this.m.pendingDeletions.set(b, 0);
    this.arenas = new ArenaPool(options.spareArenas ?? 1, (bytes) => this.m.spareBytes.set(b, bytes));
    // A scrape sees the index with the bookkeeping of handed-over batches applied.
    this.unhookSettle = onCollect(this.m.items, () => this.settle());
  }

  /** Opens the sampler: rebuilds the index from the stream, then keeps following it. */
  static async open(options: SamplerOptions): Promise<ExperienceSampler> {
    if (!Number.isInteger(options.batchSize) || options.batchSize < 1) throw new DataInputError(DataErrorCodes.BAD_OPTIONS, `batchSize must be an integer >= 1, got ${options.batchSize}`);
    if (options.orphanChunkAgeMs !== undefined && !(options.orphanChunkAgeMs >= 0)) {
      throw new DataInputError(DataErrorCodes.BAD_OPTIONS, `orphanChunkAgeMs must be a number >= 0, got ${options.orphanChunkAgeMs}`);
    }
    if (options.prefetch !== undefined && typeof options.prefetch !== 'boolean' && options.prefetch !== 'after-release') {
      throw new DataInputError(DataErrorCodes.BAD_OPTIONS, `prefetch must be true, false or 'after-release', got ${String(options.prefetch)}`);
    }
    if (options.spareArenas !== undefined && !(Number.isInteger(options.spareArenas) && options.spareArenas >= 0)) {
      throw new DataInputError(DataErrorCodes.BAD_OPTIONS, `spareArenas must be an integer >= 0, got ${options.spareArenas}`);
    }
    if (options.maxDeletionDelayMs !== undefined && !(options.maxDeletionDelayMs >= 0 && Number.isFinite(options.maxDeletionDelayMs))) {
      throw new DataInputError(DataErrorCodes.BAD_OPTIONS, `maxDeletionDelayMs must be a finite number >= 0, got ${options.maxDeletionDelayMs}`);
    }
    const jsm = await jetstreamManager(options.nc);
    const names = await ensureBufferStream(jsm, options);
    const s = new ExperienceSampler(options, jsm, names, options.registry ?? createRegistry({ defaultMetrics: false }));
    s.checkPossible(options.batchSize);
    if (s.limiter.minSize > s.eviction.maxItems) {
      throw new ImpossibleRequestError(DataErrorCodes.BATCH_IMPOSSIBLE, `minSizeToSample ${s.limiter.minSize} exceeds the capacity of ${s.eviction.maxItems} items`);
    }
    await s.feed.start();
    await s.feed.ready;
    if (options.prefetch !== false) s.prefetchLoop = s.runPrefetch();
    return s;
  }

  /** The trainer moved to a new weight version: staleness is measured against it. */
  setTrainerVersion(version: number): void {
    if (!Number.isInteger(version) || version < this.trainerVersion) {
      throw this.rejections.record(new DataInputError(DataErrorCodes.BAD_OPTIONS, `trainer version must be an integer >= ${this.trainerVersion}, got ${version}`));
    }
    this.trainerVersion = version;
    this.changed.notify();
  }

  /** Sets the priority of a trajectory still in the buffer (prioritized strategy). */
  updatePriority(id: string, priority: number): boolean {
    this.settle();
    const e = this.index.get(id);
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
        let batch = this.ready.shift();
        // Room for the next prefetch; woken after this call returns, so that assembling the
        // next batch does not delay the hand-over of this one.
        if (batch) setImmediate(() => this.changed.notify());
        else if (this.awaitingRelease) {
          // 'after-release': the trainer wants the next batch without releasing the last one.
          this.stopAwaitingRelease();
        } else if (this.options.prefetch === false) {
          const picked = this.pick(this.options.batchSize);
          if (picked) {
            try {
              batch = await this.assemble(picked, false);
            } catch (err) {
              if (err instanceof RecordsMissing) continue;
              this.index.release(picked.entries);
              this.samples -= picked.entries.length;
              throw err;
            }
          }
        }
        if (batch) {
          const handed = this.handOver(batch);
          if (handed) {
            if (this.options.prefetch === 'after-release') this.awaitingRelease = { holding: batch.holding, endRead: this.reads.begin() };
            this.m.latency.observe({ buffer: this.names.buffer, prefetched: String(handed.prefetched) }, (performance.now() - started) / 1000);
            return handed;
          }
          continue;
        }
        await this.changed.wait({ deadline, signal: options.signal, what: 'sample()' });
      }
    } catch (err) {
      if (err instanceof TimeoutError) throw this.rejections.record(new TimeoutError(`no batch of ${this.options.batchSize} within ${options.timeoutMs} ms`, { ...this.stats() }));
      throw this.rejections.record(err);
    }
  }

  stats(): SamplerStats {
    this.settle();
    return {
      items: this.index.size,
      bytes: this.index.bytes,
      reserved: this.index.reservedCount,
      inserts: this.inserts,
      samples: this.samples,
      evicted: { ...this.evicted },
      corrupt: this.corrupt,
      orphanChunks: this.orphanChunks,
      readyBatches: this.ready.length,
      spareArenaBytes: this.arenas.spareBytes,
      pendingDeletions: this.deleter.queued,
      trainerVersion: this.trainerVersion,
    };
  }

  /** Metadata of every indexed trajectory, oldest first (for tools and tests). */
  entries(): readonly BufferEntry[] {
    this.settle();
    return this.index.all();
  }

  /** Waits for pending stream deletions (tests, shutdown). */
  async flush(): Promise<void> {
    this.settle();
    await this.deleter.idle();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.changed.notify();
    await this.feed.stop();
    await this.prefetchLoop;
    for (const a of this.ready.splice(0)) this.index.release(a.entries);
    this.stopAwaitingRelease();
    this.arenas.close();
    this.settle();
    this.unhookSettle();
    this.m.staleness.dispose();
    await this.deleter.idle();
  }

  // ---- index maintenance ----

  private onRecord(seq: number, meta: RecordMeta): void {
    this.settle();
    const entry = entryOf(seq, meta, Date.now());
    if (!this.index.add(entry)) {
      // A second record of an indexed id or group slot (possible only after eviction and re-submission).
      this.rejections.count(DataErrorCodes.CORRUPT_RECORD);
      this.corrupt++;
      this.logger.warn({ seq, id: meta.id, groupId: meta.groupId }, 'duplicate record skipped');
      return;
    }
    this.inserts++;
    this.m.inserts.inc({ buffer: this.names.buffer });
    this.enforceCapacity();
    this.updateGauges();
    this.changed.notify();
  }

  private onCorrupt(seq: number, err: unknown): void {
    this.corrupt++;
    this.rejections.count(DataErrorCodes.CORRUPT_RECORD);
    this.logger.warn({ seq, err: (err as Error).message }, 'unreadable record skipped');
  }

  private enforceCapacity(): void {
    const { maxItems, maxBytes, policy } = this.eviction;
    if (this.index.size <= maxItems && this.index.bytes <= maxBytes) return;
    const victims: BufferEntry[] = [];
    let items = this.index.size;
    let bytes = this.index.bytes;
    for (const e of policy.order(this.index.all(), this.context())) {
      if (items <= maxItems && bytes <= maxBytes) break;
      if (this.index.isReserved(e) || victims.includes(e)) continue;
      victims.push(e);
      items--;
      bytes -= e.bytes;
    }
    this.remove(victims, 'capacity');
  }

  private remove(entries: readonly BufferEntry[], reason: string): void {
    if (entries.length === 0) return;
    let bytes = 0;
    for (const e of entries) {
      this.index.remove(e);
      bytes += e.bytes;
    }
    this.evicted[reason] = (this.evicted[reason] ?? 0) + entries.length;
    this.m.evicted.inc({ buffer: this.names.buffer, reason }, entries.length);
    this.m.evictedBytes.inc({ buffer: this.names.buffer, reason }, bytes);
    this.deleter.delete(entries, () => this.garbageBound());
    this.options.onEvict?.(entries, reason);
    this.updateGauges();
  }

  /**
   * Every message below this sequence is garbage: older than the oldest indexed record, than
   * every chunk of an indexed record, than every chunk a record may still claim, and already
   * seen by the index feed.
   */
  private garbageBound(): number {
    return Math.min(this.index.firstSeq() ?? Infinity, this.index.oldestChunk() ?? Infinity, this.chunks.oldestUnclaimed() ?? Infinity, this.feed.lastSeq + 1);
  }

  private collectOrphans(): void {
    const orphans = this.chunks.takeOrphans();
    if (orphans.length === 0) return;
    this.orphanChunks += orphans.length;
    this.m.orphanChunks.inc({ buffer: this.names.buffer }, orphans.length);
    this.logger.warn({ count: orphans.length, first: orphans[0] }, 'deleting orphan chunks (a writer crashed mid-write)');
    this.deleter.deleteSeqs(orphans, () => this.garbageBound());
  }

  private updateGauges(): void {
    this.m.items.set({ buffer: this.names.buffer }, this.index.size);
    this.m.bytes.set({ buffer: this.names.buffer }, this.index.bytes);
  }

  private context(): StrategyContext {
    const drops: BufferEntry[] = [];
    const version = this.trainerVersion;
    return {
      trainerVersion: version,
      staleness: (e) => Math.max(0, version - e.weightVersion),
      random: this.random,
      drop: (e) => {
        drops.push(e);
        queueMicrotask(() => this.remove(drops.splice(0).filter((d) => this.index.get(d.id) === d && !this.index.isReserved(d)), 'stale'));
      },
      groups: this.index.groups,
    };
  }

  // ---- batches ----

  private checkPossible(count: number): void {
    const why =
      count > this.eviction.maxItems
        ? `a batch of ${count} is larger than the buffer's capacity of ${this.eviction.maxItems} items`
        : this.strategy.impossible?.(count, this.context());
    if (why) throw new ImpossibleRequestError(DataErrorCodes.BATCH_IMPOSSIBLE, why, { details: { count, strategy: this.strategy.name } });
  }

  /** Chooses and reserves the entries of a batch, or undefined when not possible yet. */
  private pick(count: number): Picked | undefined {
    this.settle();
    const state = { size: this.index.size, inserts: this.inserts, samples: this.samples };
    if (!this.limiter.allows(count, state)) return undefined;
    const chosen = this.strategy.select(this.index.candidates(), count, this.context());
    if (chosen.length < count) return undefined;
    const entries = chosen.slice(0, count);
    this.index.reserve(entries);
    this.samples += entries.length;
    return { entries };
  }

  private async assemble(picked: Picked, prefetched: boolean): Promise<Assembled> {
    let total = 0;
    for (const e of picked.entries) total += e.bytes;
    const arena = this.arenas.arena(total);
    // If the load fails, its writes may still be under way: the memory is left to the GC.
    const endRead = this.reads.begin();
    const payloads = await this.loader.load(picked.entries, arena).finally(endRead);
    const items: SampledTrajectory[] = [];
    const missing: BufferEntry[] = [];
    let bytes = 0;
    picked.entries.forEach((e, i) => {
      const p = payloads[i];
      if (!p) {
        missing.push(e);
        return;
      }
      bytes += e.bytes;
      // One literal, one hidden class for every item (see entryOf).
      items.push({
        id: e.id,
        promptId: e.promptId,
        groupId: e.groupId,
        sampleIndex: e.sampleIndex,
        groupSize: e.groupSize,
        weightVersion: e.weightVersion,
        reward: e.reward,
        tokens: p.tokens,
        logprobs: p.logprobs,
        promptLength: e.promptLength,
        responseLength: e.responseLength,
        createdAt: e.createdAt,
        completedAt: e.completedAt,
        rolloutId: e.rolloutId,
        priority: e.priority,
        info: e.info,
        seq: e.seq,
        staleness: 0,
        timesSampled: e.timesSampled,
      });
    });
    if (missing.length > 0) {
      // Deleted behind our back (another sampler, an operator): forget them, retry the batch.
      this.rejections.count(DataErrorCodes.RECORD_MISSING, missing.length);
      this.samples -= picked.entries.length;
      this.index.release(picked.entries);
      this.remove(missing, 'missing');
      // Nothing was handed out: the retry may reuse the memory once population has stopped.
      await arena.stop();
      this.arenas.give(arena.buffer);
      throw new RecordsMissing();
    }
    // Everything that does not depend on the trainer version at hand-over is done here, so
    // that handing over a prefetched batch is a few field updates per item.
    const version = this.trainerVersion;
    const groups = new Set<string>();
    for (const it of items) {
      it.staleness = Math.max(0, version - it.weightVersion);
      groups.add(it.groupId);
    }
    const holding: Holding = { buffer: arena.buffer };
    const release = (): void => this.releaseMemory(holding);
    const batch: Batch = { items, trainerVersion: version, staleness: summarizeStaleness(items), groups: [...groups], bytes, prefetched, release };
    return { batch, entries: picked.entries, version, holding };
  }

  /**
   * Finalises a batch at hand-over: the strategy's accept() re-check (undefined when it failed:
   * the batch is released), staleness against the current trainer version (recomputed only if
   * it moved since the batch was assembled) and sample counts. This is on the trainer's critical
   * path, so it touches each item once; releasing the entries and removing the spent ones from
   * the index happen right after sample() returns (settle()).
   */
  private handOver(a: Assembled): Batch | undefined {
    const { batch, entries } = a;
    const { items } = batch;
    let intact = true;
    for (let i = 0; i < entries.length; i++) if (!this.index.holds(entries[i]!)) intact = false;
    const accept = this.strategy.accept;
    const ctx = accept ? this.context() : undefined;
    if (!intact || (accept && !entries.every((e) => accept.call(this.strategy, e, ctx!)))) {
      // Rejected (e.g. beyond max staleness after a version change): release and drop what failed.
      const held = entries.filter((e) => this.index.holds(e));
      this.samples -= items.length;
      this.index.release(held);
      this.releaseMemory(a.holding);
      if (accept) this.remove(held.filter((e) => !accept.call(this.strategy, e, ctx!)), 'stale');
      this.changed.notify();
      return undefined;
    }
    const version = this.trainerVersion;
    let staleness = batch.staleness;
    if (version !== a.version) {
      for (let i = 0; i < items.length; i++) {
        const it = items[i]!;
        it.staleness = Math.max(0, version - it.weightVersion);
      }
      staleness = summarizeStaleness(items);
    }
    const max = this.eviction.maxTimesSampled;
    let allSpent = true;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      const times = ++e.timesSampled;
      items[i]!.timesSampled = times;
      if (times < max) allSpent = false;
    }
    for (const [value, count] of Object.entries(staleness.histogram)) this.m.staleness.observe(Number(value), count);
    this.m.sampled.inc({ buffer: this.names.buffer }, items.length);
    this.unsettled.push({ entries, spent: allSpent ? entries : entries.filter((e) => e.timesSampled >= max) });
    if (!this.settleScheduled) {
      this.settleScheduled = true;
      setImmediate(() => this.settle());
    }
    return { ...batch, trainerVersion: version, staleness };
  }

  /**
   * Applies the index bookkeeping of handed-over batches: their entries are released and those
   * sampled maxTimesSampled times are removed (counted, deleted from the stream). Runs on the
   * turn after sample() returns, and before anything that reads the index (pick, stats, a new
   * record), so nobody ever sees the index without it. Until then the entries stay reserved,
   * so no other batch can take them.
   */
  private settle(): void {
    this.settleScheduled = false;
    if (this.unsettled.length === 0) return;
    const work = this.unsettled;
    this.unsettled = [];
    for (const { entries, spent } of work) {
      this.index.release(entries);
      this.remove(spent, 'sampled');
    }
  }

  /**
   * Batch.release(): the batch's memory goes to the arena pool under a new ArrayBuffer, so that
   * the trainer's views of it read as empty rather than as the next batch. A buffer the trainer
   * detached itself (transferred elsewhere) is gone and is not kept.
   */
  private releaseMemory(holding: Holding): void {
    const buffer = holding.buffer;
    if (buffer === undefined) return;
    holding.buffer = undefined;
    if (buffer.byteLength > 0) this.arenas.give(detach(buffer));
    if (this.awaitingRelease?.holding === holding) this.stopAwaitingRelease();
  }

  /** The handed-over batch no longer holds back the next assembly: the prefetch loop may start it. */
  private stopAwaitingRelease(): void {
    const awaiting = this.awaitingRelease;
    if (!awaiting) return;
    this.awaitingRelease = undefined;
    awaiting.endRead();
    this.changed.notify();
  }

  private async runPrefetch(): Promise<void> {
    while (!this.closed) {
      const picked = this.ready.length === 0 && this.awaitingRelease === undefined ? this.pickSafely() : undefined;
      if (!picked) {
        await this.changed.wait().catch(() => undefined);
        continue;
      }
      try {
        const assembled = await this.assemble(picked, true);
        if (this.closed) this.index.release(picked.entries);
        else this.ready.push(assembled);
      } catch (err) {
        if (!(err instanceof RecordsMissing)) {
          this.index.release(picked.entries);
          this.samples -= picked.entries.length;
          this.logger.warn({ err: (err as Error).message }, 'prefetch failed; retrying');
          await new Promise((r) => setTimeout(r, 200));
        }
      }
      this.changed.notify();
    }
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

class RecordsMissing extends Error {}
