/**
 * Writing one version in place. The segment is mapped into the writer (nothing is sent over
 * the socket but names and checksums); several writers, even in several processes, may fill
 * disjoint tensors of the same publication. Each write is reported to the relay with checksums
 * of the bytes as they landed, one per part of the tensor in each chunk it spans (computed in
 * the copy's own pass, or on the libuv pool); at commit the relay checks those against the
 * segment before it serves it, in the same read that computes the chunk checksums.
 *
 * commit() returns as soon as the reports and the commit request are sent: the writer's stall is
 * the copy, and the relay's read runs while it goes on (a trainer trains). The result's
 * `visible` settles when the relay has verified the version and serves it, or refused it.
 */
import { ClosedError, ErrorCodes, InvalidInputError, LaminarError } from '../../common/errors.js';
import { mapLimit } from '../../common/concurrency.js';
import { Mapping, checksumHex } from '../../native/index.js';
import { chunkAlignedParts } from '../../safetensors/header.js';
import { writeChunkAligned } from './chunk-aligned-write.js';
import type { SegmentDescription, TensorInfo } from '../protocol/messages.js';
import type { FrameConnection } from './connection.js';
import { asBytes, tensorArray, tensorBytes, type TensorArray } from './tensor-view.js';

export type TensorData = ArrayBufferView | ArrayBuffer;

/** Checksum jobs in flight for markWritten (the pool has 4 threads unless UV_THREADPOOL_SIZE says). */
const CHECKSUM_JOBS = 8;

/**
 * What commit() (and RelayClient.publish) return once the bytes are in the segment and the commit
 * is sent: the writer's stall is over, the relay's verification (one read of every byte) runs
 * after, and the version is served to nobody until it passed.
 */
export interface PublishResult {
  model: string;
  version: number;
  /** The segment's name while it was written (the description `visible` gives names the complete one). */
  segment: string;
  size: number;
  /**
   * Resolves with the relay's description of the version (checksums, dir) once it is verified and
   * served: acquirable, delivered to watches, sent down the chain. Rejects when it never will be:
   * ERR_CHECKSUM_MISMATCH (its bytes differ from what the writers checksummed), ERR_INCOMPLETE, or
   * ERR_CLOSED (the relay went away first); the version is then aborted, so the previous one stays
   * the latest. Nothing needs to await it: its rejection is never an unhandled one.
   */
  visible: Promise<SegmentDescription>;
}

interface Report {
  name: string;
  chunkAligned: true;
  pieces: string[];
}

export class Publication {
  readonly model: string;
  readonly version: number;
  readonly segment: string;
  readonly size: number;
  private readonly index: Map<string, TensorInfo>;
  private readonly reports: Promise<Report>[] = [];
  private finished = false;

  constructor(
    private readonly connection: FrameConnection,
    readonly description: SegmentDescription,
    readonly mapping: Mapping,
    /** Whether this writer began the publication (only the owner commits or aborts). */
    readonly owner: boolean,
  ) {
    this.model = description.model;
    this.version = description.version;
    this.segment = description.segment;
    this.size = description.size;
    this.index = new Map(description.tensors.map((t) => [t.name, t]));
  }

  get tensors(): readonly TensorInfo[] {
    return this.description.tensors;
  }

  info(name: string): TensorInfo {
    const t = this.index.get(name);
    if (!t) throw new InvalidInputError(ErrorCodes.UNKNOWN_TENSOR, `version ${this.version} of ${this.model} has no tensor ${JSON.stringify(name)}`);
    return t;
  }

  /** A writable typed view of the tensor's bytes in the segment (fill it, then markWritten). */
  tensor(name: string): TensorArray {
    this.checkOpen();
    return tensorArray(this.mapping, this.info(name));
  }

  bytes(name: string): Uint8Array {
    this.checkOpen();
    return tensorBytes(this.mapping, this.info(name));
  }

  /** Copies `data` into the tensor and reports it written. */
  write(name: string, data: TensorData): void {
    const t = this.info(name);
    const src = asBytes(data);
    if (src.byteLength !== t.byteLength) {
      throw new InvalidInputError(ErrorCodes.BAD_TENSOR, `tensor ${name} needs ${t.byteLength} bytes, got ${src.byteLength}`);
    }
    this.checkOpen();
    // One native pass per part copies and checksums: no second read of the bytes competing for
    // memory bandwidth with the next tensor's copy.
    const pieces = this.parts(t).map((p) => checksumHex(this.mapping.write(p.offset, src.subarray(p.offset - t.offset, p.offset - t.offset + p.length))));
    this.reports.push(Promise.resolve({ name, chunkAligned: true, pieces }));
  }

  /**
   * Copies `data` into the tensor on the libuv pool, in runs of whole chunks that run on several
   * threads at once, as do writes of several tensors started together. The source must not
   * change until the promise resolves.
   */
  async writeAsync(name: string, data: TensorData): Promise<void> {
    this.checkOpen();
    const t = this.info(name);
    if (data.byteLength !== t.byteLength) {
      throw new InvalidInputError(ErrorCodes.BAD_TENSOR, `tensor ${name} needs ${t.byteLength} bytes, got ${data.byteLength}`);
    }
    const report = writeChunkAligned(this.mapping, this.description, t.offset, asBytes(data)).then((parts) => ({
      name,
      chunkAligned: true as const,
      pieces: parts.map((p) => checksumHex(p.sum)),
    }));
    this.reports.push(report);
    await report;
  }

  /** Copies a tensor natively from another mapping (any size: no JS view is involved). */
  async writeFrom(name: string, source: Mapping, sourceOffset: number): Promise<void> {
    this.checkOpen();
    const t = this.info(name);
    await this.mapping.copyFrom(source, sourceOffset, t.offset, t.byteLength);
    this.markWritten(name);
  }

  /** Reads a tensor natively from a file at fileOffset (e.g. a shard of a checkpoint). */
  async writeFromFile(name: string, path: string, fileOffset: number): Promise<void> {
    this.checkOpen();
    const t = this.info(name);
    await this.mapping.readFile(path, fileOffset, t.offset, t.byteLength);
    this.markWritten(name);
  }

  /** Declares a tensor filled (after writing through tensor()/bytes()). */
  markWritten(name: string): void {
    this.checkOpen();
    const t = this.info(name);
    const pieces = mapLimit(this.parts(t), CHECKSUM_JOBS, (p) => this.mapping.checksumAsync(p.offset, p.length));
    this.reports.push(pieces.then((sums) => ({ name, chunkAligned: true, pieces: sums.map(checksumHex) })));
  }

  /** Sends the reports gathered so far (commit does this too). */
  async flush(): Promise<void> {
    const pending = this.reports.splice(0);
    if (pending.length === 0) return;
    const tensors = await Promise.all(pending);
    await this.connection.request('written', { model: this.model, version: this.version, tensors });
  }

  /**
   * Sends what was written and asks the relay to commit; resolves as soon as that is sent, with
   * the relay's verdict to come in `visible` (see PublishResult). The writer's mapping is given
   * up: the bytes are the relay's now.
   */
  async commit(): Promise<PublishResult> {
    if (!this.owner) throw new LaminarError(ErrorCodes.NOT_OWNER, 'only the writer that began the publication commits it');
    this.checkOpen();
    await this.flush();
    // A connection lost by now took the publication with it: fail here, where the caller can still
    // publish again (to a restarted relay, a new master), not later in `visible`.
    if (this.connection.closed) throw new ClosedError(`the connection of the publication of ${this.model} v${this.version} is lost`);
    const answer = this.connection.request<SegmentDescription>('commit', { model: this.model, version: this.version });
    this.finish();
    const visible = answer.catch(async (err: unknown) => {
      // The relay keeps a refused version writing (a writer could mend it); this one is finished,
      // so it is dropped now rather than left holding a segment. With the connection gone the
      // relay dropped it already. Settled only after, so that whoever sees the error sees it gone.
      if (!this.connection.closed) await this.connection.request('abort', { model: this.model, version: this.version }).catch(() => undefined);
      throw err;
    });
    visible.catch(() => undefined);
    return { model: this.model, version: this.version, segment: this.segment, size: this.size, visible };
  }

  async abort(): Promise<void> {
    if (this.finished) return;
    try {
      if (this.owner) await this.connection.request('abort', { model: this.model, version: this.version });
    } finally {
      this.finish();
    }
  }

  /** Releases the writer's mapping (attached writers call this when their part is done). */
  async close(): Promise<void> {
    await this.flush();
    this.finish();
  }

  private finish(): void {
    this.finished = true;
    // Unmapping a written gigabyte walks its page tables (~0.1 s): on the pool, not in the
    // writer's way (a trainer returns to its step as soon as commit is sent).
    void this.mapping.closeAsync();
  }

  /** The tensor's parts in each chunk it spans: the unit of the checksums a writer reports. */
  private parts(t: TensorInfo): { offset: number; length: number }[] {
    return chunkAlignedParts(this.description, t.offset, t.byteLength);
  }

  private checkOpen(): void {
    if (this.finished) throw new LaminarError(ErrorCodes.NOT_WRITING, `publication of ${this.model} v${this.version} is finished`);
  }
}
