import type { Mapping } from '../native/index.js';
import type { UcxNativeWorker } from '../native/index.js';
import { LaminarError } from '../common/errors.js';

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

  /** Places the payload at `offset` of `target` (a writable mapping or a buffer). */
  async receiveInto(target: Mapping | Uint8Array, offset: number): Promise<void> {
    if (this.settled) throw new LaminarError('ERR_UCX_PAYLOAD_TAKEN', 'the payload was already received or released');
    this.settled = true;
    if (this.desc !== undefined) {
      await this.worker.receive(this.desc, target, offset, this.length);
      return;
    }
    if (this.data === undefined) {
      if (this.length === 0) return;
      throw new LaminarError('ERR_UCX_PAYLOAD_DROPPED', `an inline payload of ${this.length} bytes was dropped`);
    }
    if (target instanceof Uint8Array) {
      if (offset + this.data.length > target.length) {
        throw new LaminarError('ERR_OUT_OF_RANGE', 'payload does not fit the target buffer');
      }
      target.set(this.data, offset);
    } else {
      target.write(offset, this.data);
    }
  }

  /** Declines the payload (no-op when there is none or it was taken). */
  release(): void {
    if (this.settled) return;
    this.settled = true;
    if (this.desc !== undefined) this.worker.release(this.desc);
  }
}
