/**
 * Follows the records written to an experience buffer from now on, headers only (the metadata,
 * never the payload: about 400 bytes per trajectory), and hands each one's metadata over. The
 * manager counts completions and measures inherent staleness with it while it leads.
 *
 * An ordered consumer from the stream's next message (from its first, when the stream is created
 * after the watch began); after a failure (nats-server restarting,
 * the stream not created yet) it starts again from the sequence after the last one it saw, so a
 * restart loses nothing the stream still holds. Records deleted before they were read (a trainer
 * that consumed them within the outage) are simply not counted.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { DeliverPolicy, jetstream, type ConsumerMessages } from '@nats-io/jetstream';
import { delay } from '../../common/concurrency.js';
import type { Logger } from '../../common/logger.js';
import { META_HEADER, decodeMeta, type RecordMeta } from '../../data/codec/record-meta.js';
import { bufferNames } from '../../data/experience/stream.js';
import { FEED_PULL_EXPIRES_MS } from '../../data/experience/index-feed.js';

export interface RecordWatchOptions {
  nc: NatsConnection;
  buffer: string;
  onRecord: (meta: RecordMeta) => void;
  /** A record whose metadata cannot be read. */
  onUnreadable: (err: unknown) => void;
  /** The consumer failed and is made again (counted). */
  onRestart: (err: unknown) => void;
  log: Logger;
  /** Wait before making the consumer again after a failure. Default 1 s. */
  retryMs?: number;
}

export class RecordWatch {
  private lastSeq = 0;
  /** The stream did not exist yet: every record it gets is new, from its first. */
  private fromFirst = false;
  private messages: ConsumerMessages | null = null;
  private stopped = false;
  /** Ends the wait between two attempts when stopping. */
  private readonly abort = new AbortController();
  private readonly loop: Promise<void>;

  constructor(private readonly options: RecordWatchOptions) {
    this.loop = this.follow();
  }

  private async follow(): Promise<void> {
    const names = bufferNames(this.options.buffer);
    const js = jetstream(this.options.nc);
    while (!this.isStopped()) {
      try {
        const consumer = await js.consumers.get(names.stream, {
          filter_subjects: names.recordFilter,
          headers_only: true,
          ...(this.lastSeq > 0
            ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: this.lastSeq + 1 }
            : { deliver_policy: this.fromFirst ? DeliverPolicy.All : DeliverPolicy.New }),
        });
        // A short pull, as the sampler's index feed: a nats-server restart costs seconds, not 30.
        this.messages = await consumer.consume({ max_messages: 4096, expires: FEED_PULL_EXPIRES_MS });
        if (this.isStopped()) await this.messages.close();
        for await (const m of this.messages) {
          this.lastSeq = Math.max(this.lastSeq, m.seq);
          let meta: RecordMeta;
          try {
            meta = decodeMeta(m.headers?.get(META_HEADER) ?? '');
          } catch (err) {
            this.options.onUnreadable(err);
            continue;
          }
          this.options.onRecord(meta);
        }
        if (!this.isStopped()) this.options.onRestart(new Error('the consumer ended'));
      } catch (err) {
        if (this.isStopped()) return;
        if (this.lastSeq === 0 && /stream not found/i.test((err as Error).message)) this.fromFirst = true;
        this.options.onRestart(err);
        this.options.log.debug({ err: (err as Error).message }, 'record watch: following the buffer again soon');
        await delay(this.options.retryMs ?? 1_000, { signal: this.abort.signal, unref: true }).catch(() => undefined);
      }
    }
  }

  /** A method, not the field: stop() sets it while the loop awaits. */
  private isStopped(): boolean {
    return this.stopped;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    await this.messages?.close();
    await this.loop;
  }
}
