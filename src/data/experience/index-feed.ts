/**
 * Feeds the sampler's index from the stream: an ordered, headers-only consumer over every
 * subject of the buffer, from the first message on. Records carry the metadata; chunk messages
 * are reported by sequence and server time only, so that the sampler can tell chunks that a
 * record will claim from chunks that no record ever will (a writer that crashed mid-write).
 * It transfers headers only (payload bytes stay on the server), survives server restarts (the
 * ordered consumer recreates itself at the next sequence) and reports when it has caught up
 * with what was in the stream at open. On a cluster the ordered consumer can also hang, silent,
 * after the stream's leader is killed (seen in test/cluster-nats/leader-kill.test.ts: no message
 * for 30 s while the stream grew): a watchdog compares the stream's last sequence with the last
 * one seen and starts the feed again after it when it has not moved for a whole check.
 */
import type { JetStreamClient, ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import { DeliverPolicy } from '@nats-io/jetstream';
import type { Logger } from '../../common/logger.js';
import { META_HEADER, decodeMeta, type RecordMeta } from '../codec/record-meta.js';
import type { BufferNames } from './stream.js';
import { retryTransient } from '../retry.js';

/** How long one pull waits on the server, and the client's back-off when its consumer cannot be checked. */
export const FEED_PULL_EXPIRES_MS = 5000;
/** How often the watchdog checks that the feed follows the stream (two pulls' expiry). */
const WATCH_MS = 2 * FEED_PULL_EXPIRES_MS;

export interface IndexFeedHandlers {
  record(seq: number, meta: RecordMeta, timeMs: number): void;
  chunk(seq: number, timeMs: number): void;
  corrupt(seq: number, err: unknown): void;
}

export class IndexFeed {
  private messages: ConsumerMessages | undefined;
  private loop: Promise<void> = Promise.resolve();
  lastSeq = 0;
  private caughtUp!: () => void;
  readonly ready: Promise<void> = new Promise((r) => (this.caughtUp = r));
  private readonly recordPrefix: string;
  private readonly chunkPrefix: string;
  private stopped = false;
  private watchdog: NodeJS.Timeout | undefined;
  /** lastSeq at the watchdog's previous check. */
  private watchedSeq = -1;

  constructor(
    private readonly js: JetStreamClient,
    private readonly names: BufferNames,
    private readonly handlers: IndexFeedHandlers,
    private readonly logger: Logger,
  ) {
    this.recordPrefix = `${names.recordPrefix}.`;
    this.chunkPrefix = `${names.chunkPrefix}.`;
  }

  async start(): Promise<void> {
    await this.follow(0);
    this.watchdog = setInterval(() => void this.watch(), WATCH_MS);
    this.watchdog.unref();
  }

  /** Consumes from the sequence after `after` (0: from the first message). */
  private async follow(after: number): Promise<void> {
    // get() asks for the stream's info first: a node that knows no leader yet answers "try later".
    const consumer = await retryTransient(() =>
      this.js.consumers.get(this.names.stream, {
        filter_subjects: this.names.allFilter,
        headers_only: true,
        ...(after === 0 ? { deliver_policy: DeliverPolicy.All } : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: after + 1 }),
      }),
    );
    const info = await consumer.info(true);
    if (info.num_pending === 0) this.caughtUp();
    // After a nats-server restart the client re-checks the consumer and backs off by `expires` when
    // JetStream is not up yet: at the 30 s default the trainer saw nothing new for 30 s per restart
    // (the soak's timeline showed it). 5 s bounds that gap for one idle pull every 5 s.
    this.messages = await consumer.consume({ max_messages: 4096, expires: FEED_PULL_EXPIRES_MS });
    this.loop = this.run(this.messages);
  }

  /** Read through a call: stop() may run while watch() awaits. */
  private isStopped(): boolean {
    return this.stopped;
  }

  /** Starts the feed again after lastSeq when it has not moved since the last check while the stream has more. */
  private async watch(): Promise<void> {
    const seen = this.lastSeq;
    const moved = seen !== this.watchedSeq;
    this.watchedSeq = seen;
    if (moved || this.stopped) return;
    try {
      const jsm = await this.js.jetstreamManager();
      const last = (await jsm.streams.info(this.names.stream)).state.last_seq;
      if (last <= seen || this.isStopped()) return;
      this.logger.warn({ lastSeen: seen, streamLast: last }, 'index feed stalled: following the stream again');
      const stale = this.messages;
      await stale?.close();
      await this.loop;
      // After the last message the old iterator handled, which may be past `seen`.
      if (!this.isStopped()) await this.follow(this.lastSeq);
    } catch (err) {
      // The stream cannot be read now (no leader yet): the next check tries again.
      this.logger.debug({ err: (err as Error).message }, 'index feed check failed');
    }
  }

  private async run(messages: ConsumerMessages): Promise<void> {
    try {
      for await (const m of messages) this.handle(m);
    } catch (err) {
      this.logger.error({ err: (err as Error).message }, 'index feed stopped');
    }
  }

  private handle(m: JsMsg): void {
    this.lastSeq = m.seq;
    const timeMs = m.info.timestampNanos / 1e6;
    if (m.subject.startsWith(this.chunkPrefix)) this.handlers.chunk(m.seq, timeMs);
    else if (m.subject.startsWith(this.recordPrefix)) {
      const header = m.headers?.get(META_HEADER);
      try {
        if (!header) throw new Error(`record without ${META_HEADER} header`);
        this.handlers.record(m.seq, decodeMeta(header), timeMs);
      } catch (err) {
        this.handlers.corrupt(m.seq, err);
      }
    }
    if (m.info.pending === 0) this.caughtUp();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.watchdog);
    await this.messages?.close();
    await this.loop;
  }
}
