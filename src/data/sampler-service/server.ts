/**
 * The sampler service's unix socket: one Connection per client (a trainer process), speaking the
 * relay's frames with the sampler's operations (protocol.ts). A batch handed to a connection
 * belongs to it until it releases the batch or goes away: a trainer that dies cannot keep arena
 * memory, its batches go back to the sampler's arena pool when its socket closes.
 *
 * A malformed frame closes only the offending connection (after an error frame saying why); a
 * request that is well framed but invalid gets an error response and the connection stays.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { chmod, mkdir, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Logger } from '../../common/logger.js';
import { ClosedError, ConflictError, ErrorCodes, LaminarError, NotFoundError, ProtocolError, toLaminarError } from '../../common/errors.js';
import { FrameDecoder, decodePayload, encodeFrame } from '../../relay/protocol/frame.js';
import { envelopeSchema, type ErrorBody } from '../../relay/protocol/messages.js';
import type { Batch } from '../experience/batch.js';
import type { ExperienceSampler } from '../experience/sampler.js';
import { payloadLayout, writeColumns, type ColumnInfo } from './batch-layout.js';
import type { SamplerServiceMetrics } from './metrics.js';
import {
  SAMPLER_PROTOCOL_VERSION,
  isSamplerOp,
  samplerRequestSchemas,
  type BatchDescriptor,
  type HelloResult,
  type SamplerOp,
  type SamplerRequest,
} from './protocol.js';
import type { ShmBlock } from './shm-arenas.js';

export interface SamplerServerOptions {
  socketPath: string;
  socketMode: number;
  maxFrameBytes: number;
  /** Changes with every start of the service (clients tell a restarted service from the one they knew). */
  instance: string;
  sampler: ExperienceSampler;
  buffer: string;
  batchSize: number;
  strategy: string;
  /** Where the per-item columns go in an arena file (batch-layout.ts). */
  columns: readonly ColumnInfo[];
  headerBytes: number;
  /** The arena files held (for stats). */
  arenas: () => { files: number; bytes: number };
  metrics: SamplerServiceMetrics;
  logger: Logger;
}

/** A connection whose unsent output passes this is not reading: it is closed. */
const MAX_PENDING_OUTPUT = 64 * 1024 * 1024;

export class SamplerServer {
  private server: Server | null = null;
  private readonly connections = new Map<number, Connection>();
  private nextConnectionId = 1;
  private nextBatchId = 1;

  constructor(readonly options: SamplerServerOptions) {}

  get connectionCount(): number {
    return this.connections.size;
  }

  get batchesHeld(): number {
    let n = 0;
    for (const c of this.connections.values()) n += c.batchCount;
    return n;
  }

  allocateBatchId(): number {
    return this.nextBatchId++;
  }

  /** Fails with ERR_SOCKET_IN_USE when a live process answers on the socket. */
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

  /** Stops accepting, closes every connection (their batches are released) and removes the socket file. */
  async close(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const c of this.connections.values()) c.socket.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    await unlink(this.options.socketPath).catch(() => undefined);
  }

  private accept(socket: Socket): void {
    const id = this.nextConnectionId++;
    const connection = new Connection(id, socket, this);
    this.connections.set(id, connection);
    this.options.metrics.connections.set(this.connections.size);
    socket.on('close', () => {
      this.connections.delete(id);
      connection.cleanup();
      this.options.metrics.connections.set(this.connections.size);
      this.options.metrics.batchesHeld.set(this.batchesHeld);
    });
  }
}

/**
 * A socket file left by a dead process is removed; one that still answers belongs to a live one
 * (ERR_SOCKET_IN_USE).
 */
export async function removeStaleSocket(path: string): Promise<void> {
  const live = await new Promise<boolean>((resolve) => {
    const probe = createConnection(path);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (live) throw new ConflictError(ErrorCodes.SOCKET_IN_USE, `another process is listening on ${path}`);
  await unlink(path).catch(() => undefined);
}

class Connection {
  private readonly decoder: FrameDecoder;
  private greeted = false;
  private closing = false;
  private readonly batches = new Map<number, Batch>();
  private readonly aborter = new AbortController();
  private readonly log: Logger;
  private readonly options: SamplerServerOptions;

  constructor(
    readonly id: number,
    readonly socket: Socket,
    private readonly server: SamplerServer,
  ) {
    this.options = server.options;
    this.decoder = new FrameDecoder(this.options.maxFrameBytes);
    this.log = this.options.logger.child({ connection: id });
    socket.on('data', (chunk) => this.onData(chunk));
    socket.on('error', (err) => this.log.debug({ err }, 'client socket error'));
  }

  get batchCount(): number {
    return this.batches.size;
  }

  /** The client went away: a sample() it waits for ends, and every batch it holds is released. */
  cleanup(): void {
    this.closing = true;
    this.aborter.abort();
    const held = this.batches.size;
    for (const b of this.batches.values()) b.release();
    this.batches.clear();
    if (held > 0) this.log.info({ batches: held }, 'client gone: its batches are released');
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
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- handle() runs up to its first await and may close the connection; TS keeps the narrowing from the check above
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
    const label = isSamplerOp(op) ? op : 'unknown';
    try {
      if (!isSamplerOp(op)) throw new ProtocolError(ErrorCodes.UNKNOWN_OP, `unknown operation ${JSON.stringify(op)}`);
      const parsed = samplerRequestSchemas[op].safeParse(message);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw new ProtocolError(ErrorCodes.BAD_REQUEST, `bad ${op} request: ${issue ? `${issue.path.join('.')}: ${issue.message}` : 'invalid'}`);
      }
      const result = await this.dispatch(op, parsed.data);
      this.options.metrics.requests.inc({ op: label, result: 'ok' });
      // A batch whose descriptor could not be sent was never the client's: it goes back at once.
      if (!this.send({ id, ok: true, result: result ?? null }) && op === 'sample') this.drop((result as BatchDescriptor).batch);
    } catch (err) {
      const e = toLaminarError(err);
      this.options.metrics.requests.inc({ op: label, result: e.code });
      if (e.code === ErrorCodes.INTERNAL) this.log.error({ err }, `${op} failed`);
      else this.log.debug({ code: e.code, op }, e.message);
      this.send({ id, ok: false, error: errorBody(e) });
      if (e.code === ErrorCodes.PROTOCOL_VERSION) this.close();
    }
  }

  private async dispatch(op: SamplerOp, req: unknown): Promise<unknown> {
    const { sampler } = this.options;
    switch (op) {
      case 'hello': {
        const r = req as SamplerRequest<'hello'>;
        if (r.protocol !== SAMPLER_PROTOCOL_VERSION) {
          throw new ProtocolError(
            ErrorCodes.PROTOCOL_VERSION,
            `the sampler service speaks protocol ${SAMPLER_PROTOCOL_VERSION}, client asked for ${r.protocol}`,
          );
        }
        this.greeted = true;
        if (r.client) this.log.debug({ client: r.client }, 'client connected');
        const hello: HelloResult = {
          protocol: SAMPLER_PROTOCOL_VERSION,
          instance: this.options.instance,
          buffer: this.options.buffer,
          batchSize: this.options.batchSize,
          trainerVersion: sampler.stats().trainerVersion,
          maxFrameBytes: this.options.maxFrameBytes,
        };
        return hello;
      }
      case 'sample': {
        const r = req as SamplerRequest<'sample'>;
        const batch = await sampler.sample({ ...(r.timeoutMs !== undefined ? { timeoutMs: r.timeoutMs } : {}), signal: this.aborter.signal });
        // cleanup() may have run while sample() waited: the batch goes back at once.
        if (this.closing) {
          batch.release();
          throw new ClosedError('connection closed');
        }
        const id = this.server.allocateBatchId();
        let descriptor: BatchDescriptor;
        try {
          descriptor = this.describe(batch, id);
        } catch (err) {
          batch.release();
          throw err;
        }
        this.batches.set(id, batch);
        this.options.metrics.batchesHeld.inc();
        return descriptor;
      }
      case 'release': {
        const r = req as SamplerRequest<'release'>;
        if (!this.drop(r.batch))
          throw new NotFoundError(ErrorCodes.UNKNOWN_BATCH, `this connection holds no batch ${r.batch}`, { details: { batch: r.batch } });
        return null;
      }
      case 'setTrainerVersion': {
        const r = req as SamplerRequest<'setTrainerVersion'>;
        sampler.setTrainerVersion(r.version);
        return { trainerVersion: r.version };
      }
      case 'updatePriority': {
        const r = req as SamplerRequest<'updatePriority'>;
        return { updated: sampler.updatePriority(r.trajectory, r.priority) };
      }
      case 'stats': {
        const arenas = this.options.arenas();
        return {
          ...sampler.stats(),
          instance: this.options.instance,
          buffer: this.options.buffer,
          batchSize: this.options.batchSize,
          strategy: this.options.strategy,
          connections: this.server.connectionCount,
          batchesHeld: this.server.batchesHeld,
          arenaFiles: arenas.files,
          arenaBytes: arenas.bytes,
        };
      }
    }
  }

  /** Releases a batch this connection holds; false when it holds none of that id. */
  private drop(id: number): boolean {
    const batch = this.batches.get(id);
    if (!batch) return false;
    this.batches.delete(id);
    batch.release();
    this.options.metrics.batchesHeld.dec();
    return true;
  }

  /** Writes the batch's columns into its arena file and says where everything is. */
  private describe(batch: Batch, id: number): BatchDescriptor {
    const block = batch.memory as Partial<ShmBlock>;
    if (block.path === undefined || block.header === undefined || block.fileBytes === undefined) {
      throw new LaminarError(ErrorCodes.INTERNAL, 'the batch is not in a shared-memory arena');
    }
    const { tokenCount } = payloadLayout(batch);
    writeColumns(block.header, this.options.columns, batch);
    const items = batch.items;
    const base = this.options.headerBytes;
    return {
      batch: id,
      instance: this.options.instance,
      path: block.path,
      fileBytes: block.fileBytes,
      count: items.length,
      tokens: { offset: base, count: tokenCount },
      logprobs: { offset: base + tokenCount * 4, count: tokenCount },
      columns: [...this.options.columns],
      ids: items.map((it) => it.id),
      promptIds: items.map((it) => it.promptId),
      groupIds: items.map((it) => it.groupId),
      rolloutIds: items.map((it) => it.rolloutId ?? null),
      infos: items.map((it) => it.info ?? null),
      trainerVersion: batch.trainerVersion,
      staleness: batch.staleness,
      groups: batch.groups,
      bytes: batch.bytes,
      prefetched: batch.prefetched,
    };
  }

  /** Sends a message; false when it could not go (the socket is gone, or it is too large for a frame). */
  private send(message: unknown): boolean {
    if (this.socket.destroyed) return false;
    let sent = true;
    try {
      this.socket.write(encodeFrame(message, this.options.maxFrameBytes));
    } catch (err) {
      // A response too large for a frame (a huge batch's metadata) becomes an error response.
      const e = toLaminarError(err);
      const id = (message as { id?: number }).id ?? null;
      this.socket.write(encodeFrame({ id, ok: false, error: errorBody(e) }));
      sent = false;
    }
    if (this.socket.writableLength > MAX_PENDING_OUTPUT) {
      this.log.warn({ pending: this.socket.writableLength }, 'client is not reading its responses: closing');
      this.socket.destroy();
    }
    return sent;
  }

  /** Ends a connection whose byte stream cannot be trusted any more. */
  private fatal(err: LaminarError): void {
    this.options.metrics.requests.inc({ op: 'frame', result: err.code });
    this.log.warn({ code: err.code }, `closing connection: ${err.message}`);
    this.send({ id: null, ok: false, error: errorBody(err) });
    this.close();
  }

  private close(): void {
    this.closing = true;
    this.socket.end();
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }
}

function errorBody(e: LaminarError): ErrorBody {
  return e.details === undefined ? { code: e.code, message: e.message } : { code: e.code, message: e.message, details: e.details };
}
