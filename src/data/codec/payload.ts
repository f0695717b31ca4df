/**
 * The bulk of a trajectory on the wire: token ids (int32) then logprobs (float32), little
 * endian, no framing (the lengths are in the metadata). Decoding makes typed-array views on
 * the received bytes when they are 4-byte aligned, so a sampled batch is not copied again.
 */
import { endianness } from 'node:os';

if (endianness() !== 'LE') throw new Error('laminar data payloads assume a little-endian host');

export function encodePayload(tokens: Int32Array, logprobs: Float32Array): Uint8Array {
  const out = new Uint8Array(tokens.byteLength + logprobs.byteLength);
  out.set(new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength), 0);
  out.set(new Uint8Array(logprobs.buffer, logprobs.byteOffset, logprobs.byteLength), tokens.byteLength);
  return out;
}

export function decodePayload(bytes: Uint8Array, tokenCount: number): { tokens: Int32Array; logprobs: Float32Array } {
  if (bytes.byteLength !== tokenCount * 8) throw new RangeError(`payload has ${bytes.byteLength} bytes, expected ${tokenCount * 8}`);
  // new Uint8Array(x) copies into a fresh (aligned) ArrayBuffer; Buffer.slice would not copy.
  const aligned = bytes.byteOffset % 4 === 0 ? bytes : new Uint8Array(bytes);
  return {
    tokens: new Int32Array(aligned.buffer, aligned.byteOffset, tokenCount),
    logprobs: new Float32Array(aligned.buffer, aligned.byteOffset + tokenCount * 4, tokenCount),
  };
}

/**
 * Room left in a message for its headers (the record's metadata): payloads above max_payload
 * minus this are chunked. 16 KiB: a header of every field at its largest (ids, 4 KiB of info,
 * 4 KiB of segments) is under 13 KiB in base64. (8 KiB before segments; a record chunked for
 * that room reads the same.)
 */
export const HEADER_ROOM = 16 * 1024;

/** The largest payload a record carries in its body on a server with this max_payload; larger ones go in chunks of this size. */
export function chunkLimit(maxPayload: number): number {
  const limit = maxPayload - HEADER_ROOM;
  if (limit < 1) throw new RangeError(`the server's max_payload (${maxPayload}) leaves no room beside ${HEADER_ROOM} bytes of headers`);
  return limit;
}

/** Cuts a payload into chunks of `limit` bytes (the last one shorter), as views of it. */
export function splitPayload(payload: Uint8Array, limit: number): Uint8Array[] {
  const parts: Uint8Array[] = [];
  for (let off = 0; off < payload.byteLength; off += limit) parts.push(payload.subarray(off, Math.min(off + limit, payload.byteLength)));
  return parts;
}

/** Joins chunks (claim-check payloads) into one buffer. */
export function joinChunks(chunks: readonly Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.byteLength;
  }
  if (off !== total) throw new RangeError(`chunks hold ${off} bytes, expected ${total}`);
  return out;
}
