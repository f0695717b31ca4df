/**
 * The relay's local API: a unix-domain socket speaking the request protocol
 * (src/common/request-protocol/) with the relay's operations (protocol/messages.ts). One
 * Connection per client; leases and unfinished publications belong to the connection and end
 * with it, so a client that dies can never pin a version or leave a half-written one visible.
 *
 * Framing, the hello handshake and error responses live in the request protocol's
 * RequestConnection: a malformed frame closes only the offending connection (after an error
 * frame saying why); a request that is well framed but invalid gets an error response and the
 * connection stays.
 */
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { ErrorCodes, LaminarError, NotFoundError, ConflictError } from '../common/errors.js';
import { UnixSocketServer } from '../common/unix-socket-server.js';
import type { RelayMetrics } from './metrics.js';
import { RequestConnection } from '../common/request-protocol/request-connection.js';
import { PROTOCOL_VERSION, requestSchemas, type Op, type Request, type SegmentDescription } from './protocol/messages.js';
import { validateSegmentName } from './segments.js';
import type { AcquireRequest, StoredVersion, VersionStore } from './store.js';
import { validatePlan, type ChainPlan } from './broadcast/plan.js';
import type { Fp8BroadcastStatus } from './protocol/status.js';

export interface ServerOptions {
  socketPath: string;
  /** Mode of the socket file: owner and group of the job only, by default. */
  socketMode: number;
  maxFrameBytes: number;
  relayId: string;
  logger: Logger;
  metrics: RelayMetrics;
  /** The broadcast between relays, when this relay takes part in one. */
  broadcast?: BroadcastControl;
  /** Answers acquires of `<model>@fp8` (src/relay/fp8/variants.ts). */
  variants?: VariantSource;
  /** Where FP8 versions are made, for `status` (src/relay/fp8/broadcast.ts). */
  fp8Broadcast?: { status(): Fp8BroadcastStatus };
}

/** Finds (making it if need be) the variant an acquire names. */
export interface VariantSource {
  names(model: unknown): boolean;
  find(request: AcquireRequest, signal?: AbortSignal): Promise<StoredVersion>;
}

/** What the local API may ask of the broadcast (see broadcast/broadcaster.ts). */
export interface BroadcastControl {
  status(): unknown;
  setPlan(plan: ChainPlan): boolean;
}

const PROGRESS_INTERVAL_MS = 100;

export function describeVersion(v: StoredVersion): SegmentDescription {
  return {
    model: v.model,
    version: v.version,
    segment: v.segment,
    path: v.path,
    dir: v.dir,
    size: v.layout.totalSize,
    dataOffset: v.layout.dataOffset,
    chunkSize: v.layout.chunkSize,
    tensors: v.layout.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, offset: t.offset, byteLength: t.byteLength })),
    metadata: v.metadata,
    checksums: v.checksums,
  };
}

export class RelayServer {
  private readonly sockets: UnixSocketServer<Connection>;
  private nextLeaseId = 1;
  private nextWatchId = 1;

  constructor(
    readonly store: VersionStore,
    readonly options: ServerOptions,
  ) {
    this.sockets = new UnixSocketServer({
      path: options.socketPath,
      mode: options.socketMode,
      owner: 'relay',
      logger: options.logger,
      create: (id, socket) => new Connection(id, socket, this),
      closed: (c) => {
        c.cleanup().catch((err: unknown) => options.logger.error({ err, connection: c.id }, 'connection cleanup failed'));
      },
    });
    store.on('complete', (v) => {
      for (const c of this.sockets.connections.values()) c.notifyComplete(v);
    });
  }

  get connectionCount(): number {
    return this.sockets.connections.size;
  }

  get leaseCount(): number {
    let n = 0;
    for (const c of this.sockets.connections.values()) n += c.leaseCount;
    return n;
  }

  allocateLeaseId(): number {
    return this.nextLeaseId++;
  }

  allocateWatchId(): number {
    return this.nextWatchId++;
  }

  /** Fails with ERR_SOCKET_IN_USE when a live relay answers on the socket. */
  listen(): Promise<void> {
    return this.sockets.listen();
  }

  /** Stops accepting, closes every connection (their leases and publications end) and removes the socket file. */
  close(): Promise<void> {
    return this.sockets.close();
  }
}

class Connection extends RequestConnection<Op> {
  private readonly leases = new Map<number, StoredVersion>();
  private readonly watches = new Map<number, string | undefined>();
  private readonly aborter = new AbortController();

  constructor(
    id: number,
    socket: Socket,
    private readonly relay: RelayServer,
  ) {
    const { maxFrameBytes, logger } = relay.options;
    super(id, socket, { schemas: requestSchemas, protocol: PROTOCOL_VERSION, speaker: 'relay', maxFrameBytes, logger });
  }

  get leaseCount(): number {
    return this.leases.size;
  }

  protected welcome(): unknown {
    const store = this.relay.store;
    return {
      protocol: PROTOCOL_VERSION,
      relay: this.relay.options.relayId,
      shmDir: store.options.shmDir,
      // The fixed chunk size, or under auto the largest it picks: begin's answer has the version's own.
      chunkSize: store.chunkSizer.nominalChunkSize,
      chunking: store.chunkSizer.mode,
      maxFrameBytes: this.relay.options.maxFrameBytes,
    };
  }

  protected countError(_op: Op | undefined, code: string): void {
    this.relay.options.metrics.errors.inc({ code });
  }

  protected countFatal(code: string): void {
    this.relay.options.metrics.badFrames.inc({ code });
    this.relay.options.metrics.errors.inc({ code });
  }

  protected async dispatch(op: Exclude<Op, 'hello'>, req: unknown, id: number): Promise<unknown> {
    const store = this.relay.store;
    switch (op) {
      case 'begin': {
        const r = req as Request<'begin'>;
        return describeVersion(await store.begin(r, this.id));
      }
      case 'attach': {
        const r = req as Request<'attach'>;
        const v = store.findBySegment(validateSegmentName(r.segment));
        return describeVersion(store.writable(v.model, v.version));
      }
      case 'written': {
        const r = req as Request<'written'>;
        store.markWritten(store.writable(r.model, r.version), r.tensors);
        return { count: r.tensors.length };
      }
      case 'commit': {
        const r = req as Request<'commit'>;
        return describeVersion(await store.commit(store.writable(r.model, r.version), this.id));
      }
      case 'abort': {
        const r = req as Request<'abort'>;
        await store.abort(store.writable(r.model, r.version), this.id, 'aborted by its publisher');
        return null;
      }
      case 'adopt': {
        const r = req as Request<'adopt'>;
        let last = 0;
        const v = await store.adopt(r, (done, total) => {
          const now = performance.now();
          if (done === total || now - last >= PROGRESS_INTERVAL_MS) {
            last = now;
            this.send({ event: 'progress', id, done, total });
          }
        });
        return describeVersion(v);
      }
      case 'acquire': {
        const r = req as Request<'acquire'>;
        let v: StoredVersion;
        try {
          const variants = this.relay.options.variants;
          v = variants?.names(r.model) ? await variants.find(r, this.aborter.signal) : await store.find(r, this.aborter.signal);
        } catch (err) {
          this.relay.options.metrics.acquires.inc({ result: (err as { code?: string }).code ?? 'error' });
          throw err;
        }
        if (this.closing) throw new LaminarError(ErrorCodes.CLOSED, 'connection closed');
        store.lease(v);
        const lease = this.relay.allocateLeaseId();
        this.leases.set(lease, v);
        this.relay.options.metrics.acquires.inc({ result: 'ok' });
        return { lease, ...describeVersion(v) };
      }
      case 'release': {
        const r = req as Request<'release'>;
        const v = this.leases.get(r.lease);
        if (!v) throw new NotFoundError(ErrorCodes.UNKNOWN_LEASE, `this connection holds no lease ${r.lease}`);
        this.leases.delete(r.lease);
        store.unlease(v);
        return null;
      }
      case 'watch': {
        const r = req as Request<'watch'>;
        const watch = this.relay.allocateWatchId();
        this.watches.set(watch, r.model);
        if (r.replay) {
          // After the response, so that the client knows the watch id first.
          setImmediate(() => {
            for (const v of store.list()) if (v.state === 'complete' && store.latest(v.model) === v) this.notifyComplete(v, watch);
          });
        }
        return { watch };
      }
      case 'unwatch': {
        const r = req as Request<'unwatch'>;
        this.watches.delete(r.watch);
        return null;
      }
      case 'status':
        return {
          relay: this.relay.options.relayId,
          shmDir: store.options.shmDir,
          pages: store.options.pages,
          usedBytes: store.usedBytes(),
          spares: store.spareInfo(),
          memoryBudget: Number.isFinite(store.options.memoryBudget) ? store.options.memoryBudget : null,
          pinning: store.pinningEnabled,
          pinnedBytes: store.pinnedBytes(),
          chunking: store.chunkSizer.status(),
          leases: this.relay.leaseCount,
          connections: this.relay.connectionCount,
          versions: store.list({ variants: true }).map((v) => v.info()),
          verifying: store.verifyingVersions(),
          broadcast: this.relay.options.broadcast?.status() ?? null,
          ...(this.relay.options.fp8Broadcast ? { fp8Broadcast: this.relay.options.fp8Broadcast.status() } : {}),
        };
      case 'plan': {
        const broadcast = this.relay.options.broadcast;
        if (!broadcast) throw new ConflictError(ErrorCodes.NO_BROADCAST, 'this relay takes no part in a broadcast (start it with --listen or --peers)');
        const plan = validatePlan((req as Request<'plan'>).plan);
        return { applied: broadcast.setPlan(plan), status: broadcast.status() };
      }
    }
  }

  notifyComplete(v: StoredVersion, only?: number): void {
    for (const [watch, model] of this.watches) {
      if (only !== undefined && watch !== only) continue;
      if (model !== undefined && model !== v.model) continue;
      this.send({ event: 'version', watch, model: v.model, version: v.version, size: v.layout.totalSize, segment: v.segment });
    }
  }

  async cleanup(): Promise<void> {
    this.closing = true;
    this.aborter.abort();
    for (const v of this.leases.values()) this.relay.store.unlease(v);
    this.leases.clear();
    this.watches.clear();
    await this.relay.store.ownerGone(this.id);
  }
}
