/**
 * RelayClient: what trainers and rollouts link with to talk to their host's relay.
 *
 *   const relay = await RelayClient.connect({ socketPath });
 *   const pub = await relay.beginPublish({ model, version, tensors: [{ name, dtype, shape }] });
 *   pub.write('w', float32Array);
 *   const { visible } = await pub.commit();            // sent: the writer goes on
 *   await visible;                                     // verified and served (when it matters)
 *
 *   await using lease = await relay.acquire({ model, atLeast: 3, timeoutMs: 60_000 });
 *   const w = lease.tensor('w');                       // zero-copy view of shared memory
 *
 *   for await (const v of relay.watch({ model })) ...  // each version as it completes
 *
 * The client outlives the relay process: when the relay goes away (a crash, a restart, an
 * upgrade), the next request connects to the socket again and watches subscribe again. What
 * belonged to the old connection (leases, publications) went with it, as the relay gave it up.
 */
import type { ChainPlan } from '../broadcast/plan.js';
import { delay } from '../../common/concurrency.js';
import { ClosedError, ErrorCodes, LaminarError } from '../../common/errors.js';
import { Mapping } from '../../native/index.js';
import type { Dtype } from '../../safetensors/dtypes.js';
import { relaySocketFromEnv } from './socket-path.js';
import { PROTOCOL_VERSION, type AcquireResult, type SegmentDescription, type VersionEvent } from '../protocol/messages.js';
import type { BroadcastStatus, ChunkingStatus, Fp8BroadcastStatus, PagesStatus, VersionInfo } from '../protocol/status.js';
import type { LoraRequest } from '../lora/metadata.js';
import { mapSegment } from './segment-mapping.js';
import { FrameConnection, type RequestOptions } from './connection.js';
import { Lease } from './lease.js';
import { Publication, type PublishResult, type TensorData } from './publication.js';
import { RemotePublisher, type RemoteOptions } from './remote-publisher.js';

export interface ConnectOptions {
  /**
   * The relay's socket (default: LAMINAR_RELAY_SOCKET, else relay.sock in LAMINAR_SHM_DIR, else
   * in /dev/shm/laminar: the relay CLI's own defaults).
   */
  socketPath?: string;
  /** Shown in the relay's logs. */
  name?: string;
  /**
   * After the connection is lost, connect again on the next request and resubscribe watches
   * (default true). With false, a lost connection fails every later request with ERR_CLOSED.
   */
  reconnect?: boolean;
  /** How long the relay may take to answer a new connection's hello (default 10 s). */
  connectTimeoutMs?: number;
}

export interface BeginOptions {
  model: string;
  version: number;
  tensors: { name: string; dtype: Dtype; shape: number[] }[];
  metadata?: Record<string, string>;
  chunkSize?: number;
  /** Makes the version a LoRA adapter of a base the relay holds (src/relay/lora/): its tensors are PEFT's lora_A/lora_B pairs. */
  lora?: LoraRequest;
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
  /** Where the segments are (the shm directory, or the relay's huge-page mount in it). */
  shmDir: string;
  pages: PagesStatus;
  /** Versions and spare segments. */
  usedBytes: number;
  /** Segments kept allocated for the next versions (their bytes are in usedBytes). */
  spares: { count: number; bytes: number; warming: number };
  memoryBudget: number | null;
  pinning: boolean;
  pinnedBytes: number;
  /** How the relay chunks the versions it lays out: `auto` with the model's inputs, or fixed. */
  chunking: ChunkingStatus;
  leases: number;
  connections: number;
  versions: VersionInfo[];
  /** Older versions found at a restart and not verified yet (not acquirable until they are). */
  verifying: { model: string; version: number; size: number }[];
  /** The relay's part in the broadcast, or null when it takes none. */
  broadcast: BroadcastStatus | null;
  /** Where FP8 versions are made (`--fp8-broadcast`); absent from relays of older builds. */
  fp8Broadcast?: Fp8BroadcastStatus;
}

const WATCH_QUEUE_LIMIT = 1024;
/** Backoff between a watch's attempts to subscribe again while the relay is away. */
const RESUBSCRIBE_FIRST_MS = 100;
const RESUBSCRIBE_MAX_MS = 2000;

/**
 * One connection to the relay and what lives on it. Watch ids are the relay's, so they mean
 * nothing on another connection (a restarted relay numbers from 1 again).
 */
interface Session {
  connection: FrameConnection;
  relayId: string;
  shmDir: string;
  watchers: Map<number, (event: VersionEvent) => void>;
  /**
   * Events that arrive in the same read as the watch's own response reach us before the
   * watcher is registered: they wait here (bounded) instead of being lost.
   */
  early: Map<number, VersionEvent[]>;
}

interface SessionOptions {
  socketPath: string;
  name: string;
  connectTimeoutMs: number;
}

async function openSession({ socketPath, name, connectTimeoutMs }: SessionOptions): Promise<Session> {
  const connection = await FrameConnection.connect(socketPath);
  try {
    const hello = await connection.request<{ relay: string; shmDir: string }>(
      'hello',
      { protocol: PROTOCOL_VERSION, client: name },
      { timeoutMs: connectTimeoutMs },
    );
    const session: Session = { connection, relayId: hello.relay, shmDir: hello.shmDir, watchers: new Map(), early: new Map() };
    connection.onVersionEvent = (event) => {
      const watcher = session.watchers.get(event.watch);
      if (watcher) {
        watcher(event);
        return;
      }
      const queue = session.early.get(event.watch) ?? [];
      if (queue.length < WATCH_QUEUE_LIMIT) queue.push(event);
      session.early.set(event.watch, queue);
    };
    return session;
  } catch (err) {
    connection.close();
    // A relay that accepts but does not answer (stuck, or still starting) is as unreachable as one
    // that is not there: same code, so that callers and watches wait it out alike.
    if ((err as LaminarError).code === ErrorCodes.TIMEOUT)
      throw new ClosedError(`the relay at ${socketPath} did not answer hello within ${connectTimeoutMs} ms`);
    throw err;
  }
}

export class RelayClient implements AsyncDisposable {
  private session: Session;
  private reopening: Promise<Session> | null = null;
  private closedByUser = false;
  /** Aborted by close(): ends the waits of watches between attempts. */
  private readonly closing = new AbortController();
  private reconnectCount = 0;

  private constructor(
    session: Session,
    private readonly sessionOptions: SessionOptions,
    private readonly reconnect: boolean,
  ) {
    this.session = session;
  }

  /**
   * Remote mode: for a trainer whose host runs no relay. Connects over UCX to the master relay
   * at `address` and pushes versions there (see remote-publisher.ts).
   */
  static remote(options: RemoteOptions): Promise<RemotePublisher> {
    return RemotePublisher.connect(options);
  }

  static async connect(options: ConnectOptions = {}): Promise<RelayClient> {
    const socketPath = options.socketPath ?? relaySocketFromEnv();
    const sessionOptions = { socketPath, name: options.name ?? `pid ${process.pid}`, connectTimeoutMs: options.connectTimeoutMs ?? 10_000 };
    return new RelayClient(await openSession(sessionOptions), sessionOptions, options.reconnect ?? true);
  }

  /** The relay's id (after a reconnect, the one now serving the socket). */
  get relayId(): string {
    return this.session.relayId;
  }

  get shmDir(): string {
    return this.session.shmDir;
  }

  /** Whether the connection is up now (false while the relay is away, until the next request). */
  get connected(): boolean {
    return !this.session.connection.closed;
  }

  /** How many times the client connected again after losing the relay. */
  get reconnects(): number {
    return this.reconnectCount;
  }

  /**
   * The session to send on: the current one while it is up; otherwise, unless the client was
   * closed or reconnection is off, a new one (concurrent callers share one attempt). A relay
   * that is not back yet rejects with ERR_CLOSED at once: connecting to a unix socket nobody
   * listens on fails immediately, so nothing here waits or retries on a timer.
   */
  private async live(): Promise<Session> {
    const current = this.session;
    if (!current.connection.closed || this.closedByUser || !this.reconnect) return current;
    this.reopening ??= openSession(this.sessionOptions)
      .then((session) => {
        if (this.closedByUser) {
          session.connection.close();
          throw new ClosedError('the relay client was closed');
        }
        this.session = session;
        this.reconnectCount++;
        return session;
      })
      .finally(() => {
        this.reopening = null;
      });
    return this.reopening;
  }

  /** Sends a raw request (operations not wrapped below, tests, tools). */
  async request<T>(op: string, args: Record<string, unknown> = {}, options?: RequestOptions): Promise<T> {
    return (await this.live()).connection.request<T>(op, args, options);
  }

  async beginPublish(options: BeginOptions): Promise<Publication> {
    const { populate = true, ...args } = options;
    const { connection } = await this.live();
    const description = await connection.request<SegmentDescription>('begin', { ...args });
    return this.openPublication(connection, description, true, populate);
  }

  /** Joins a publication another writer began (e.g. rank 0 of a trainer), by segment name. */
  async attach(segment: string, options: { populate?: boolean } = {}): Promise<Publication> {
    const { connection } = await this.live();
    const description = await connection.request<SegmentDescription>('attach', { segment });
    return this.openPublication(connection, description, false, options.populate ?? true);
  }

  /** The publication lives on the connection that began it: the relay drops it with that connection. */
  private async openPublication(connection: FrameConnection, description: SegmentDescription, owner: boolean, populate: boolean): Promise<Publication> {
    let mapping: Mapping;
    try {
      mapping = mapSegment(description.path, { writable: true });
      if (populate) await mapping.populate(0, mapping.size, true);
    } catch (err) {
      if (owner) await connection.request('abort', { model: description.model, version: description.version }).catch(() => undefined);
      throw err;
    }
    return new Publication(connection, description, mapping, owner);
  }

  /**
   * One-call publish: lays out, writes and commits the given tensors. Returns once the bytes are
   * in the relay's segment and the commit is sent (the caller may change its tensors then); the
   * result's `visible` settles when the relay has verified and serves the version (see
   * PublishResult).
   */
  async publish(options: {
    model: string;
    version: number;
    tensors: { name: string; dtype: Dtype; shape: number[]; data: TensorData }[];
    metadata?: Record<string, string>;
    lora?: LoraRequest;
  }): Promise<PublishResult> {
    const pub = await this.beginPublish({
      model: options.model,
      version: options.version,
      tensors: options.tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
      ...(options.metadata ? { metadata: options.metadata } : {}),
      ...(options.lora ? { lora: options.lora } : {}),
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
    return this.request<SegmentDescription>('adopt', { path, ...args }, { ...(onProgress ? { onProgress } : {}), ...(signal ? { signal } : {}) });
  }

  async acquire(options: AcquireOptions): Promise<Lease> {
    const { signal, ...args } = options;
    const { connection } = await this.live();
    const result = await connection.request<AcquireResult>('acquire', { ...args }, signal ? { signal } : {});
    let mapping: Mapping;
    try {
      mapping = mapSegment(result.path, { writable: false });
    } catch (err) {
      await connection.request('release', { lease: result.lease }).catch(() => undefined);
      throw err;
    }
    return new Lease(connection, result, mapping);
  }

  /**
   * Versions as they complete on the relay. With `replay`, the latest complete version of each
   * model is delivered first. Ends when the signal aborts, the loop breaks or the client is
   * closed. If the relay goes away, the watch subscribes again once it is back (retrying every
   * 0.1-2 s) and is first given the latest complete version of each model, when it is newer
   * than the last one delivered: versions completed meanwhile besides the latest are not
   * replayed. With `reconnect: false`, the watch ends with the connection.
   */
  async *watch(options: { model?: string; replay?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<VersionEvent> {
    const stop = options.signal ? AbortSignal.any([options.signal, this.closing.signal]) : this.closing.signal;
    const delivered = new Map<string, number>();
    let replay = options.replay ?? false;
    let backoffMs = RESUBSCRIBE_FIRST_MS;
    while (!stop.aborted) {
      let session: Session;
      let watch: number;
      try {
        session = await this.live();
        ({ watch } = await session.connection.request<{ watch: number }>('watch', {
          ...(options.model !== undefined ? { model: options.model } : {}),
          replay,
        }));
      } catch (err) {
        // A lost or refused connection is waited out; the relay's own answer (bad arguments) is not.
        if (!(err instanceof ClosedError)) throw err;
        if (this.closedByUser || !this.reconnect) return;
        await delay(backoffMs, stop).catch(() => undefined);
        backoffMs = Math.min(RESUBSCRIBE_MAX_MS, backoffMs * 2);
        continue;
      }
      backoffMs = RESUBSCRIBE_FIRST_MS;
      for await (const event of this.subscription(session, watch, stop)) {
        // After a resubscription the replay repeats the version delivered last: skip it.
        if ((delivered.get(event.model) ?? -1) >= event.version) continue;
        delivered.set(event.model, event.version);
        yield event;
      }
      if (!this.reconnect) return;
      replay = true;
    }
  }

  /** The events of one watch on one connection, until the connection ends or `stop` aborts. */
  private async *subscription(session: Session, watch: number, stop: AbortSignal): AsyncGenerator<VersionEvent> {
    const queue: VersionEvent[] = [];
    let wake: (() => void) | null = null;
    let overflow = false;
    session.watchers.set(watch, (event) => {
      if (queue.length >= WATCH_QUEUE_LIMIT) overflow = true;
      else queue.push(event);
      wake?.();
    });
    queue.push(...(session.early.get(watch) ?? []));
    session.early.delete(watch);
    const onStop = (): void => wake?.();
    stop.addEventListener('abort', onStop);
    const unsubscribe = session.connection.onClosed(() => wake?.());
    try {
      for (;;) {
        while (queue.length > 0) yield queue.shift()!;
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by the watcher callback above while this generator waits
        if (overflow) throw new LaminarError(ErrorCodes.WATCH_OVERFLOW, `more than ${WATCH_QUEUE_LIMIT} version events were not consumed`);
        if (stop.aborted || session.connection.closed) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = null;
      }
    } finally {
      unsubscribe();
      stop.removeEventListener('abort', onStop);
      session.watchers.delete(watch);
      if (!session.connection.closed) await session.connection.request('unwatch', { watch }).catch(() => undefined);
    }
  }

  status(): Promise<RelayStatus> {
    return this.request<RelayStatus>('status', {});
  }

  /**
   * Hands the relay a chain plan (see broadcast/plan.ts). Applied only when its epoch is newer
   * than the one in force; `applied` says whether it was.
   */
  setPlan(plan: ChainPlan): Promise<{ applied: boolean; status: BroadcastStatus }> {
    return this.request('plan', { plan });
  }

  /** True once close() was called, or once the connection is lost when reconnection is off. */
  get closed(): boolean {
    return this.closedByUser || (!this.reconnect && this.session.connection.closed);
  }

  close(): void {
    this.closedByUser = true;
    this.closing.abort();
    this.session.connection.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return Promise.resolve();
  }
}

export { Lease, Publication, ErrorCodes, RemotePublisher };
export type { PublishResult };
export { RelayError } from './connection.js';
