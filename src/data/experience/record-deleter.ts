/**
 * Removes sampled-out and evicted records (with their chunks), and orphan chunks, from the
 * stream in the background. The sampler gives a bound below which every message is garbage
 * (older than the oldest indexed record, than every chunk an indexed or coming record needs,
 * and than anything the index feed has not seen yet). Everything below it goes in one purge
 * of the stream's head, which the server does block by block (a purge filtered by subject
 * removes message by message and costs the server several times as much); what lies above it
 * is deleted message by message.
 *
 * Deletions wait until the sampler is not reading the stream (read-activity.ts), for at most
 * `maxDelayMs`: while nats-server purges, a batch's fetch stalls, so a purge that overlaps the
 * assembly of the next batch slows it down by more than the purge costs the server. Between two
 * assemblies (the trainer's step) the purge is free. The bound keeps a trainer that samples back
 * to back, with an assembly always under way, from growing the stream without end.
 *
 * Before any record goes, its trajectory is marked completed (completion-marks.ts); when the
 * marks cannot be stored, nothing is deleted and the whole round is tried again later.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { Logger } from '../../common/logger.js';
import type { BufferEntry } from './entry.js';
import type { ReadActivity } from './read-activity.js';
import { mapLimit } from '../../common/concurrency.js';

export interface RecordDeleterOptions {
  /** The sampler's reads: deletions wait until none is under way. */
  reads?: ReadActivity;
  /** The longest deletions wait for a quiet moment. Default 10 s. */
  maxDelayMs?: number;
  /** Told the number of messages queued for deletion (`queued`) whenever it changes. */
  onPending?: (messages: number) => void;
  /** Marks trajectories completed before their records are deleted (completion-marks.ts). */
  markCompleted?: (ids: readonly string[]) => Promise<void>;
  /** Wait before a round whose marks or deletions failed is tried again. Default 1 s. */
  retryMs?: number;
}

export class RecordDeleter {
  private pending: number[] = [];
  /** Trajectories of the pending records, to be marked completed before they go. */
  private unmarked: string[] = [];
  private running: Promise<void> = Promise.resolve();
  private purgedBelow = 0;
  /** Ends the current wait for a quiet moment (idle(): delete now). */
  private hurry: (() => void) | undefined;
  /** idle() calls in progress: while any is, deletions do not wait. */
  private urgent = 0;
  errors = 0;

  constructor(
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly logger: Logger,
    private readonly options: RecordDeleterOptions = {},
  ) {}

  /** Stream messages queued for deletion, not yet sent to the server. */
  get queued(): number {
    return this.pending.length;
  }

  /** Queues entries already removed from the index (their records and chunks). */
  delete(entries: readonly BufferEntry[], bound: () => number): void {
    for (const e of entries) this.unmarked.push(e.id);
    this.deleteSeqs(
      entries.flatMap((e) => [e.seq, ...e.chunkSeqs]),
      bound,
    );
  }

  /** Queues single messages (orphan chunks). */
  deleteSeqs(seqs: readonly number[], bound: () => number): void {
    if (seqs.length === 0) return;
    for (const s of seqs) this.pending.push(s);
    this.options.onPending?.(this.pending.length);
    this.schedule(bound);
  }

  /** Deletes everything queued so far now, without waiting for a quiet moment. */
  async idle(): Promise<void> {
    this.urgent++;
    this.hurry?.();
    try {
      await this.running;
    } finally {
      this.urgent--;
    }
  }

  private schedule(bound: () => number): void {
    // The bound is read once the wait is over: by then it may have moved up.
    this.running = this.running.then(async () => {
      await this.quietMoment();
      await this.flush(bound);
    });
  }

  private async quietMoment(): Promise<void> {
    const reads = this.options.reads;
    if (!reads || this.urgent > 0 || this.pending.length === 0) return;
    const wait = reads.whenQuiet(this.options.maxDelayMs ?? 10_000);
    this.hurry = wait.hurry;
    try {
      await wait.done;
    } finally {
      this.hurry = undefined;
    }
  }

  private async flush(bound: () => number): Promise<void> {
    // Read with the queue, in one go: every record below it is garbage, so queued by now (taken
    // here, marked below). Read after the marks, it could pass records queued meanwhile, unmarked.
    const below = bound();
    const seqs = this.pending;
    const ids = this.unmarked;
    this.pending = [];
    this.unmarked = [];
    if (seqs.length === 0) return;
    this.options.onPending?.(0);
    if (ids.length > 0 && this.options.markCompleted) {
      try {
        await this.options.markCompleted(ids);
      } catch (err) {
        // Deleting a record whose trajectory is not marked would let it be generated again: keep
        // both and try the round again (nats-server restarting, usually).
        this.errors++;
        this.pending = [...seqs, ...this.pending];
        this.unmarked = [...ids, ...this.unmarked];
        this.options.onPending?.(this.pending.length);
        this.logger.warn({ err: (err as Error).message, count: ids.length }, 'could not mark trajectories completed; their records stay until it works');
        setTimeout(() => this.schedule(bound), this.options.retryMs ?? 1_000).unref();
        return;
      }
    }
    const single: number[] = [];
    let purge = false;
    for (const s of seqs) {
      if (s < below) purge = true;
      else single.push(s);
    }
    try {
      if (purge && below > this.purgedBelow) {
        await this.jsm.streams.purge(this.stream, { seq: below });
        this.purgedBelow = below;
      }
      await mapLimit(single, 64, (seq) =>
        this.jsm.streams.deleteMessage(this.stream, seq, false).catch((err: unknown) => {
          // Already gone (purged, or deleted by a previous run): nothing to do.
          if (!/no message found|not found/i.test((err as Error).message)) throw err;
        }),
      );
    } catch (err) {
      this.errors++;
      this.logger.warn({ err: (err as Error).message, count: seqs.length }, 'could not delete records; they will be re-indexed after a restart');
    }
  }
}
