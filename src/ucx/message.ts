import { Mapping as MappingClass, type Mapping, type UcxNativeWorker } from '../native/index.js';
import { LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

/**
 * A message that arrived on an endpoint: a small header (the protocol's msgpack) and maybe a
 * payload. A large payload stays with the sender (UCX rendezvous) until the receiver says where
 * it goes with receiveInto(), or declines it with release(); declined bytes never cross the wire.
 * Small payloads arrive inline in `data`.
 */
export class IncomingMessage {
  private settled = false;

  constructor(
    private readonly worker: UcxNativeWorker,
    readonly header: Buffer,
    /** Payload length in bytes (0: header only). */
    readonly length: number,
    /** The payload, when it came inline. */
    readonly data: Buffer | undefined,
    private readonly desc: number | undefined,
    /** An inline payload too large to copy was dropped by the native layer. */
    readonly dropped: boolean,
  ) {}

  /** True when the payload still waits at the sender. */
  get pending(): boolean {
    return this.desc !== undefined && !this.settled;
  }

  /**
   * Places the payload at `offset` of `target` (a writable mapping or a buffer). A target that is
   * refused (read-only, too small, not a mapping) takes nothing: the payload is still pending.
   */
  async receiveInto(target: Mapping | Uint8Array, offset: number): Promise<void> {
    if (this.settled) throw new LaminarError(ErrorCodes.UCX_PAYLOAD_TAKEN, 'the payload was already received or released');
    if (this.desc !== undefined) {
      const receiving = this.worker.receive(this.desc, target, offset, this.length); // throws on a bad target
      this.settled = true;
      await receiving;
      return;
    }
    if (this.data === undefined) {
      if (this.length === 0) {
        this.settled = true;
        return;
      }
      throw new LaminarError(ErrorCodes.UCX_PAYLOAD_DROPPED, `an inline payload of ${this.length} bytes was dropped`);
    }
    if (!Number.isSafeInteger(offset) || offset < 0) {
      throw new LaminarError(ErrorCodes.INVALID_ARG, 'offset must be a non-negative integer');
    }
    if (target instanceof Uint8Array) {
      if (offset + this.data.length > target.length) {
        throw new LaminarError(ErrorCodes.OUT_OF_RANGE, 'payload does not fit the target buffer');
      }
      target.set(this.data, offset);
    } else if (target instanceof MappingClass) {
      target.write(offset, this.data);
    } else {
      throw new LaminarError(ErrorCodes.INVALID_ARG, 'the target must be a Mapping or a Uint8Array');
    }
    this.settled = true;
  }

  /** Declines the payload (no-op when there is none or it was taken). */
  release(): void {
    if (this.settled) return;
    this.settled = true;
    if (this.desc !== undefined) this.worker.release(this.desc);
  }
}
