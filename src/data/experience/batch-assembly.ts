/**
 * Building a batch from chosen entries and handing it to the trainer. Assembly loads the
 * payloads into one arena (payload-loader.ts, arena-pool.ts) and does everything that does not
 * depend on the trainer version at hand-over; the hand-over re-checks the strategy, updates
 * staleness only if the version moved, and counts. The batch's memory goes back to the arena pool
 * when the trainer releases it (Batch.release()).
 */
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { RejectionCounter } from '../metrics.js';
import type { ChangeNotifier } from '../waiter.js';
import { ArenaPool } from './arena-pool.js';
import type { ArenaAllocator, ArenaBlock } from './arena-allocator.js';
import { summarizeStaleness, type Batch, type SampledTrajectory } from './batch.js';
import type { BufferBooks } from './buffer-books.js';
import type { BufferEntry } from './entry.js';
import { PayloadLoader } from './payload-loader.js';
import type { ReadActivity } from './read-activity.js';
import type { SamplerMetrics } from './sampler-metrics.js';
import type { SamplingStrategy } from './strategies/strategy.js';
import { ErrorCodes } from '../../common/error-codes.js';

/** Entries chosen and reserved for a batch. */
export interface Picked {
  entries: BufferEntry[];
}

/** The memory behind a batch's payloads, until the trainer releases it. */
export interface Holding {
  block: ArenaBlock | undefined;
}

/**
 * A batch assembled ahead of sample(), with its entries (still reserved), the version its
 * staleness was computed at and its memory.
 */
export interface Assembled {
  batch: Batch;
  entries: BufferEntry[];
  version: number;
  holding: Holding;
}

/** Some chosen records were gone from the stream: they were forgotten, and the batch is to be picked again. */
/** Loads of a record that the stream's leader holds but that did not load, before it counts as missing. */
const MISSING_RETRIES = 3;

export class RecordsMissing extends Error {}

export interface BatchAssemblerOptions {
  buffer: string;
  js: JetStreamClient;
  jsm: JetStreamManager;
  stream: string;
  recordFilter: string;
  fetchConcurrency: number;
  spareArenas: number;
  /** Where batch memory comes from (arena-allocator.ts). */
  arenas: ArenaAllocator;
  books: BufferBooks;
  strategy: SamplingStrategy;
  maxTimesSampled: number;
  trainerVersion: () => number;
  /** Told of every batch handed over: the version it was trained at and its staleness counts. */
  onHandedOver?: (trainerVersion: number, staleness: Record<number, number>) => void;
  reads: ReadActivity;
  metrics: SamplerMetrics;
  rejections: RejectionCounter;
  changed: ChangeNotifier;
  /** The trainer released the memory of a batch (the prefetch may be waiting for it). */
  released: (holding: Holding) => void;
}

export class BatchAssembler {
  private readonly loader: PayloadLoader;
  /** Loads that found a record missing while the stream's leader held it, by sequence. */
  private readonly strikes = new Map<number, number>();
  private readonly arenas: ArenaPool;
  private readonly books: BufferBooks;

  constructor(private readonly options: BatchAssemblerOptions) {
    this.books = options.books;
    this.loader = new PayloadLoader(options.js, options.jsm, options.stream, options.recordFilter, options.fetchConcurrency);
    this.arenas = new ArenaPool(options.spareArenas, options.arenas, (bytes) => options.metrics.spareBytes.set({ buffer: options.buffer }, bytes));
  }

  /** Memory of released batches kept for the next ones. */
  get spareBytes(): number {
    return this.arenas.spareBytes;
  }

  close(): void {
    this.arenas.close();
  }

  /** Loads the payloads of `picked`; RecordsMissing when some are gone (they are forgotten, the rest released). */
  async assemble(picked: Picked, prefetched: boolean): Promise<Assembled> {
    let total = 0;
    for (const e of picked.entries) total += e.bytes;
    const { arena, block } = await this.arenas.arena(total);
    const endRead = this.options.reads.begin();
    let payloads: Awaited<ReturnType<PayloadLoader['load']>>;
    try {
      payloads = await this.loader.load(picked.entries, arena);
    } catch (err) {
      // Copies of other payloads of the batch may still be under way: the block goes back to
      // its allocator once population has stopped, on a later turn (the copies in flight then
      // have landed or found it gone). Private memory is simply left to the GC.
      void arena.stop().then(() => setImmediate(() => this.arenas.free(block)));
      throw err;
    } finally {
      endRead();
    }
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
        segments: e.segments,
        seq: e.seq,
        staleness: 0,
        timesSampled: e.timesSampled,
      });
    });
    if (missing.length > 0) {
      // Deleted behind our back (another sampler, an operator): forget them, retry the batch.
      // Only those the stream's leader confirms gone: the others were read from a replica that
      // lags or through a fetch a leader change cut short, and the retry loads them again.
      // A record the leader holds that still does not load after a few tries (a payload whose
      // size disagrees with its token count) is given up as before.
      const confirmed = new Set(await this.loader.gone(missing).catch(() => [] as BufferEntry[]));
      const gone = missing.filter((e) => confirmed.has(e) || this.strike(e) > MISSING_RETRIES);
      this.options.rejections.count(ErrorCodes.RECORD_MISSING, gone.length);
      this.books.samples -= picked.entries.length;
      this.books.index.release(picked.entries);
      this.books.remove(gone, 'missing');
      // Nothing was handed out: the retry may reuse the memory once population has stopped.
      await arena.stop();
      this.arenas.keep(block);
      throw new RecordsMissing();
    }
    // Everything that does not depend on the trainer version at hand-over is done here, so
    // that handing over a prefetched batch is a few field updates per item.
    const version = this.options.trainerVersion();
    const groups = new Set<string>();
    for (const it of items) {
      it.staleness = Math.max(0, version - it.weightVersion);
      groups.add(it.groupId);
    }
    const holding: Holding = { block };
    const release = (): void => this.releaseMemory(holding);
    const batch: Batch = {
      items,
      trainerVersion: version,
      staleness: summarizeStaleness(items),
      groups: [...groups],
      bytes,
      memory: block,
      prefetched,
      release,
    };
    return { batch, entries: picked.entries, version, holding };
  }

  /**
   * Finalises a batch at hand-over: the strategy's accept() re-check (undefined when it failed:
   * the batch is released), staleness against the current trainer version (recomputed only if
   * it moved since the batch was assembled) and sample counts. This is on the trainer's critical
   * path, so it touches each item once; releasing the entries and removing the spent ones from
   * the index happen right after sample() returns (BufferBooks.settle()).
   */
  handOver(a: Assembled): Batch | undefined {
    const { batch, entries } = a;
    const { items } = batch;
    const { index } = this.books;
    const strategy = this.options.strategy;
    let intact = true;
    for (let i = 0; i < entries.length; i++) if (!index.holds(entries[i]!)) intact = false;
    const accept = strategy.accept?.bind(strategy);
    const ctx = accept ? this.books.context() : undefined;
    if (!intact || (accept && !entries.every((e) => accept(e, ctx!)))) {
      // Rejected (e.g. beyond max staleness after a version change): release and drop what failed.
      const held = entries.filter((e) => index.holds(e));
      this.books.samples -= items.length;
      index.release(held);
      this.releaseMemory(a.holding);
      if (accept)
        this.books.remove(
          held.filter((e) => !accept(e, ctx!)),
          'stale',
        );
      this.options.changed.notify();
      return undefined;
    }
    const version = this.options.trainerVersion();
    let staleness = batch.staleness;
    if (version !== a.version) {
      for (let i = 0; i < items.length; i++) {
        const it = items[i]!;
        it.staleness = Math.max(0, version - it.weightVersion);
      }
      staleness = summarizeStaleness(items);
    }
    const max = this.options.maxTimesSampled;
    let allSpent = true;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      const times = ++e.timesSampled;
      items[i]!.timesSampled = times;
      if (times < max) allSpent = false;
    }
    for (const [value, count] of Object.entries(staleness.histogram)) this.options.metrics.staleness.observe(Number(value), count);
    this.options.metrics.sampled.inc({ buffer: this.options.buffer }, items.length);
    this.books.handedOver(entries, allSpent ? entries : entries.filter((e) => e.timesSampled >= max));
    this.options.onHandedOver?.(version, staleness.histogram);
    return { ...batch, trainerVersion: version, staleness };
  }

  /**
   * Batch.release(): the batch's memory goes back to the arena pool through its allocator
   * (private memory under a new ArrayBuffer, so that the trainer's views of it read as empty
   * rather than as the next batch; a buffer the trainer detached itself is gone and not kept).
   */
  private releaseMemory(holding: Holding): void {
    const block = holding.block;
    if (block === undefined) return;
    holding.block = undefined;
    this.arenas.give(block);
    this.options.released(holding);
  }

  /** Counts one more load that found `e` missing while the leader held it; returns the count. */
  private strike(e: BufferEntry): number {
    const n = (this.strikes.get(e.seq) ?? 0) + 1;
    if (this.strikes.size >= 1024) this.strikes.clear();
    this.strikes.set(e.seq, n);
    return n;
  }
}
