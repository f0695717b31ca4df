/**
 * At most one active manager per job: a lease in the control bucket, taken and renewed with
 * compare-and-set on the key's revision. A standby watches the revision; when it has not moved
 * for a whole lease period (judged on the standby's own clock, so clock skew between hosts does
 * not matter) the holder is gone and the standby takes the lease, again by compare-and-set, so
 * that of several standbys exactly one wins.
 */
import type { KV } from '@nats-io/kv';
import { SCHEMA_VERSION, decode, encode, leaseSchema } from '../control/schema.js';
import { Keys } from '../control/subjects.js';

export type LeaseState = 'standby' | 'leader';

export class LeaderLease {
  private revision = 0;
  private seenRevision = -1;
  private seenAt = 0;
  state: LeaseState = 'standby';
  /** Who held the lease at the last round (this manager's id while it holds it; null when nobody did, or it was unreadable). */
  holderSeen: string | null = null;

  constructor(
    private readonly kv: KV,
    readonly holder: string,
    readonly ttlMs: number,
  ) {}

  /** One round: take, renew or watch the lease. Returns the state after it. */
  async step(now = Date.now()): Promise<LeaseState> {
    const value = encode({ v: SCHEMA_VERSION, holder: this.holder, ttlMs: this.ttlMs, at: now });
    const entry = await this.kv.get(Keys.leader);
    if (entry === null || entry.operation !== 'PUT') {
      this.holderSeen = null;
      this.state = (await this.attempt(() => (entry === null ? this.kv.create(Keys.leader, value) : this.kv.update(Keys.leader, value, entry.revision))))
        ? 'leader'
        : 'standby';
      if (this.state === 'leader') this.holderSeen = this.holder;
      return this.state;
    }
    let holder = '';
    try {
      holder = decode(leaseSchema, entry.value, 'lease').holder;
    } catch {
      // An unreadable lease is treated like one held by somebody else: it expires.
    }
    this.holderSeen = holder === '' ? null : holder;
    if (holder === this.holder && (this.state === 'leader' || entry.revision === this.revision)) {
      this.state = (await this.attempt(() => this.kv.update(Keys.leader, value, entry.revision))) ? 'leader' : 'standby';
      return this.state;
    }
    this.state = 'standby';
    if (entry.revision !== this.seenRevision) {
      this.seenRevision = entry.revision;
      this.seenAt = now;
      return this.state;
    }
    if (now - this.seenAt >= this.ttlMs) {
      this.state = (await this.attempt(() => this.kv.update(Keys.leader, value, entry.revision))) ? 'leader' : 'standby';
      if (this.state === 'leader') this.holderSeen = this.holder;
    }
    return this.state;
  }

  /** Gives the lease up (clean shutdown), so that a standby takes over at once. */
  async release(): Promise<void> {
    if (this.state !== 'leader') return;
    this.state = 'standby';
    this.holderSeen = null;
    await this.kv.delete(Keys.leader, { previousSeq: this.revision }).catch(() => undefined);
  }

  private async attempt(write: () => Promise<number>): Promise<boolean> {
    try {
      this.revision = await write();
      this.seenRevision = this.revision;
      return true;
    } catch {
      // Somebody else wrote first (wrong last sequence): not ours.
      return false;
    }
  }
}
