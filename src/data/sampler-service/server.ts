/**
 * The sampler service's unix socket: one Connection per client (a trainer process), speaking the
 * relay's frames with the sampler's operations (protocol.ts). A batch handed to a connection
 * belongs to it until it releases the batch or goes away: a trainer that dies cannot keep arena
 * memory, its batches go back to the sampler's arena pool when its socket closes.
 *
 * Framing, the hello handshake and error responses are shared with the relay
 * (src/common/request-protocol/request-connection.ts): a malformed frame closes only the offending
 * connection (after an error frame saying why); a request that is well framed but invalid gets an
 * error response and the connection stays.
 */
import type { Socket } from 'node:net';
import type { Logger } from '../../common/logger.js';
import { ClosedError, ErrorCodes, LaminarError, NotFoundError } from '../../common/errors.js';
import { UnixSocketServer } from '../../common/unix-socket-server.js';
import { RequestConnection } from '../../common/request-protocol/request-connection.js';
import type { Batch } from '../experience/batch.js';
import type { ExperienceSampler } from '../experience/sampler.js';
import { payloadLayout, writeColumns, writeLossMask, type ColumnInfo } from './batch-layout.js';
import { segmentsToWire } from '../codec/segments.js';
import type { SamplerServiceMetrics } from './metrics.js';
import { SAMPLER_PROTOCOL_VERSION, samplerRequestSchemas, type BatchDescriptor, type HelloResult, type SamplerOp, type SamplerRequest } from './protocol.js';
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

export class SamplerServer {
  private readonly sockets: UnixSocketServer<Connection>;
  private nextBatchId = 1;

  constructor(readonly options: SamplerServerOptions) {
    const { metrics } = options;
    this.sockets = new UnixSocketServer({
      path: options.socketPath,
      mode: options.socketMode,
      owner: 'process',
      logger: options.logger,
      create: (id, socket) => new Connection(id, socket, this),
      opened: () => metrics.connections.set(this.connectionCount),
      closed: (c) => {
        c.cleanup();
        metrics.connections.set(this.connectionCount);
        metrics.batchesHeld.set(this.batchesHeld);
      },
    });
  }

  get connectionCount(): number {
    return this.sockets.connections.size;
  }

  get batchesHeld(): number {
    let n = 0;
    for (const c of this.sockets.connections.values()) n += c.batchCount;
    return n;
  }

  allocateBatchId(): number {
    return this.nextBatchId++;
  }

  /** Fails with ERR_SOCKET_IN_USE when a live process answers on the socket. */
  listen(): Promise<void> {
    return this.sockets.listen();
  }

  /** Stops accepting, closes every connection (their batches are released) and removes the socket file. */
  close(): Promise<void> {
    return this.sockets.close();
  }
}

class Connection extends RequestConnection<SamplerOp> {
  private readonly batches = new Map<number, Batch>();
  private readonly aborter = new AbortController();
  private readonly options: SamplerServerOptions;

  constructor(
    id: number,
    socket: Socket,
    private readonly server: SamplerServer,
  ) {
    const { maxFrameBytes, logger } = server.options;
    super(id, socket, { schemas: samplerRequestSchemas, protocol: SAMPLER_PROTOCOL_VERSION, speaker: 'the sampler service', maxFrameBytes, logger });
    this.options = server.options;
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

  protected welcome(): HelloResult {
    return {
      protocol: SAMPLER_PROTOCOL_VERSION,
      instance: this.options.instance,
      buffer: this.options.buffer,
      batchSize: this.options.batchSize,
      trainerVersion: this.options.sampler.stats().trainerVersion,
      maxFrameBytes: this.options.maxFrameBytes,
    };
  }

  protected override countAnswered(op: SamplerOp): void {
    this.options.metrics.requests.inc({ op, result: 'ok' });
  }

  protected countError(op: SamplerOp | undefined, code: string): void {
    this.options.metrics.requests.inc({ op: op ?? 'unknown', result: code });
  }

  protected countFatal(code: string): void {
    this.options.metrics.requests.inc({ op: 'frame', result: code });
  }

  /** A batch whose descriptor could not be sent was never the client's: it goes back at once. */
  protected override unsent(op: SamplerOp, result: unknown): void {
    if (op === 'sample') this.drop((result as BatchDescriptor).batch);
  }

  protected async dispatch(op: Exclude<SamplerOp, 'hello'>, req: unknown): Promise<unknown> {
    const { sampler } = this.options;
    switch (op) {
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
    if (block.path === undefined || block.header === undefined || block.fileBytes === undefined || block.mask === undefined || block.maskOffset === undefined) {
      throw new LaminarError(ErrorCodes.INTERNAL, 'the batch is not in a shared-memory arena');
    }
    const { tokenCount } = payloadLayout(batch);
    writeColumns(block.header, this.options.columns, batch);
    writeLossMask(new Uint8Array(block.mask, 0, tokenCount), batch);
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
      lossMask: { offset: block.maskOffset, count: tokenCount },
      columns: [...this.options.columns],
      ids: items.map((it) => it.id),
      promptIds: items.map((it) => it.promptId),
      groupIds: items.map((it) => it.groupId),
      rolloutIds: items.map((it) => it.rolloutId ?? null),
      infos: items.map((it) => it.info ?? null),
      segments: items.map((it) => (it.segments ? segmentsToWire(it.segments) : null)),
      trainerVersion: batch.trainerVersion,
      staleness: batch.staleness,
      groups: batch.groups,
      bytes: batch.bytes,
      prefetched: batch.prefetched,
    };
  }
}
