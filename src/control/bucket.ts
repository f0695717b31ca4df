/** The job's control KV bucket (created on first use by whoever comes first; same settings for all). */
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { meetJetStream } from '../data/jetstream-manager.js';

export interface BucketOptions {
  /** Replicas of the bucket's stream: 3 on a NATS cluster so that the control state survives a server. */
  replicas?: number;
}

export function openControlBucket(nc: NatsConnection, bucket: string, options: BucketOptions = {}): Promise<KV> {
  const replicas = options.replicas ?? 1;
  // history 1: only the current value of each key matters; CAS uses its revision.
  // Replicated, the bucket's reads go to its stream's leader (no `allow_direct`): a direct get is
  // answered by any replica that once caught up, and one that fell behind again (back from a
  // partition) answers from what it holds: a standby judged the holder by a lease that had
  // changed hands (test/cluster-nats/stale-replica), and a manager renewing its lease could read
  // an older revision of it, fail its compare-and-set and step down. The bucket is read a few times a second, so the leader
  // serving every read costs nothing measurable. nats.js reads by the stream's setting, so every
  // process that opens the bucket reads from the leader (src/data/leader-read.ts does the same
  // for the data streams' deciding reads). A single server has no stale replica: direct gets.
  // Like every first meeting with JetStream (src/data/jetstream-manager.ts), retried while the
  // server asked knows no meta leader yet (a manager started on a node back from a partition), and
  // refused at once, saying so, where the server has no JetStream.
  return meetJetStream(nc, () => new Kvm(nc).create(bucket, { history: 1, replicas, ...(replicas > 1 ? { allow_direct: false } : {}) }));
}
