/**
 * Removes sampled-out and evicted records from the stream in the background. When the oldest
 * records go (FIFO with maxTimesSampled = 1, oldest-first eviction), one purge of the record
 * subjects below the oldest live record replaces thousands of single deletes.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { Logger } from '../../common/logger.js';
import type { BufferEntry } from './entry.js';
import { mapLimit } from '../../common/concurrency.js';

export class RecordDeleter {
  private pending: BufferEntry[] = [];
  private running: Promise<void> = Promise.resolve();
  private purgedBelow = 0;
  errors = 0;

  constructor(
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly recordFilter: string,
    private readonly logger: Logger,
  ) {}

  /** Queues entries already removed from the index; `firstLiveSeq` is the oldest still indexed. */
  delete(entries: readonly BufferEntry[], firstLiveSeq: () => number): void {
    if (entries.length === 0) return;
    this.pending.push(...entries);
    this.running = this.running.then(() => this.flush(firstLiveSeq()));
  }

  /** Resolves when everything queued so far is deleted. */
  async idle(): Promise<void> {
    await this.running;
  }

  private async flush(firstLive: number): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    const single: number[] = [];
    let purge = false;
    for (const e of batch) {
      if (e.seq < firstLive) purge = true;
      else single.push(e.seq);
      single.push(...e.chunkSeqs);
    }
    try {
      if (purge && firstLive > this.purgedBelow) {
        await this.jsm.streams.purge(this.stream, { filter: this.recordFilter, seq: firstLive });
        this.purgedBelow = firstLive;
      }
      await mapLimit(single, 64, (seq) =>
        this.jsm.streams.deleteMessage(this.stream, seq, false).catch((err: unknown) => {
          // Already gone (purged, or deleted by a previous run): nothing to do.
          if (!/no message found|not found/i.test(String((err as Error).message))) throw err;
        }),
      );
    } catch (err) {
      this.errors++;
      this.logger.warn({ err: (err as Error).message, count: batch.length }, 'could not delete records; they will be re-indexed after a restart');
    }
  }
}
