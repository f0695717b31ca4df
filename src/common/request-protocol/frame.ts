/**
 * Length-prefixed msgpack frames, as a pure codec over bytes (no sockets here).
 *
 *   [u32 big-endian payload length][payload: one msgpack value]
 *
 * The decoder is fed whatever the transport delivers (any split) and returns whole payloads.
 * A length above `maxFrameBytes` is refused before any of the payload is buffered, so a
 * hostile or broken peer cannot make us allocate what it announces.
 */
import { Packr } from 'msgpackr';
import { ErrorCodes, ProtocolError } from '../errors.js';

export const FRAME_HEADER_BYTES = 4;
export const DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024;

// Plain maps and arrays only: no records/structures extension, so any msgpack peer can talk.
const packr = new Packr({ useRecords: false, mapsAsObjects: true, int64AsType: 'number' });

export function encodeFrame(message: unknown, maxFrameBytes = DEFAULT_MAX_FRAME_BYTES): Buffer {
  const payload = packr.pack(message);
  if (payload.byteLength > maxFrameBytes) {
    throw new ProtocolError(ErrorCodes.FRAME_TOO_LARGE, `message of ${payload.byteLength} bytes exceeds the frame limit of ${maxFrameBytes}`);
  }
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.byteLength);
  frame.writeUInt32BE(payload.byteLength, 0);
  payload.copy(frame, FRAME_HEADER_BYTES);
  return frame;
}

export function decodePayload(payload: Uint8Array): unknown {
  try {
    return packr.unpack(payload);
  } catch (err) {
    throw new ProtocolError(ErrorCodes.BAD_FRAME, `frame is not valid msgpack: ${(err as Error).message}`, { cause: err });
  }
}

export class FrameDecoder {
  private buffered: Buffer[] = [];
  private bufferedBytes = 0;

  constructor(private readonly maxFrameBytes = DEFAULT_MAX_FRAME_BYTES) {}

  /** Feeds bytes; returns the payloads now complete. Throws ProtocolError on a bad length. */
  push(bytes: Uint8Array): Buffer[] {
    this.buffered.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    this.bufferedBytes += bytes.byteLength;
    const out: Buffer[] = [];
    for (;;) {
      if (this.bufferedBytes < FRAME_HEADER_BYTES) break;
      const head = this.peek(FRAME_HEADER_BYTES);
      const length = head.readUInt32BE(0);
      if (length > this.maxFrameBytes) {
        throw new ProtocolError(ErrorCodes.FRAME_TOO_LARGE, `peer announced a frame of ${length} bytes (limit ${this.maxFrameBytes})`);
      }
      if (length === 0) throw new ProtocolError(ErrorCodes.BAD_FRAME, 'empty frame');
      if (this.bufferedBytes < FRAME_HEADER_BYTES + length) break;
      const whole = this.take(FRAME_HEADER_BYTES + length);
      out.push(whole.subarray(FRAME_HEADER_BYTES));
    }
    return out;
  }

  /** Bytes held for an incomplete frame (bounded by maxFrameBytes + header). */
  get pendingBytes(): number {
    return this.bufferedBytes;
  }

  private peek(n: number): Buffer {
    const first = this.buffered[0]!;
    if (first.byteLength >= n) return first;
    const joined = Buffer.concat(this.buffered);
    this.buffered = [joined];
    return joined;
  }

  private take(n: number): Buffer {
    const joined = this.buffered.length === 1 ? this.buffered[0]! : Buffer.concat(this.buffered);
    const result = joined.subarray(0, n);
    const rest = joined.subarray(n);
    this.buffered = rest.byteLength > 0 ? [rest] : [];
    this.bufferedBytes -= n;
    return result;
  }
}
