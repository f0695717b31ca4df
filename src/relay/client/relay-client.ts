/**
 * RelayClient: what trainers and rollouts link with to talk to their host's relay.
 *
 *   const relay = await RelayClient.connect({ socketPath });
 *   const pub = await relay.beginPublish({ model, version, tensors: [{ name, dtype, shape }] });
 *   pub.write('w', float32Array); await pub.commit();
 *
 *   await using lease = await relay.acquire({ model, atLeast: 3, timeoutMs: 60_000 });
 *   const w = lease.tensor('w');                       // zero-copy view of shared memory
 *
 *   for await (const v of relay.watch({ model })) ...  // each version as it completes
 */
import type { BroadcastStatus } from '../broadcast/broadcaster.js';
import type { ChainPlan } from '../broadcast/plan.js';
import { ErrorCodes, LaminarError } from '../../common/errors.js';
import { Mapping } from '../../native/index.js';
import type { Dtype } from '../../safetensors/dtypes.js';
import { defaultSocketPath, DEFAULT_SHM_DIR } from '../options.js';
import { PROTOCOL_VERSION, type AcquireResult, type SegmentDescription, type VersionEvent } from '../protocol/messages.js';
import type { VersionInfo } from '../store.js';
import { FrameConnection, type RequestOptions } from './connection.js';
import { Lease } from './lease.js';
import { Publication, type TensorData } from './publication.js';
import { RemotePublisher, type RemoteOptions } from './remote-publisher.js';

export interface ConnectOptions {
  /** The relay's socket (default: relay.sock in the default shm directory). */
  socketPath?: string;
  /** Shown in the relay's logs. */
  name?: string;
}

export interface BeginOptions {
  model: string;
  version: number;
  tensors: { name: string; dtype: Dtype; shape: number[] }[];
  metadata?: Record<string, string>;
  chunkSize?: number;
  /** Pre-fault the writer's page tables at begin so that writes run at memcpy speed (default true). */
  populate?: boolean;
}

export interface AcquireOptions {
  model: string;
  /** Exactly this version. */
  version?: number;
  /** The latest version if it is >= atLeast. */
  atLeast?: number;
  /** How long to wait for a matching version to arrive (default 0: answer now). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RelayStatus {
  relay: string;
  shmDir: string;
  /** Versions and spare segments. */
  usedBytes: number;
  /** Segments kept allocated for the next versions (their bytes are in usedBytes). */
  spares: { count: number; bytes: number; warming: number };
  memoryBudget: number | null;
  pinning: boolean;
  pinnedBytes: number;
  leases: number;
  connections: number;
  versions: VersionInfo[];
  /** The relay's part in the broadcast, or null when it takes none. */
  broadcast: BroadcastStatus | null;
}

const WATCH_QUEUE_LIMIT = 1024;

export class RelayClient implements AsyncDisposable {
  private readonly watchers = new Map<number, (event: VersionEvent) => void>();
  /**
   * Events that arrive in the same read as the watch's own response reach us before the
   * watcher is registered: they wait here (bounded) instead of being lost.
   */
  private readonly early = new Map<number, VersionEvent[]>();

  private constructor(
    private readonly connection: FrameConnection,
    readonly relayId: string,
    readonly shmDir: string,
  ) {
    connection.onVersionEvent = (event) => {
      const watcher = this.watchers.get(event.watch);
      if (watcher) return watcher(event);
      const queue = this.early.get(event.watch) ?? [];
      if (queue.length < WATCH_QUEUE_LIMIT) queue.push(event);
      this.early.set(event.watch, queue);
    };
  }

  /**
   * Remote mode: for a trainer whose host runs no relay. Connects over UCX to the master relay
   * at `address` and pushes versions there (see remote-publisher.ts).
   */
  static remote(options: RemoteOptions): Promise<RemotePublisher> {
    return RemotePublisher.connect(options);
  }

  static async connect(options: ConnectOptions = {}): Promise<RelayClient> {
    const socketPath = options.socketPath ?? process.env.LAMINAR_RELAY_SOCKET ?? defaultSocketPath(DEFAULT_SHM_DIR);
    const connection = await FrameConnection.connect(socketPath);
    try {
      const hello = await connection.request<{ relay: string; shmDir: string }>(
        'hello',
        { protocol: PROTOCOL_VERSION, client: options.name ?? `pid ${process.pid}` },
        { timeoutMs: 10_000 },
      );
      return new RelayClient(connection, hello.relay, hello.shmDir);
    } catch (err) {
      connection.close();
      throw err;
    }
  }

  /** Sends a raw request (operations not wrapped below, tests, tools). */
  request<T>(op: string, args: Record<string, unknown> = {}, options?: RequestOptions): Promise<T> {
    return this.connection.request<T>(op, args, options);
  }

  async beginPublish(options: BeginOptions): Promise<Publication> {
    const { populate = true, ...args } = options;
    const description = await this.connection.request<SegmentDescription>('begin', { ...args });
    return this.openPublication(description, true, populate);
  }

  /** Joins a publication another writer began (e.g. rank 0 of a trainer), by segment name. */
  async attach(segment: string, options: { populate?: boolean } = {}): Promise<Publication> {
    const description = await this.connection.request<SegmentDescription>('attach', { segment });
    return this.openPublication(description, false, options.populate ?? true);
  }

  private async openPublication(description: SegmentDescription, owner: boolean, populate: boolean): Promise<Publication> {
    let mapping: Mapping;
    try {
      mapping = new Mapping(description.path, { writable: true });
      if (populate) await mapping.populate(0, mapping.size, true);
    } catch (err) {
      if (owner) await this.connection.request('abort', { model: description.model, version: description.version }).catch(() => undefined);
      throw err;
    }
    return new Publication(this.connection, description, mapping, owner);
  }

  /** One-call publish: lays out, writes and commits the given tensors. */
  async publish(options: {
    model: string;
    version: number;
    tensors: { name: string; dtype: Dtype; shape: number[]; data: TensorData }[];
    metadata?: Record<string, string>;
  }): Promise<SegmentDescription> {
    const pub = await this.beginPublish({
      model: options.model,
      version: options.version,
      tensors: options.tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
      ...(options.metadata ? { metadata: options.metadata } : {}),
    });
    try {
      for (const t of options.tensors) pub.write(t.name, t.data);
      return await pub.commit();
    } catch (err) {
      await pub.abort().catch(() => undefined);
      throw err;
    }
  }

  /**
   * Has the relay adopt a checkpoint (a .safetensors file or a directory of shards) as a
   * version. The relay reads the files itself: the path must be readable on the relay's host.
   */
  publishFile(
    path: string,
    options: { model: string; version: number; chunkSize?: number; onProgress?: (done: number, total: number) => void; signal?: AbortSignal },
  ): Promise<SegmentDescription> {
    const { onProgress, signal, ...args } = options;
    return this.connection.request<SegmentDescription>('adopt', { path, ...args }, { ...(onProgress ? { onProgress } : {}), ...(signal ? { signal } : {}) });
  }

  async acquire(options: AcquireOptions): Promise<Lease> {
    const { signal, ...args } = options;
    const result = await this.connection.request<AcquireResult>('acquire', { ...args }, signal ? { signal } : {});
    let mapping: Mapping;
    try {
      mapping = new Mapping(result.path, { writable: false });
    } catch (err) {
      await this.connection.request('release', { lease: result.lease }).catch(() => undefined);
      throw err;
    }
    return new Lease(this.connection, result, mapping);
  }

  /**
   * Versions as they complete on the relay. With `replay`, the latest complete version of each
   * model is delivered first. Ends when the signal aborts or the loop breaks.
   */
  async *watch(options: { model?: string; replay?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<VersionEvent> {
    const queue: VersionEvent[] = [];
    let wake: (() => void) | null = null;
    let overflow = false;
    const { watch } = await this.connection.request<{ watch: number }>('watch', {
      ...(options.model !== undefined ? { model: options.model } : {}),
      replay: options.replay ?? false,
    });
    this.watchers.set(watch, (event) => {
      if (queue.length >= WATCH_QUEUE_LIMIT) overflow = true;
      else queue.push(event);
      wake?.();
    });
    queue.push(...(this.early.get(watch) ?? []));
    this.early.delete(watch);
    const onAbort = (): void => wake?.();
    options.signal?.addEventListener('abort', onAbort);
    const unsubscribe = this.connection.onClosed(() => wake?.());
    try {
      for (;;) {
        while (queue.length > 0) yield queue.shift()!;
        if (overflow) throw new LaminarError('ERR_WATCH_OVERFLOW', `more than ${WATCH_QUEUE_LIMIT} version events were not consumed`);
        if (options.signal?.aborted || this.connection.closed) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = null;
      }
    } finally {
      unsubscribe();
      options.signal?.removeEventListener('abort', onAbort);
      this.watchers.delete(watch);
      if (!this.connection.closed) await this.connection.request('unwatch', { watch }).catch(() => undefined);
    }
  }

  status(): Promise<RelayStatus> {
    return this.connection.request<RelayStatus>('status', {});
  }

  /**
   * Hands the relay a chain plan (see broadcast/plan.ts). Applied only when its epoch is newer
   * than the one in force; `applied` says whether it was.
   */
  setPlan(plan: ChainPlan): Promise<{ applied: boolean; status: BroadcastStatus }> {
    return this.connection.request('plan', { plan });
  }

  get closed(): boolean {
    return this.connection.closed;
  }

  close(): void {
    this.connection.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}

export { Lease, Publication, ErrorCodes, RemotePublisher };
export { RelayError } from './connection.js';
