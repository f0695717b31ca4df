/**
 * A manager's standing in its job: whether it holds the leader lease (leader-lease.ts), renewed
 * or contended for every third of the lease, and whether it can hear the job at all (its NATS
 * connection). It owns no job state; it tells the manager when to take over (`elected`), when to
 * stop acting (`deposed`) and when the connection came back after an outage (`reconnected`).
 *
 * A manager is the leader only once it holds the lease *and* its takeover succeeded: holding the
 * lease without leading would keep every standby out while nobody runs the job. Lease rounds run
 * one at a time (a round, takeover included, never overlaps the next), so that a slow takeover
 * is never raced by a renewal or a second takeover.
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
  /**
   * This manager won the lease: take the job over. A rejection means the takeover failed; the
   * manager has undone whatever it had set up by then (this class hands the lease back).
   */
  elected: () => Promise<void>;
  /** Stop acting as leader ('stopping' on close, 'lease lost', or the reason given to resign()). */
  deposed: (reason: string) => void;
  /** The NATS connection is back after a disconnect. */
  reconnected: () => void;
}

export class Leadership {
  private bucket: KV | null = null;
  private lease: LeaderLease | null = null;
  private roundTimer: NodeJS.Timeout | null = null;
  /** The lease round under way (rounds never overlap; close() waits for it). */
  private round: Promise<void> | null = null;
  /** The takeover succeeded and the lease has not been lost since: this manager runs the job. */
  private leading = false;
  /** After a failed takeover or a resignation, this manager does not contend before this time (see giveUp). */
  private sitOutUntil = 0;
  private disconnectedSince: number | null = null;
  private stopped = false;

  constructor(private readonly options: LeadershipOptions) {}

  /** Holds the lease and took the job over. */
  get isLeader(): boolean {
    return this.leading && this.lease?.state === 'leader';
  }

  /**
   * The manager that leads the job, as the last lease round saw it: this one while it leads,
   * else the lease's holder (null when nobody holds it), so that a standby's status names the leader.
   */
  get leaderId(): string | null {
    if (this.isLeader) return this.options.id;
    const seen = this.lease?.holderSeen ?? null;
    return seen === this.options.id ? null : seen;
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

  private get periodMs(): number {
    return Math.max(100, Math.floor(this.options.leaseMs / 3));
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
    await this.runRound();
  }

  /** Resolves once this manager is the leader (holds the lease and took the job over). */
  async whenLeader(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.isLeader) {
      if (Date.now() > deadline) throw new ControlError(ErrorCodes.NO_MANAGER, `${this.options.id} did not become leader within ${timeoutMs} ms`);
      await delay(50);
    }
  }

  /**
   * Stops acting as leader at once and hands the lease back, for a reason found outside the
   * lease rounds (another manager wrote the plan): the lease must not stay with a manager that
   * leads nothing. The next leader (a standby, or this manager after sitting out) takes over
   * afresh from the stored state.
   */
  resign(reason: string): void {
    if (this.stopped || !this.leading) return;
    this.leading = false;
    this.options.deposed(reason);
    void this.giveUp(reason);
  }

  /** Stops contending, steps down and hands the lease back, so that a standby takes over at once. */
  async close(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.roundTimer) clearTimeout(this.roundTimer);
    // A round under way finishes first: a renewal landing after the release would keep the lease.
    await this.round;
    this.leading = false;
    this.options.deposed('stopping');
    await this.lease?.release();
  }

  /** One round now, then the next a period after this one started (or at once if it took longer). */
  private runRound(): Promise<void> {
    const started = Date.now();
    this.round = this.step()
      .catch((err: unknown) => {
        // step() handles what it expects; anything else is a fault, logged, and the rounds go on.
        this.options.log.error({ err }, 'lease round failed unexpectedly');
      })
      .finally(() => {
        this.round = null;
        if (this.stopped) return;
        this.roundTimer = setTimeout(() => void this.runRound(), Math.max(0, this.periodMs - (Date.now() - started)));
        this.roundTimer.unref();
      });
    return this.round;
  }

  private async step(): Promise<void> {
    if (this.stopped || !this.lease || Date.now() < this.sitOutUntil) return;
    let state: 'leader' | 'standby';
    try {
      state = await this.lease.step();
    } catch (err) {
      // NATS unreachable: a leader keeps acting on what it knows until the lease is lost.
      this.options.log.debug({ err: (err as Error).message }, 'lease round failed');
      return;
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- close() may run during the await above; TS keeps the narrowing from the first check
    if (this.stopped) return;
    if (state === 'leader' && !this.leading) {
      try {
        await this.options.elected();
      } catch (err) {
        this.options.log.error({ err }, 'taking the job over failed: handing the lease back');
        await this.giveUp('takeover failed');
        return;
      }
      // close() ran during the takeover: it steps down (deposed) once this round is over.
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- close() may run during the await above
      if (this.stopped) return;
      this.leading = true;
    } else if (state !== 'leader' && this.leading) {
      this.leading = false;
      this.options.deposed('lease lost');
    }
  }

  /**
   * Hands the lease back and sits out one lease period. Why not keep the lease and retry the
   * takeover: the failure may be this manager's own (its connection, its permissions, its
   * state), and a healthy standby would be kept out for as long as it lasts. Released, the lease
   * goes to the first standby whose round comes next (every third of a lease period); sitting
   * out a whole period makes sure that one is not this manager again. With no standby, this
   * manager takes the lease back after the sit-out and tries again: the job goes unled for about
   * a lease period per failure, as long as a failover.
   */
  private async giveUp(reason: string): Promise<void> {
    this.sitOutUntil = Date.now() + this.options.leaseMs;
    this.options.log.warn({ reason, sitOutMs: this.options.leaseMs }, 'lease handed back');
    // release() does not reject: a lease it cannot delete (NATS away) expires a period after the last renewal.
    await this.lease?.release();
  }
}
