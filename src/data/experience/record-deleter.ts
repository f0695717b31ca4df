/**
 * Removes sampled-out and evicted records (with their chunks), and orphan chunks, from the
 * stream in the background. The sampler gives a bound below which every message is garbage
 * (older than the oldest indexed record, than every chunk an indexed or coming record needs,
 * and than anything the index feed has not seen yet). Everything below it goes in one purge
 * of the stream's head, which the server does block by block (a purge filtered by subject
 * removes message by message and costs the server several times as much); what lies above it
 * is deleted message by message.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { Logger } from '../../common/logger.js';
import type { BufferEntry } from './entry.js';
import { mapLimit } from '../../common/concurrency.js';

export class RecordDeleter {
  private pending: number[] = [];
  private running: Promise<void> = Promise.resolve();
  private purgedBelow = 0;
  errors = 0;

  constructor(
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly logger: Logger,
  ) {}

  /** Queues entries already removed from the index (their records and chunks). */
  delete(entries: readonly BufferEntry[], bound: () => number): void {
    if (entries.length === 0) return;
    for (const e of entries) {
      this.pending.push(e.seq);
      for (const c of e.chunkSeqs) this.pending.push(c);
    }
    this.schedule(bound);
  }

  /** Queues single messages (orphan chunks). */
  deleteSeqs(seqs: readonly number[], bound: () => number): void {
    if (seqs.length === 0) return;
    for (const s of seqs) this.pending.push(s);
    this.schedule(bound);
  }

  /** Resolves when everything queued so far is deleted. */
  async idle(): Promise<void> {
    await this.running;
  }

  private schedule(bound: () => number): void {
    this.running = this.running.then(() => this.flush(bound()));
  }

  private async flush(bound: number): Promise<void> {
    const seqs = this.pending;
    this.pending = [];
    if (seqs.length === 0) return;
    const single: number[] = [];
    let purge = false;
    for (const s of seqs) {
      if (s < bound) purge = true;
      else single.push(s);
    }
    try {
      if (purge && bound > this.purgedBelow) {
        await this.jsm.streams.purge(this.stream, { seq: bound });
        this.purgedBelow = bound;
      }
      await mapLimit(single, 64, (seq) =>
        this.jsm.streams.deleteMessage(this.stream, seq, false).catch((err: unknown) => {
          // Already gone (purged, or deleted by a previous run): nothing to do.
          if (!/no message found|not found/i.test(String((err as Error).message))) throw err;
        }),
      );
    } catch (err) {
      this.errors++;
      this.logger.warn({ err: (err as Error).message, count: seqs.length }, 'could not delete records; they will be re-indexed after a restart');
    }
  }
}
