/**
 * The relay's local API: a unix-domain socket speaking the frame protocol (protocol/). One
 * Connection per client; leases and unfinished publications belong to the connection and end
 * with it, so a client that dies can never pin a version or leave a half-written one visible.
 *
 * A malformed frame closes only the offending connection (after an error frame saying why);
 * a request that is well framed but invalid gets an error response and the connection stays.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { chmod, mkdir, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCodes, LaminarError, NotFoundError, ProtocolError, ConflictError, toLaminarError } from '../common/errors.js';
import type { RelayMetrics } from './metrics.js';
import { FrameDecoder, decodePayload, encodeFrame } from './protocol/frame.js';
import { PROTOCOL_VERSION, envelopeSchema, isOp, requestSchemas, type ErrorBody, type Op, type Request, type SegmentDescription } from './protocol/messages.js';
import { validateSegmentName } from './segments.js';
import type { StoredVersion, VersionStore } from './store.js';
import { validatePlan, type ChainPlan } from './broadcast/plan.js';

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
}

/** What the local API may ask of the broadcast (see broadcast/broadcaster.ts). */
export interface BroadcastControl {
  status(): unknown;
  setPlan(plan: ChainPlan): boolean;
}

/** A connection whose unsent output passes this is not reading: it is closed. */
const MAX_PENDING_OUTPUT = 64 * 1024 * 1024;
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
  private server: Server | null = null;
  private readonly connections = new Map<number, Connection>();
  private nextConnectionId = 1;
  private nextLeaseId = 1;
  private nextWatchId = 1;

  constructor(
    readonly store: VersionStore,
    readonly options: ServerOptions,
  ) {
    store.on('complete', (v) => {
      for (const c of this.connections.values()) c.notifyComplete(v);
    });
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  get leaseCount(): number {
    let n = 0;
    for (const c of this.connections.values()) n += c.leaseCount;
    return n;
  }

  allocateLeaseId(): number {
    return this.nextLeaseId++;
  }

  allocateWatchId(): number {
    return this.nextWatchId++;
  }

  async listen(): Promise<void> {
    const path = this.options.socketPath;
    await mkdir(dirname(path), { recursive: true, mode: 0o750 });
    await removeStaleSocket(path);
    const server = createServer((socket) => this.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => this.options.logger.error({ err }, 'socket server error'));
    await chmod(path, this.options.socketMode);
    this.server = server;
  }

  private accept(socket: Socket): void {
    const id = this.nextConnectionId++;
    const connection = new Connection(id, socket, this);
    this.connections.set(id, connection);
    socket.on('close', () => {
      this.connections.delete(id);
      connection.cleanup().catch((err: unknown) => this.options.logger.error({ err, connection: id }, 'connection cleanup failed'));
    });
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const c of this.connections.values()) c.socket.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    await unlink(this.options.socketPath).catch(() => undefined);
  }
}

/** A socket file left by a dead relay is removed; one that still answers is a live relay. */
async function removeStaleSocket(path: string): Promise<void> {
  const live = await new Promise<boolean>((resolve) => {
    const probe = createConnection(path);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (live) throw new ConflictError(ErrorCodes.SOCKET_IN_USE, `another relay is listening on ${path}`);
  await unlink(path).catch(() => undefined);
}

class Connection {
  private readonly decoder: FrameDecoder;
  private greeted = false;
  private closing = false;
  private readonly leases = new Map<number, StoredVersion>();
  private readonly watches = new Map<number, string | undefined>();
  private readonly aborter = new AbortController();
  private readonly log: Logger;

  constructor(
    readonly id: number,
    readonly socket: Socket,
    private readonly relay: RelayServer,
  ) {
    this.decoder = new FrameDecoder(relay.options.maxFrameBytes);
    this.log = relay.options.logger.child({ connection: id });
    socket.on('data', (chunk) => this.onData(chunk));
    socket.on('error', (err) => this.log.debug({ err }, 'client socket error'));
  }

  get leaseCount(): number {
    return this.leases.size;
  }

  private onData(chunk: Buffer): void {
    if (this.closing) return;
    let payloads: Buffer[];
    try {
      payloads = this.decoder.push(chunk);
    } catch (err) {
      this.fatal(toLaminarError(err));
      return;
    }
    for (const payload of payloads) {
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- handle() below runs up to its first await and may close the connection; TS keeps the narrowing from the check above across those calls
      if (this.closing) return;
      let message: unknown;
      try {
        message = decodePayload(payload);
      } catch (err) {
        this.fatal(toLaminarError(err));
        return;
      }
      const envelope = envelopeSchema.safeParse(message);
      if (!envelope.success) {
        this.fatal(new ProtocolError(ErrorCodes.BAD_FRAME, 'a request must be a map with an integer id and a string op'));
        return;
      }
      const { id, op } = envelope.data;
      if (!this.greeted && op !== 'hello') {
        this.fatal(new ProtocolError(ErrorCodes.HANDSHAKE_REQUIRED, `the first request must be hello, got ${JSON.stringify(op)}`));
        return;
      }
      void this.handle(id, op, message as Record<string, unknown>);
    }
  }

  private async handle(id: number, op: string, message: Record<string, unknown>): Promise<void> {
    try {
      if (!isOp(op)) throw new ProtocolError(ErrorCodes.UNKNOWN_OP, `unknown operation ${JSON.stringify(op)}`);
      const parsed = requestSchemas[op].safeParse(message);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw new ProtocolError(ErrorCodes.BAD_REQUEST, `bad ${op} request: ${issue ? `${issue.path.join('.')}: ${issue.message}` : 'invalid'}`);
      }
      const result = await this.dispatch(op, parsed.data, id);
      this.send({ id, ok: true, result: result ?? null });
    } catch (err) {
      const e = toLaminarError(err);
      this.relay.options.metrics.errors.inc({ code: e.code });
      if (e.code === ErrorCodes.INTERNAL) this.log.error({ err }, `${op} failed`);
      else this.log.debug({ code: e.code, op }, e.message);
      this.send({ id, ok: false, error: errorBody(e) });
      if (e.code === ErrorCodes.PROTOCOL_VERSION) this.close();
    }
  }

  private async dispatch(op: Op, req: unknown, id: number): Promise<unknown> {
    const store = this.relay.store;
    switch (op) {
      case 'hello': {
        const r = req as Request<'hello'>;
        if (r.protocol !== PROTOCOL_VERSION) {
          throw new ProtocolError(ErrorCodes.PROTOCOL_VERSION, `relay speaks protocol ${PROTOCOL_VERSION}, client asked for ${r.protocol}`);
        }
        this.greeted = true;
        if (r.client) this.log.debug({ client: r.client }, 'client connected');
        return {
          protocol: PROTOCOL_VERSION,
          relay: this.relay.options.relayId,
          shmDir: store.options.shmDir,
          chunkSize: store.options.chunkSize,
          maxFrameBytes: this.relay.options.maxFrameBytes,
        };
      }
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
          v = await store.find(r, this.aborter.signal);
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
          usedBytes: store.usedBytes(),
          spares: store.spareInfo(),
          memoryBudget: Number.isFinite(store.options.memoryBudget) ? store.options.memoryBudget : null,
          pinning: store.pinningEnabled,
          pinnedBytes: store.pinnedBytes(),
          leases: this.relay.leaseCount,
          connections: this.relay.connectionCount,
          versions: store.list().map((v) => v.info()),
          verifying: store.verifyingVersions(),
          broadcast: this.relay.options.broadcast?.status() ?? null,
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

  private send(message: unknown): void {
    if (this.socket.destroyed) return;
    try {
      this.socket.write(encodeFrame(message, this.relay.options.maxFrameBytes));
    } catch (err) {
      // A response too large for a frame (a huge tensor list) becomes an error response.
      const e = toLaminarError(err);
      const id = (message as { id?: number }).id ?? null;
      this.socket.write(encodeFrame({ id, ok: false, error: errorBody(e) }));
    }
    if (this.socket.writableLength > MAX_PENDING_OUTPUT) {
      this.log.warn({ pending: this.socket.writableLength }, 'client is not reading its responses: closing');
      this.socket.destroy();
    }
  }

  /** Ends a connection whose byte stream cannot be trusted any more. */
  private fatal(err: LaminarError): void {
    this.relay.options.metrics.badFrames.inc({ code: err.code });
    this.relay.options.metrics.errors.inc({ code: err.code });
    this.log.warn({ code: err.code }, `closing connection: ${err.message}`);
    this.send({ id: null, ok: false, error: errorBody(err) });
    this.close();
  }

  private close(): void {
    this.closing = true;
    this.socket.end();
    setTimeout(() => this.socket.destroy(), 1000).unref();
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

function errorBody(e: LaminarError): ErrorBody {
  return e.details === undefined ? { code: e.code, message: e.message } : { code: e.code, message: e.message, details: e.details };
}
