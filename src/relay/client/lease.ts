/**
 * A version leased from the relay and mapped read-only into this process. The relay keeps the
 * segment while the lease lives; release() (or dropping the connection) gives it back.
 */
import { ClosedError, ErrorCodes, IntegrityError, InvalidInputError } from '../../common/errors.js';
import { mapLimit } from '../../common/concurrency.js';
import { Mapping } from '../../native/index.js';
import { chunkChecksums } from '../chunk-checksums.js';
import type { AcquireResult, TensorInfo } from '../protocol/messages.js';
import type { FrameConnection } from './connection.js';
import { tensorArray, tensorBytes, tensorChunks, type TensorArray } from './tensor-view.js';

/** Big copies out of the mapping are split so that several threads share the page faults. */
const COPY_STRIPE_BYTES = 64 * 1024 * 1024;
const COPY_THREADS = 4;

export class Lease implements AsyncDisposable {
  readonly id: number;
  readonly model: string;
  readonly version: number;
  readonly segment: string;
  readonly size: number;
  private readonly index: Map<string, TensorInfo>;
  private released = false;

  constructor(
    private readonly connection: FrameConnection,
    readonly description: AcquireResult,
    readonly mapping: Mapping,
  ) {
    this.id = description.lease;
    this.model = description.model;
    this.version = description.version;
    this.segment = description.segment;
    this.size = description.size;
    this.index = new Map(description.tensors.map((t) => [t.name, t]));
  }

  get tensors(): readonly TensorInfo[] {
    return this.description.tensors;
  }

  get metadata(): Record<string, string> {
    return this.description.metadata;
  }

  /**
   * The version's directory (`<shm-dir>/models/<model>/v<N>/`: model.safetensors and the relay's
   * engine files) for an engine that loads a directory; it stays while this lease lives. Null
   * when the relay could not make it.
   */
  get dir(): string | null {
    return this.description.dir;
  }

  info(name: string): TensorInfo {
    const t = this.index.get(name);
    if (!t) throw new InvalidInputError(ErrorCodes.UNKNOWN_TENSOR, `version ${this.version} of ${this.model} has no tensor ${JSON.stringify(name)}`);
    return t;
  }

  /** Zero-copy typed view of a tensor (read-only memory: writing to it faults). */
  tensor(name: string): TensorArray {
    return tensorArray(this.mapping, this.info(name));
  }

  bytes(name: string): Uint8Array {
    return tensorBytes(this.mapping, this.info(name));
  }

  chunks(name: string, pieceBytes?: number): Generator<{ offset: number; bytes: Uint8Array }> {
    return tensorChunks(this.mapping, this.info(name), pieceBytes);
  }

  /**
   * Copies [offset, offset+length) of the version into `target` at targetOffset, natively and
   * in parallel stripes (the path a GPU upload or a staging copy takes).
   */
  async copyTo(target: Mapping, targetOffset = 0, offset = 0, length = this.size - offset): Promise<void> {
    const stripes: { from: number; len: number }[] = [];
    for (let done = 0; done < length; done += COPY_STRIPE_BYTES) stripes.push({ from: done, len: Math.min(COPY_STRIPE_BYTES, length - done) });
    await mapLimit(stripes, COPY_THREADS, (s) => target.copyFrom(this.mapping, offset + s.from, targetOffset + s.from, s.len));
  }

  /** Re-verifies every chunk against the header's checksums (consumer-side check). */
  async verify(): Promise<void> {
    const sums = this.description.checksums;
    if (!sums) return;
    const { dataOffset, chunkSize } = this.description;
    const layout = { dataOffset, dataLength: this.size - dataOffset, chunkSize, chunkCount: sums.length };
    const actual = await chunkChecksums(this.mapping, layout, COPY_THREADS);
    const bad = actual.flatMap((s, i) => (s === sums[i] ? [] : [i]));
    if (bad.length > 0) throw new IntegrityError(ErrorCodes.CHECKSUM_MISMATCH, `chunks ${bad.join(', ')} of ${this.model} v${this.version} fail verification`);
  }

  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    // Views are detached at once; the unmap (a walk of every page-table entry the reader
    // faulted in, ~0.05-0.1 s per GiB) runs on the libuv pool, off the rollout's event loop, and
    // release resolves after it: an mmap started meanwhile (the next acquire) would wait for it.
    const unmapped = this.mapping.closeAsync();
    // A lost connection took the lease with it (the relay drops a connection's leases), even
    // when it is lost while the release is on its way.
    if (!this.connection.closed) {
      await this.connection.request('release', { lease: this.id }).catch((err: unknown) => {
        if (!(err instanceof ClosedError)) throw err;
      });
    }
    await unmapped;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
