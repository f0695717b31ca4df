/**
 * The rollout's connection to the relay on its host, where its weights come from. The relay may
 * not be up yet when the rollout starts (services start in any order), or go away later: either
 * way the rollout goes on with the weights it has, says so once per outage, and every acquire
 * tries to connect again. At most one connection attempt is under way at a time.
 */
import type { Logger } from 'pino';
import { ErrorCodes } from '../common/errors.js';
import { RelayClient, type AcquireOptions, type Lease } from '../relay/client/index.js';

export interface LocalRelayOptions {
  socketPath: string;
  /** The client's name in the relay's logs. */
  name: string;
  log: Logger;
  /** The rollout client was closed: a connection made meanwhile is closed at once. */
  closed: () => boolean;
  /** The error an acquire after close throws. */
  closedError: () => Error;
  /** The weight version in use (logged when the relay goes away). */
  weightVersion: () => number | null;
}

export class LocalRelay {
  private relay: RelayClient | null = null;
  /** The last acquire found the relay gone (ERR_CLOSED); cleared by the next one that succeeds. */
  private away = false;
  private connecting: Promise<RelayClient> | null = null;

  constructor(private readonly options: LocalRelayOptions) {}

  /** The first connection; a relay not there yet (ERR_CLOSED) is an outage, not an error. */
  async start(): Promise<void> {
    // A relay not up yet (services started in any order) is the same as one that went away:
    // the rollout starts, and acquireWeights() connects once the relay is there.
    this.relay = await this.connect().catch((err: unknown) => {
      if ((err as { code?: string }).code !== ErrorCodes.CLOSED) throw err;
      this.awayNow(err as Error);
      return null;
    });
  }

  /** A lease on the version `options` ask for, connecting first when needed. */
  async acquire(options: AcquireOptions): Promise<{ relay: RelayClient; lease: Lease }> {
    const relay = await this.client();
    const lease = await relay.acquire(options);
    return { relay, lease };
  }

  /** An acquire failed: ERR_CLOSED means the relay is away. */
  failed(err: Error): void {
    if ((err as { code?: string }).code === ErrorCodes.CLOSED) this.awayNow(err);
  }

  /** An acquire succeeded: the end of an outage, if there was one. */
  succeeded(relay: RelayClient, version: number): void {
    if (!this.away) return;
    this.away = false;
    this.options.log.info({ version, relay: relay.relayId }, 'the local relay is back');
  }

  close(): void {
    this.relay?.close();
  }

  private connect(): Promise<RelayClient> {
    return RelayClient.connect({ socketPath: this.options.socketPath, name: this.options.name });
  }

  /** The relay client, connected on first use when the relay was not up at start (one attempt at a time). */
  private async client(): Promise<RelayClient> {
    if (this.relay) return this.relay;
    this.connecting ??= this.connect().finally(() => {
      this.connecting = null;
    });
    const relay = await this.connecting;
    if (this.options.closed()) {
      relay.close();
      throw this.options.closedError();
    }
    this.relay ??= relay;
    return this.relay;
  }

  /** Said once per outage: the engine goes on with the weights it has meanwhile. */
  private awayNow(err: Error): void {
    if (this.away) return;
    this.away = true;
    this.options.log.warn(
      { version: this.options.weightVersion(), err: err.message },
      'the local relay is away: keeping the weights in use; every acquire tries to connect again',
    );
  }
}
