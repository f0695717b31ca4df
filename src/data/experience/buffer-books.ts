/**
 * The sampler's books over its index of the buffer: what the index feed brings in (records,
 * claim-check chunks, unreadable records), what leaves and why (capacity eviction, sampled out,
 * stale, missing: counted by reason, reported to onEvict and deleted from the stream in the
 * background), orphan chunks, and the bookkeeping of handed-over batches, which is applied lazily
 * (settle()) so that handing a batch over stays off the trainer's critical path.
 *
 * Every message below `garbageBound()` is garbage for the record deleter (record-deleter.ts).
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { Logger } from '../../common/logger.js';
import type { RejectionCounter } from '../metrics.js';
import type { ChangeNotifier } from '../waiter.js';
import type { RecordMeta } from '../codec/record-meta.js';
import { BufferIndex } from './buffer-index.js';
import { ChunkTracker } from './chunk-tracker.js';
import { entryOf, type BufferEntry } from './entry.js';
import type { ResolvedEviction } from './eviction.js';
import type { ReadActivity } from './read-activity.js';
import { RecordDeleter } from './record-deleter.js';
import type { SamplerMetrics } from './sampler-metrics.js';
import { strategyContext } from './strategies/context.js';
import type { StrategyContext } from './strategies/strategy.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface BufferBooksOptions {
  buffer: string;
  jsm: JetStreamManager;
  stream: string;
  eviction: ResolvedEviction;
  random: () => number;
  /** The trainer's weight version now (staleness is measured against it). */
  trainerVersion: () => number;
  /** The sequence of the last message the index feed has seen. */
  lastFedSeq: () => number;
  /** The sampler's reads of the stream: deletions wait until they are over. */
  reads: ReadActivity;
  orphanChunkAgeMs: number;
  maxDeletionDelayMs: number | undefined;
  /** Marks trajectories completed before their records are deleted (completion-marks.ts). */
  markCompleted?: (ids: readonly string[]) => Promise<void>;
  metrics: SamplerMetrics;
  rejections: RejectionCounter;
  changed: ChangeNotifier;
  onEvict: ((entries: readonly BufferEntry[], reason: string) => void) | undefined;
  logger: Logger;
}

export class BufferBooks {
  readonly index = new BufferIndex();
  inserts = 0;
  /** Trajectories handed out (or reserved for a batch on its way). */
  samples = 0;
  corrupt = 0;
  orphanChunks = 0;
  readonly evicted: Record<string, number> = {};
  private readonly chunks: ChunkTracker;
  private readonly deleter: RecordDeleter;
  private readonly m: SamplerMetrics;
  private readonly label: { buffer: string };
  /** Index bookkeeping of handed-over batches, applied after sample() returns (see settle()). */
  private unsettled: Array<{ entries: BufferEntry[]; spent: BufferEntry[] }> = [];
  private settleScheduled = false;

  constructor(private readonly options: BufferBooksOptions) {
    this.m = options.metrics;
    this.label = { buffer: options.buffer };
    this.deleter = new RecordDeleter(options.jsm, options.stream, options.logger, {
      reads: options.reads,
      maxDelayMs: options.maxDeletionDelayMs,
      onPending: (n) => this.m.pendingDeletions.set(this.label, n),
      markCompleted:
        options.markCompleted &&
        (async (ids) => {
          try {
            await options.markCompleted!(ids);
            this.m.completionMarks.inc({ ...this.label, result: 'ok' }, ids.length);
          } catch (err) {
            this.m.completionMarks.inc({ ...this.label, result: 'failed' }, ids.length);
            throw err;
          }
        }),
    });
    this.chunks = new ChunkTracker(options.orphanChunkAgeMs);
  }

  /** Stream messages (records and chunks) waiting to be deleted. */
  get pendingDeletions(): number {
    return this.deleter.queued;
  }

  /** Waits for pending stream deletions. */
  idle(): Promise<void> {
    return this.deleter.idle();
  }

  // ---- what the index feed brings ----

  record(seq: number, meta: RecordMeta, timeMs: number): void {
    this.chunks.claim(meta.chunkSeqs, timeMs);
    this.onRecord(seq, meta);
    this.collectOrphans();
  }

  chunk(seq: number, timeMs: number): void {
    this.chunks.chunk(seq, timeMs);
    this.collectOrphans();
  }

  corruptRecord(seq: number, err: unknown): void {
    this.corrupt++;
    this.options.rejections.count(ErrorCodes.CORRUPT_RECORD);
    this.options.logger.warn({ seq, err: (err as Error).message }, 'unreadable record skipped');
  }

  private onRecord(seq: number, meta: RecordMeta): void {
    this.settle();
    const entry = entryOf(seq, meta, Date.now());
    if (!this.index.add(entry)) {
      // A second record of an indexed id or group slot (possible only after eviction and re-submission).
      this.options.rejections.count(ErrorCodes.CORRUPT_RECORD);
      this.corrupt++;
      this.options.logger.warn({ seq, id: meta.id, groupId: meta.groupId }, 'duplicate record skipped');
      return;
    }
    this.inserts++;
    this.m.inserts.inc(this.label);
    this.enforceCapacity();
    this.updateGauges();
    this.options.changed.notify();
  }

  // ---- what leaves ----

  private enforceCapacity(): void {
    const { maxItems, maxBytes, policy } = this.options.eviction;
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

  /** Takes `entries` out of the index, counts them under `reason` and deletes them from the stream. */
  remove(entries: readonly BufferEntry[], reason: string): void {
    if (entries.length === 0) return;
    let bytes = 0;
    for (const e of entries) {
      this.index.remove(e);
      bytes += e.bytes;
    }
    this.evicted[reason] = (this.evicted[reason] ?? 0) + entries.length;
    this.m.evicted.inc({ buffer: this.options.buffer, reason }, entries.length);
    this.m.evictedBytes.inc({ buffer: this.options.buffer, reason }, bytes);
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
    return Math.min(
      this.index.firstSeq() ?? Infinity,
      this.index.oldestChunk() ?? Infinity,
      this.chunks.oldestUnclaimed() ?? Infinity,
      this.options.lastFedSeq() + 1,
    );
  }

  private collectOrphans(): void {
    const orphans = this.chunks.takeOrphans();
    if (orphans.length === 0) return;
    this.orphanChunks += orphans.length;
    this.m.orphanChunks.inc(this.label, orphans.length);
    this.options.logger.warn({ count: orphans.length, first: orphans[0] }, 'deleting orphan chunks (a writer crashed mid-write)');
    this.deleter.deleteSeqs(orphans, () => this.garbageBound());
  }

  private updateGauges(): void {
    this.m.items.set(this.label, this.index.size);
    this.m.bytes.set(this.label, this.index.bytes);
  }

  /** What strategies and eviction policies see; a strategy's drop() removes entries as 'stale'. */
  context(): StrategyContext {
    const drops: BufferEntry[] = [];
    return strategyContext(this.options.trainerVersion(), this.options.random, this.index.groups, (e) => {
      drops.push(e);
      queueMicrotask(() =>
        this.remove(
          drops.splice(0).filter((d) => this.index.get(d.id) === d && !this.index.isReserved(d)),
          'stale',
        ),
      );
    });
  }

  // ---- handed-over batches ----

  /** A batch was handed over: its entries are released, and `spent` removed, at the next settle(). */
  handedOver(entries: BufferEntry[], spent: BufferEntry[]): void {
    this.unsettled.push({ entries, spent });
    if (!this.settleScheduled) {
      this.settleScheduled = true;
      setImmediate(() => this.settle());
    }
  }

  /**
   * Applies the index bookkeeping of handed-over batches: their entries are released and those
   * sampled maxTimesSampled times are removed (counted, deleted from the stream). Runs on the
   * turn after sample() returns, and before anything that reads the index (pick, stats, a new
   * record), so nobody ever sees the index without it. Until then the entries stay reserved,
   * so no other batch can take them.
   */
  settle(): void {
    this.settleScheduled = false;
    if (this.unsettled.length === 0) return;
    const work = this.unsettled;
    this.unsettled = [];
    for (const { entries, spent } of work) {
      this.index.release(entries);
      this.remove(spent, 'sampled');
    }
  }
}
