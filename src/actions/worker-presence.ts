/**
 * Workers announce themselves in the pool's KV bucket (one key per worker, its status as JSON,
 * rewritten every heartbeat); the bucket's max age removes a worker that stops heartbeating (one
 * killed), and a worker that stops cleanly deletes its key. `laminar actions` lists them.
 */
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../common/logger.js';
import type { ActionNames } from './names.js';

export const PRESENCE_HEARTBEAT_MS = 2_000;
/** A worker missing this long is gone (a few heartbeats). */
export const PRESENCE_TTL_MS = 3 * PRESENCE_HEARTBEAT_MS;

export function openWorkersBucket(nc: NatsConnection, names: ActionNames): Promise<KV> {
  return new Kvm(nc).create(names.workersBucket, { history: 1, ttl: PRESENCE_TTL_MS });
}

export class WorkerPresence {
  private timer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly kv: KV,
    private readonly key: string,
    private readonly status: () => object,
    private readonly logger: Logger,
  ) {}

  static async start(nc: NatsConnection, names: ActionNames, status: () => { id: string }, logger: Logger): Promise<WorkerPresence> {
    const kv = await openWorkersBucket(nc, names);
    const p = new WorkerPresence(kv, Buffer.from(status().id).toString('base64url'), status, logger);
    await p.beat();
    p.timer = setInterval(() => void p.beat(), PRESENCE_HEARTBEAT_MS);
    p.timer.unref();
    return p;
  }

  private async beat(): Promise<void> {
    try {
      await this.kv.put(this.key, JSON.stringify({ ...this.status(), seen: Date.now() }));
    } catch (err) {
      this.logger.debug({ err }, 'worker heartbeat not written');
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.kv.delete(this.key).catch(() => {});
  }
}
