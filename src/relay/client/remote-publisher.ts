/**
 * Remote publish: a trainer whose host runs no relay pushes versions to the master relay over
 * UCX. The version is laid out once in local memory exactly as it will sit in the relay's shared
 * memory (a safetensors file with chunk checksums), then streamed chunk by chunk with the relay
 * protocol; publish() returns when the master holds and has verified every byte.
 *
 *   const pub = await RelayClient.remote({ address: '10.0.0.1:13337', secret });
 *   const { stallSeconds } = await pub.publish({ model, version, tensors });
 */
import { hostname } from 'node:os';
import { ConflictError, LaminarError } from '../../common/errors.js';
import { silentLogger } from '../../common/logger.js';
import { Mapping } from '../../native/index.js';
import { chunkRange, encodeHeader, planLayout, tensorByteLength, type ChunkLayout, type VersionLayout } from '../../safetensors/header.js';
import { autoHeaderChunks } from '../chunking/chunk-choice.js';
import type { Dtype } from '../../safetensors/dtypes.js';
import { UcxWorker, devicesToward, parseAddress, type Registration } from '../../ucx/index.js';
import { loadSecret } from '../broadcast/auth.js';
import { connectPeer, type PeerLink } from '../broadcast/link.js';
import { BroadcastMetrics } from '../broadcast/metrics.js';
import { OutgoingTransfer, transferKey, type OutgoingOptions } from '../broadcast/outgoing.js';
import type { ChunkSource } from '../broadcast/source.js';
import { copyCheckpoint, readCheckpoint } from '../checkpoint.js';
import { chunkChecksums } from '../chunk-checksums.js';
import { DEFAULT_BROADCAST_WINDOW, DEFAULT_CHUNK_SIZE } from '../protocol/defaults.js';
import { validateModelId, validateVersion } from '../segments.js';
import { Registry } from 'prom-client';
import { writeChunkAligned } from './chunk-aligned-write.js';
import { StagingBuffer } from './staging.js';
import { sizedBytes } from './tensor-view.js';
import type { TensorData } from './publication.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { packedBytes } from '../parts/part-plan.js';
import { preparePart, type PreparedPart, type TensorPart } from './prepared-part.js';

export interface RemoteOptions {
  /** The master relay's UCX listener, "address:port". */
  address: string;
  /** The job secret (or a file holding it). */
  secret?: string | Buffer;
  secretFile?: string;
  /** This publisher's name in the relay's logs (default: publisher@<host>:<pid>). */
  name?: string;
  /** The relay id expected at `address` (checked during authentication); any relay of the job by default. */
  relayId?: string;
  /** A fixed chunk size; without one, each version gets the chunk size the relay chooses for it. */
  chunkSize?: number;
  window?: number;
  /**
   * A relay that takes nothing (or answers no ping) for this long fails the push, and so does
   * one that took every chunk but does not report the version complete within it.
   */
  stallMs?: number;
  /** The connection and handshake must be done within this (default 10 s). */
  timeoutMs?: number;
}

/** Where a push stood when its destination was lost (`details.stage` of ERR_DESTINATION_LOST). */
export type PushStage = 'connecting' | 'offering' | 'transferring' | 'verification';

/**
 * Failures that mean the relay (or the way to it) is gone, as opposed to a refusal, a decline or
 * a deadline: the transport's own (UCS_*), the link closing under the push, the worker closed.
 */
function isTransportLoss(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('UCS_') || code === ErrorCodes.PEER_CLOSED || code === ErrorCodes.UCX_CLOSED);
}

/** A transport loss as ERR_DESTINATION_LOST naming the relay and the stage; anything else unchanged. */
function destinationLost(err: unknown, relay: string, address: string, stage: PushStage): unknown {
  if (!isTransportLoss(err)) return err;
  return new LaminarError(ErrorCodes.DESTINATION_LOST, `the relay ${relay} at ${address} was lost while ${STAGE_WORDS[stage]}: ${(err as Error).message}`, {
    cause: err,
    details: { relay, address, stage },
  });
}

const STAGE_WORDS: Record<PushStage, string> = {
  connecting: 'connecting to it',
  offering: 'offering it the version',
  transferring: 'transferring the version',
  verification: 'awaiting its verification of the version',
};

export interface RemotePublishResult {
  model: string;
  version: number;
  size: number;
  chunks: number;
  /** Time the caller was blocked: layout + copy + checksums + transfer to the master. */
  stallSeconds: number;
  transferSeconds: number;
}

/** Threads reading the checkpoint and checksumming chunks at once (the libuv pool has 4). */
const CHECKSUM_CONCURRENCY = 4;
/** How long a publisher waits for the relay's chunk size before it uses DEFAULT_CHUNK_SIZE. */
const CHUNK_ADVICE_TIMEOUT_MS = 5000;

class LocalSource implements ChunkSource {
  constructor(
    readonly model: string,
    readonly version: number,
    readonly layout: VersionLayout,
    readonly mapping: Mapping,
  ) {}
  available(): boolean {
    return true;
  }
  whenAvailable(): Promise<void> {
    return Promise.resolve();
  }
}

export class RemotePublisher {
  /** The last version's private memory, reused by the next publish of the same size. */
  private readonly staging = new StagingBuffer();
  /** Pushes under way, by model and version: the relay's answers name theirs. */
  private readonly sessions = new Map<string, OutgoingTransfer>();
  /**
   * The registration of memory that is pushed again and again (a staging buffer's): on RDMA,
   * registering pins every page, seconds for a large model, so it is done once, not per push.
   */
  private kept: { mapping: Mapping; registration: Registration } | null = null;
  /** Rejects when the link closes: every push in flight fails with the reason. */
  private readonly linkClosed: Promise<never>;
  /** Questions to the relay about a version size's chunk size, answered by size. */
  private readonly advice = new Map<number, ((chunkSize: number) => void)[]>();

  private constructor(
    private readonly worker: UcxWorker,
    private readonly link: PeerLink,
    private readonly options: RemoteOptions,
    private readonly metrics: BroadcastMetrics,
  ) {
    link.setHandler((message, incoming) => {
      incoming.release();
      if (message.t === 'chunk-advice') {
        const waiting = this.advice.get(message.size) ?? [];
        this.advice.delete(message.size);
        for (const resolve of waiting) resolve(message.chunkSize);
        return;
      }
      if ('model' in message && 'version' in message) this.sessions.get(transferKey(message.model, message.version))?.handle(message);
    });
    this.linkClosed = new Promise<never>((_, reject) =>
      link.endpoint.onClose((err) => reject(err ?? new LaminarError(ErrorCodes.PEER_CLOSED, `${link.peerId} closed the connection`))),
    );
    this.linkClosed.catch(() => undefined);
  }

  static async connect(options: RemoteOptions): Promise<RemotePublisher> {
    const secret = Buffer.isBuffer(options.secret)
      ? loadSecret({ value: options.secret.toString('utf8') })
      : loadSecret({
          ...(options.secretFile !== undefined ? { file: options.secretFile } : {}),
          ...(options.secret !== undefined ? { value: options.secret } : {}),
        });
    // UCX on the interface the kernel routes the master's address through (unless the user set
    // UCX_NET_DEVICES): a second NIC would otherwise be offered to the master, unreachable.
    const worker = new UcxWorker({ netDevices: await devicesToward(parseAddress(options.address).host) });
    try {
      const link = await connectPeer(worker, options.relayId ?? null, options.address, {
        selfId: options.name ?? `publisher@${hostname()}:${process.pid}`,
        role: 'publisher',
        secret,
        epoch: 0,
        timeoutMs: options.timeoutMs ?? 10_000,
        // A master that went dark fails the push (and the trainer moves on) instead of hanging it.
        silenceMs: options.stallMs ?? 30_000,
      });
      return new RemotePublisher(worker, link, options, new BroadcastMetrics(new Registry(), () => worker.stats().registrations));
    } catch (err) {
      worker.close();
      throw destinationLost(err, options.relayId ?? 'relay', options.address, 'connecting');
    }
  }

  /** The relay this publisher is connected to. */
  get relayId(): string {
    return this.link.peerId;
  }

  /** Memory regions registered with UCX now: the kept staging buffer's between pushes, at most. */
  get registeredRegions(): number {
    return this.worker.stats().registrations;
  }

  /** True once the link to the relay is gone (closed, or failed: the relay died or went silent). */
  get closed(): boolean {
    return this.link.closed;
  }

  /**
   * The chunk size the relay chooses for a version of `dataBytes` bytes of tensor data (its
   * `--chunk-size`, or under auto the chunk model for its chain with this push as the first hop);
   * null when the relay gives no advice (an older build) or none within 5 s.
   */
  async chunkAdviceFor(dataBytes: number): Promise<number | null> {
    if (!this.link.chunkAdvice || this.link.closed) return null;
    let timer: NodeJS.Timeout | undefined;
    let waiter: ((chunkSize: number) => void) | undefined;
    const answer = new Promise<number | null>((resolve) => {
      waiter = resolve;
      timer = setTimeout(() => resolve(null), CHUNK_ADVICE_TIMEOUT_MS);
      // One question per size at a time; everyone waiting on it takes the answer.
      const waiting = this.advice.get(dataBytes);
      if (waiting) waiting.push(resolve);
      else {
        this.advice.set(dataBytes, [resolve]);
        this.link.send({ t: 'chunk-query', size: dataBytes }).catch(() => resolve(null));
      }
    });
    try {
      return await Promise.race([answer, this.linkClosed.catch(() => null)]);
    } finally {
      clearTimeout(timer);
      // Unanswered (timeout, link gone): a later question is asked afresh.
      const waiting = this.advice.get(dataBytes);
      if (waiting) {
        const left = waiting.filter((w) => w !== waiter);
        if (left.length > 0) this.advice.set(dataBytes, left);
        else this.advice.delete(dataBytes);
      }
    }
  }

  /**
   * How a version of `dataBytes` pushed by this publisher is cut: its own chunk size, else the
   * relay's advice (DEFAULT_CHUNK_SIZE without one) with header room for any chunk size the
   * relay's auto could advise, so that the version's size (the relay's spare segment, this
   * publisher's staging buffer) does not change with the advice.
   */
  async chunkingFor(dataBytes: number): Promise<ChunkLayout> {
    if (this.options.chunkSize !== undefined) return { chunkSize: this.options.chunkSize };
    return { chunkSize: (await this.chunkAdviceFor(dataBytes)) ?? DEFAULT_CHUNK_SIZE, headerChunks: autoHeaderChunks(dataBytes) };
  }

  /** Publishes tensors given in memory. */
  async publish(request: TensorVersion & { onProgress?: (done: number, total: number) => void }): Promise<RemotePublishResult> {
    const started = performance.now();
    const prepared = await prepareVersion(request, await this.chunkingFor(tensorDataBytes(request)), this.staging);
    try {
      return await this.push(prepared, started, request.onProgress);
    } finally {
      prepared.close();
    }
  }

  /** Publishes a checkpoint (a .safetensors file or a directory of shards) read on this host. */
  async publishFile(
    path: string,
    request: { model: string; version: number; onProgress?: (done: number, total: number) => void },
  ): Promise<RemotePublishResult> {
    const started = performance.now();
    const prepared = await prepareCheckpoint(path, request.model, request.version, (dataBytes) => this.chunkingFor(dataBytes));
    try {
      return await this.push(prepared, started, request.onProgress);
    } finally {
      prepared.close();
    }
  }

  /**
   * Publishes this host's part of a version whose tensors live on several hosts (every part's
   * host calls this at once, each with its own tensors and the same manifest): resolves when the
   * relay holds, has verified and serves the whole version, and fails with the relay's code
   * when the version is discarded (ERR_PART_LOST, ERR_PART_MISSING, ...) or this part refused
   * (ERR_PART_MISMATCH, ERR_PART_OVERLAP). See docs/components/broadcast.md.
   */
  async publishPart(request: TensorPart & { onProgress?: (done: number, total: number) => void }): Promise<RemotePublishResult> {
    if (!this.link.parts) {
      throw new LaminarError(
        ErrorCodes.PEER_UNEXPECTED,
        `${this.link.peerId} does not take versions in parts (an older build): publish the whole version from one host`,
      );
    }
    const started = performance.now();
    const prepared = await preparePart(request, await this.chunkingFor(tensorDataBytes({ tensors: request.manifest })));
    try {
      return await this.pushPart(prepared, started, request.onProgress);
    } finally {
      prepared.close();
    }
  }

  /** Streams a prepared part to the relay; resolves when the relay holds and verified the whole version. */
  async pushPart(prepared: PreparedPart, started = performance.now(), onProgress?: (done: number, total: number) => void): Promise<RemotePublishResult> {
    const { layout, pieces, mapping } = prepared;
    const source: ChunkSource = {
      model: prepared.model,
      version: prepared.version,
      layout,
      mapping,
      pieces: { count: pieces.length, range: (i) => ({ offset: pieces[i]!.packed, length: pieces[i]!.length }) },
      available: () => true,
      whenAvailable: () => Promise.resolve(),
    };
    const offer = {
      message: {
        t: 'part-offer' as const,
        model: prepared.model,
        version: prepared.version,
        size: layout.totalSize,
        headerBytes: layout.dataOffset,
        part: prepared.part.index,
        parts: prepared.part.count,
        runs: prepared.runs,
        pieces: pieces.length,
      },
      payload: { source: prepared.offerPayload, offset: 0, length: prepared.offerPayload.byteLength },
    };
    const bytes = packedBytes(pieces);
    // Pieces go in order (resends aside): the bytes up to the last one sent.
    const progress = onProgress
      ? (sent: number) => {
          const last = pieces[Math.min(sent, pieces.length) - 1];
          onProgress(last === undefined ? 0 : last.packed + last.length, bytes);
        }
      : undefined;
    return this.pushSource(source, this.worker.register(mapping), false, started, progress, { offer });
  }

  async close(): Promise<void> {
    this.staging.close();
    this.kept?.registration.release();
    this.kept = null;
    await this.link.close();
    this.worker.close();
  }

  /**
   * Streams a prepared version to the relay; resolves when the relay holds and verified it.
   * `started` is when the caller began waiting (the stall reported includes preparation).
   */
  async push(prepared: PreparedVersion, started = performance.now(), onProgress?: (done: number, total: number) => void): Promise<RemotePublishResult> {
    const { model, version, layout, mapping } = prepared;
    const registration = prepared.kept ? this.keptRegistration(mapping) : this.worker.register(mapping);
    const chunkProgress = onProgress ? (sent: number) => onProgress(Math.min(sent, layout.chunkCount) * layout.chunkSize, layout.dataLength) : undefined;
    const delta = prepared.deltaAgainst ? { delta: prepared.deltaAgainst } : {};
    return this.pushSource(new LocalSource(model, version, layout, mapping), registration, prepared.kept, started, chunkProgress, delta);
  }

  /** One push of `source` (a whole version, or a part with its own offer): the session, its failures and its result. */
  private async pushSource(
    source: ChunkSource,
    registration: Registration,
    kept: boolean,
    started: number,
    onSent?: (sent: number) => void,
    extra: Pick<OutgoingOptions, 'offer' | 'delta'> = {},
  ): Promise<RemotePublishResult> {
    const { model, version, layout } = source;
    const key = transferKey(model, version);
    if (this.sessions.has(key)) {
      if (!kept) registration.release();
      throw new ConflictError(ErrorCodes.PUSH_IN_PROGRESS, `${model} v${version} is being pushed already`);
    }
    const transferStarted = performance.now();
    const stallMs = this.options.stallMs ?? 30_000;
    const transfer = new OutgoingTransfer(this.link, source, {
      window: this.options.window ?? DEFAULT_BROADCAST_WINDOW,
      stallMs,
      completionTimeoutMs: stallMs,
      metrics: this.metrics,
      log: silentLogger,
      ...(onSent ? { onChunk: (sent: number) => onSent(sent) } : {}),
      ...extra,
    });
    this.sessions.set(key, transfer);
    try {
      let result;
      try {
        result = await Promise.race([transfer.start(), this.linkClosed]);
      } catch (err) {
        const stage: PushStage = transfer.awaitingCompletion ? 'verification' : transfer.sentChunks > 0 ? 'transferring' : 'offering';
        throw destinationLost(err, this.link.peerId, this.options.address, stage);
      }
      if (result === 'declined') {
        const reason = transfer.declined ?? { code: ErrorCodes.DECLINED, message: 'the relay declined the version' };
        throw new ConflictError(reason.code, `${this.link.peerId} declined ${model} v${version}: ${reason.message}`);
      }
    } finally {
      this.sessions.delete(key);
      transfer.cancel(new LaminarError(ErrorCodes.ABORTED, 'the push ended'));
      if (!kept) registration.release();
    }
    const now = performance.now();
    return {
      model,
      version,
      size: layout.totalSize,
      chunks: layout.chunkCount,
      stallSeconds: (now - started) / 1e3,
      transferSeconds: (now - transferStarted) / 1e3,
    };
  }

  /** The registration of `mapping`, made on its first push; the one of a replaced mapping is released. */
  private keptRegistration(mapping: Mapping): Registration {
    if (this.kept?.mapping === mapping) return this.kept.registration;
    this.kept?.registration.release();
    this.kept = { mapping, registration: this.worker.register(mapping) };
    return this.kept.registration;
  }
}

export interface TensorVersion {
  model: string;
  version: number;
  tensors: { name: string; dtype: Dtype; shape: number[]; data: TensorData }[];
  metadata?: Record<string, string>;
}

/** Bytes of tensor data in a version (what a relay chooses the chunk size for), from dtypes and shapes. */
export function tensorDataBytes(request: { tensors: readonly { name: string; dtype: Dtype; shape: readonly number[] }[] }): number {
  return request.tensors.reduce((sum, t) => sum + tensorByteLength(t), 0);
}

/**
 * A version laid out in local memory exactly as it will sit in a relay's shared memory (header
 * with chunk checksums, then the tensors), ready to be pushed once or, after a master change,
 * again to another relay without copying it again.
 */
export interface PreparedVersion {
  readonly model: string;
  readonly version: number;
  readonly layout: VersionLayout;
  readonly mapping: Mapping;
  /** close() keeps the memory for the next version (a StagingBuffer): its registration may stay. */
  readonly kept: boolean;
  /**
   * Where the pusher holds the relay's base too (a forwarding relay: its store), an encoder of
   * the version against the base the relay names in its accept (relay/broadcast/delta/); absent
   * or null: full chunks.
   */
  readonly deltaAgainst?: OutgoingOptions['delta'];
  close(): void;
}

function planFor(
  model: string,
  version: number,
  specs: { name: string; dtype: Dtype; shape: number[] }[],
  metadata: Record<string, string>,
  chunking: ChunkLayout,
): VersionLayout {
  return planLayout(
    specs.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
    { model: validateModelId(model), version: validateVersion(version), ...chunking, extraMetadata: metadata },
  );
}

/**
 * Writes the header with every chunk's checksum; `known` holds those the copy already computed
 * (a chunk filled by one tensor's part), the others are read here.
 */
async function seal(
  model: string,
  version: number,
  layout: VersionLayout,
  mapping: Mapping,
  metadata: Record<string, string>,
  release: () => void,
  kept: boolean,
  known: ReadonlyMap<number, bigint> = new Map(),
): Promise<PreparedVersion> {
  const checksums = await chunkChecksums(mapping, layout, CHECKSUM_CONCURRENCY, known);
  mapping.write(0, encodeHeader(layout, { model, version, chunkSize: layout.chunkSize, checksums }, metadata));
  return { model, version, layout, mapping, kept, close: release };
}

/**
 * Lays `request` out in private memory: a new mapping, or the one `staging` kept from the last
 * publish (close() gives it back to `staging` then).
 */
/** `chunking`: a chunk size, or one with header room reserved (RemotePublisher.chunkingFor). */
export async function prepareVersion(
  request: TensorVersion,
  chunking: number | ChunkLayout = DEFAULT_CHUNK_SIZE,
  staging?: StagingBuffer,
): Promise<PreparedVersion> {
  const metadata = request.metadata ?? {};
  const layout = planFor(request.model, request.version, request.tensors, metadata, typeof chunking === 'number' ? { chunkSize: chunking } : chunking);
  const sources = request.tensors.map((t, i) => sizedBytes(t, layout.tensors[i]!.byteLength));
  const mapping = staging ? staging.take(layout.totalSize) : new Mapping(null, { size: layout.totalSize });
  const release = staging ? () => staging.give(mapping) : () => void mapping.closeAsync();
  try {
    // Every tensor at once, in runs of whole chunks over the pool's threads; a chunk that one
    // tensor fills gets its checksum from the copy's own pass, so only chunks where tensors meet
    // are read again.
    const written = await Promise.all(sources.map((bytes, i) => writeChunkAligned(mapping, layout, layout.tensors[i]!.offset, bytes)));
    const known = new Map<number, bigint>();
    for (const part of written.flat()) {
      // A part lies inside one chunk: it fills it when it is as long.
      const index = Math.floor((part.offset - layout.dataOffset) / layout.chunkSize);
      if (part.length > 0 && part.length === chunkRange(layout, index).length) known.set(index, part.sum);
    }
    return await seal(request.model, request.version, layout, mapping, metadata, release, staging !== undefined, known);
  } catch (err) {
    // Not given back for reuse: after a failed write, other writes may still be landing in it.
    void mapping.closeAsync();
    throw err;
  }
}

/** `chunking`: a chunk size, or what gives the chunking for the checkpoint's bytes of tensor data (a relay's advice). */
export async function prepareCheckpoint(
  path: string,
  model: string,
  version: number,
  chunking: number | ((dataBytes: number) => Promise<ChunkLayout>) = DEFAULT_CHUNK_SIZE,
): Promise<PreparedVersion> {
  const checkpoint = await readCheckpoint(path);
  const specs = checkpoint.shards.flatMap((s) => s.tensors);
  const metadata = { ...checkpoint.shards[0]?.metadata, 'laminar.source': path };
  const layout = planFor(
    model,
    version,
    specs,
    metadata,
    typeof chunking === 'number' ? { chunkSize: chunking } : await chunking(tensorDataBytes({ tensors: specs })),
  );
  const mapping = new Mapping(null, { size: layout.totalSize });
  try {
    await copyCheckpoint(checkpoint, mapping, layout.dataOffset, { concurrency: CHECKSUM_CONCURRENCY });
    // Freeing a pushed gigabyte of private pages takes a while: on the pool, not in the caller's way.
    return await seal(model, version, layout, mapping, metadata, () => void mapping.closeAsync(), false);
  } catch (err) {
    mapping.close();
    throw err;
  }
}
