/**
 * A manager's standing in its job: whether it holds the leader lease (leader-lease.ts), renewed
 * or contended for every third of the lease, and whether it can hear the job at all (its NATS
 * connection). It owns no job state; it tells the manager when to take over (`elected`), when to
 * stop acting (`deposed`) and when the connection came back after an outage (`reconnected`).
 */
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { delay } from '../common/concurrency.js';
import { openControlBucket } from '../control/bucket.js';
import { ControlError } from '../control/schema.js';
import { LeaderLease } from './leader-lease.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface LeadershipOptions {
  nc: NatsConnection;
  /** The manager's id: the lease's holder. */
  id: string;
  bucket: string;
  replicas: number;
  leaseMs: number;
  log: Logger;
  /** This manager won the lease: take the job over. */
  elected: () => Promise<void>;
  /** Stop acting as leader ('stopping' on close, 'lease lost'). */
  deposed: (reason: string) => void;
  /** The NATS connection is back after a disconnect. */
  reconnected: () => void;
}

export class Leadership {
  private bucket: KV | null = null;
  private lease: LeaderLease | null = null;
  private leaseTimer: NodeJS.Timeout | null = null;
  private disconnectedSince: number | null = null;
  private stopped = false;

  constructor(private readonly options: LeadershipOptions) {}

  get isLeader(): boolean {
    return this.lease?.state === 'leader';
  }

  /** The control bucket (null before start()). */
  get kv(): KV | null {
    return this.bucket;
  }

  get closed(): boolean {
    return this.stopped;
  }

  /** NATS is away: silence from members says nothing about them. */
  get disconnected(): boolean {
    return this.disconnectedSince !== null;
  }

  /** Opens the bucket and starts contending for the lease (returns after the first round). */
  async start(): Promise<void> {
    const { nc } = this.options;
    this.bucket = await openControlBucket(nc, this.options.bucket, { replicas: this.options.replicas });
    this.lease = new LeaderLease(this.bucket, this.options.id, this.options.leaseMs);
    void (async () => {
      for await (const status of nc.status()) {
        if (this.stopped) break;
        if (status.type === 'disconnect') this.disconnectedSince ??= Date.now();
        if (status.type === 'reconnect') {
          this.options.reconnected();
          this.disconnectedSince = null;
        }
      }
    })().catch(() => undefined);
    await this.step();
    this.leaseTimer = setInterval(() => void this.step(), Math.max(100, Math.floor(this.options.leaseMs / 3)));
    this.leaseTimer.unref();
  }

  /** Resolves once this manager is the leader. */
  async whenLeader(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.isLeader) {
      if (Date.now() > deadline) throw new ControlError(ErrorCodes.NO_MANAGER, `${this.options.id} did not become leader within ${timeoutMs} ms`);
      await delay(50);
    }
  }

  /** Stops contending, steps down and hands the lease back, so that a standby takes over at once. */
  async close(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.leaseTimer) clearInterval(this.leaseTimer);
    this.options.deposed('stopping');
    await this.lease?.release();
  }

  private async step(): Promise<void> {
    if (this.stopped || !this.lease) return;
    const was = this.lease.state;
    let state: 'leader' | 'standby';
    try {
      state = await this.lease.step();
    } catch (err) {
      // NATS unreachable: a leader keeps acting on what it knows until the lease is lost.
      this.options.log.debug({ err: (err as Error).message }, 'lease round failed');
      return;
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- stop() may run during the await above; TS keeps the narrowing from the first check
    if (this.stopped) return;
    if (state === 'leader' && was !== 'leader') await this.options.elected();
    else if (state !== 'leader' && was === 'leader') this.options.deposed('lease lost');
  }
}
