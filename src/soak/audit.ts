/**
 * The soak's audit of the experience buffer: every record any writer put into the buffer's stream,
 * read as it arrives, kept by trajectory id. The trainer deletes what it trains on (and evicts
 * what is too stale), so the stream at the end holds only what is left; the audit is what was
 * ever written. It reads headers only (an ordered consumer over the whole stream from sequence 1),
 * survives nats-server restarts (the ordered consumer goes on at the next sequence) and counts
 * every sequence it never saw: a message deleted before the audit read it could have been a record
 * it cannot vouch for, so the books say how many there were rather than guess.
 *
 * Not the sampler's IndexFeed, though it reads the same way: the feed decodes every record's
 * metadata and stops for good on a consumer error, where the audit needs only the subject and
 * must go on from the next sequence whatever happens.
 */
import { DeliverPolicy, jetstream, type ConsumerMessages } from '@nats-io/jetstream';
import { openJetStreamManager } from '../data/jetstream-manager.js';
import type { NatsConnection } from '@nats-io/transport-node';
import { delay } from '../common/concurrency.js';
import { bufferNames, ensureBufferStream, trajectoryIdOfSubject } from '../data/index.js';
import { FEED_PULL_EXPIRES_MS } from '../data/experience/index-feed.js';

export interface AuditBooks {
  /** Trajectories with at least one record in the stream, ever. */
  records: number;
  /** Trajectories with more than one record (two messages at different sequences). */
  duplicated: string[];
  /** The first duplicates, each with its records' sequences and store times: a write retried
   * within seconds (deduplication missed) or a regeneration minutes later tell different stories. */
  duplicateRecords: DuplicateRecord[];
  /** Messages delivered to the audit again at a sequence it had already read (not duplicates). */
  redelivered: number;
  /** Stream sequences deleted before the audit read them (0: the audit saw every message). */
  unread: number;
}

export interface DuplicateRecord {
  id: string;
  records: Array<{ seq: number; storedAt: string }>;
}

/** How many duplicates the books describe record by record (the rest are counted). */
const DUPLICATES_DESCRIBED = 50;

export class BufferAudit {
  private readonly names = bufferNames();
  /** Trajectory id → its first record's sequence and store time. */
  private readonly seen = new Map<string, { seq: number; storedAt: string }>();
  private readonly duplicated: string[] = [];
  private readonly duplicateRecords: DuplicateRecord[] = [];
  private redelivered = 0;
  private lastSeq = 0;
  private unread = 0;
  private messages: ConsumerMessages | null = null;
  private stopped = false;
  private loop: Promise<void> = Promise.resolve();
  /** Times the consumer had to be made again (each one from the next sequence). */
  restarts = 0;

  private constructor(private readonly nc: NatsConnection) {}

  /** Creates the buffer's stream if no writer has yet (as a writer would), then follows it from its first message. */
  static async open(nc: NatsConnection): Promise<BufferAudit> {
    await ensureBufferStream(await openJetStreamManager(nc));
    const audit = new BufferAudit(nc);
    audit.loop = audit.follow();
    return audit;
  }

  get completed(): number {
    return this.seen.size;
  }

  has(id: string): boolean {
    return this.seen.has(id);
  }

  private async follow(): Promise<void> {
    const js = jetstream(this.nc);
    while (!this.isStopped()) {
      try {
        const consumer = await js.consumers.get(this.names.stream, {
          filter_subjects: this.names.allFilter,
          headers_only: true,
          ...(this.lastSeq === 0 ? { deliver_policy: DeliverPolicy.All } : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: this.lastSeq + 1 }),
        });
        // As the sampler's index feed: a short pull, so that a nats-server restart costs seconds, not 30.
        this.messages = await consumer.consume({ max_messages: 4096, expires: FEED_PULL_EXPIRES_MS });
        for await (const m of this.messages) {
          // A sequence already read (a consumer made again, a delivery repeated across a leader
          // change) is the same stored message: counted apart, never as a second record.
          if (m.seq <= this.lastSeq) {
            this.redelivered++;
            continue;
          }
          // Every message of the stream passes this filter: a gap is a message deleted before it was read.
          if (m.seq > this.lastSeq + 1) this.unread += m.seq - this.lastSeq - 1;
          this.lastSeq = m.seq;
          if (!m.subject.startsWith(`${this.names.recordPrefix}.`)) continue;
          const id = trajectoryIdOfSubject(m.subject);
          const record = { seq: m.seq, storedAt: new Date(m.info.timestampNanos / 1e6).toISOString() };
          const first = this.seen.get(id);
          if (first === undefined) {
            this.seen.set(id, record);
            continue;
          }
          this.duplicated.push(id);
          if (this.duplicateRecords.length < DUPLICATES_DESCRIBED) this.duplicateRecords.push({ id, records: [first, record] });
        }
        if (!this.isStopped()) this.restarts++; // the consumer ended
      } catch {
        if (this.isStopped()) return;
        this.restarts++;
        await delay(1000);
      }
    }
  }

  /** A method, not the field: stop() sets it while the loop awaits. */
  private isStopped(): boolean {
    return this.stopped;
  }

  /**
   * Waits until the audit has read up to the stream's last message (bounded: a stream it cannot
   * reach is reported as what it read so far).
   */
  async caughtUp(timeoutMs = 60_000): Promise<boolean> {
    const jsm = await openJetStreamManager(this.nc);
    const deadline = performance.now() + timeoutMs;
    while (performance.now() < deadline) {
      try {
        const info = await jsm.streams.info(this.names.stream);
        if (this.lastSeq >= info.state.last_seq) return true;
      } catch {
        // nats-server away for a moment
      }
      await delay(200);
    }
    return false;
  }

  books(): AuditBooks {
    return {
      records: this.seen.size,
      duplicated: [...this.duplicated],
      duplicateRecords: [...this.duplicateRecords],
      redelivered: this.redelivered,
      unread: this.unread,
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.messages?.close();
    await this.loop;
  }
}
