/** The job's control KV bucket (created on first use by whoever comes first; same settings for all). */
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';

export interface BucketOptions {
  /** Replicas of the bucket's stream: 3 on a NATS cluster so that the control state survives a server. */
  replicas?: number;
}

export async function openControlBucket(nc: NatsConnection, bucket: string, options: BucketOptions = {}): Promise<KV> {
  // history 1: only the current value of each key matters; CAS uses its revision.
  return new Kvm(nc).create(bucket, { history: 1, replicas: options.replicas ?? 1 });
}
