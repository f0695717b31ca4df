/**
 * Opening a JetStreamManager: the one place a component meets JetStream first.
 *
 * `jetstreamManager(nc)` asks the server for the account's JetStream info before it returns. On a
 * cluster that request is answered by the meta leader, and a server that knows none answers
 * "JetStream system temporarily unavailable" (10008): a node just back from a partition or a
 * restart, before it has heard from the others (a sampler opened on the healed node of
 * test/cluster-nats/partition.test.ts got it). That answer, like a timeout while the meta leader is
 * being elected, is retried (retryTransient's policy). A server without JetStream at all answers
 * nobody ("no responders"), which nothing waits away: it fails at once, saying so.
 */
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { StoreError } from './errors.js';
import { retryTransient, type RetryOptions } from './retry.js';

export function openJetStreamManager(nc: NatsConnection, options: RetryOptions = {}): Promise<JetStreamManager> {
  return meetJetStream(nc, () => jetstreamManager(nc), options);
}

/**
 * `call`, a component's first request to JetStream that asks for the account's info first (as
 * `jetstreamManager` and `Kvm.create` do), with the retries and the error above.
 */
export async function meetJetStream<T>(nc: NatsConnection, call: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
  try {
    return await retryTransient(call, { ...options, retryIf: (err) => !isJetStreamMissing(err) });
  } catch (err) {
    if (!isJetStreamMissing(err)) throw err;
    throw new StoreError(`the NATS server at ${nc.getServer()} has no JetStream: start nats-server with --jetstream (-js)`, err);
  }
}

/** What @nats-io/jetstream throws when no server answers its API: JetStream is off there. */
function isJetStreamMissing(err: unknown): boolean {
  return err instanceof Error && err.name === 'JetStreamNotEnabled';
}
