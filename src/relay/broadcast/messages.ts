/**
 * The relay-to-relay protocol (version 2): msgpack headers on UCX active messages, validated with
 * zod. Weight bytes never go through msgpack: a header that carries bytes (offer: the safetensors
 * header; chunk: the chunk) announces them as the message payload, which the receiver pulls
 * straight into its segment.
 *
 *   connector -> acceptor  hello {from, role, nonce, epoch}
 *   acceptor  -> connector challenge {id, nonce, proof}          | refuse {code, message}
 *   connector -> acceptor  auth {proof}
 *   acceptor  -> connector welcome {epoch, chunkAdvice?}         | refuse {code, message}
 *   sender    -> receiver  offer {model, version, size, headerBytes} + payload: header bytes
 *   publisher -> relay     part-offer {model, version, size, headerBytes, part, parts, runs, pieces}
 *                          + payload: header bytes (placeholder chunk checksums), then one u64 LE
 *                          XXH3 per piece            (only to a relay whose welcome said parts)
 *   receiver  -> sender    accept {model, version, from, have, base?} | decline {model, version, code}
 *                          base {version, digest}: an earlier version of the same layout the
 *                          receiver holds (delta/base.ts); a sender holding the same may send deltas
 *   sender    -> receiver  chunk {model, version, index, enc?} + payload: chunk bytes, or with enc
 *                          'same' none (chunk `index` of the base), 'sparse' a delta against the base
 *   receiver  -> sender    nack {model, version, index}           (failed its checksum or did not
 *                                                                  decode: send again, in full)
 *   receiver  -> sender    progress {model, version, hwm, complete}
 *   publisher -> relay     chunk-query {size}                    (only to a relay whose welcome said chunkAdvice)
 *   relay     -> publisher chunk-advice {size, chunkSize}         (the chunk size the relay would give `size` data bytes)
 *   either                 error {code, message}
 *   either                 ping {} -> pong {}                    (keepalive of a quiet link)
 */
import { Packr } from 'msgpackr';
import { z } from 'zod';
import { ProtocolError } from '../../common/errors.js';
import { ErrorCodes } from '../../common/error-codes.js';

export const PEER_PROTOCOL_VERSION = 2;
export const MAX_PEER_HEADER_BYTES = 64 * 1024;

const bytes = z.custom<Uint8Array>((value) => value instanceof Uint8Array, { message: 'expected bytes' });
const model = z.string().min(1).max(256);
const version = z.number().int().nonnegative();
const index = z.number().int().nonnegative();

export const peerMessageSchema = z.discriminatedUnion('t', [
  z.object({
    t: z.literal('hello'),
    p: z.number().int(),
    from: z.string().max(128),
    role: z.enum(['relay', 'publisher']),
    nonce: bytes,
    epoch: z.number().int().nonnegative(),
  }),
  z.object({ t: z.literal('challenge'), id: z.string().max(128), nonce: bytes, proof: bytes }),
  z.object({ t: z.literal('auth'), proof: bytes }),
  // chunkAdvice: this relay answers chunk-query (a relay of an older build leaves it out, and a
  // message it does not know would drop the link: the publisher asks only when it is there).
  // parts: this relay assembles versions published in parts (part-offer); an older one does not.
  z.object({ t: z.literal('welcome'), epoch: z.number().int().nonnegative(), chunkAdvice: z.boolean().optional(), parts: z.boolean().optional() }),
  z.object({ t: z.literal('refuse'), code: z.string().max(64), message: z.string().max(1024) }),
  z.object({ t: z.literal('offer'), model, version, size: z.number().int().positive(), headerBytes: z.number().int().positive() }),
  // One part of a version published from several hosts (relay/parts/): the tensors of `runs`
  // ([first, count] of the header's tensor order), sent as `pieces` chunk messages whose index
  // is the piece's (relay/parts/part-plan.ts).
  z.object({
    t: z.literal('part-offer'),
    model,
    version,
    size: z.number().int().positive(),
    headerBytes: z.number().int().positive(),
    part: index,
    parts: z.number().int().min(1).max(1024),
    runs: z
      .array(z.tuple([index, z.number().int().positive()]))
      .min(1)
      .max(4096),
    pieces: z.number().int().nonnegative(),
  }),
  z.object({
    t: z.literal('accept'),
    model,
    version,
    from: index,
    have: z.array(index).max(65536),
    // Left out by relays of older builds (and by those without a base): full chunks only.
    base: z.object({ version, digest: z.string().min(1).max(64) }).optional(),
  }),
  z.object({ t: z.literal('decline'), model, version, code: z.string().max(64), message: z.string().max(1024) }),
  // enc only to a receiver whose accept named a base; a chunk without it is the chunk itself.
  z.object({ t: z.literal('chunk'), model, version, index, enc: z.enum(['same', 'sparse']).optional() }),
  z.object({ t: z.literal('nack'), model, version, index }),
  z.object({ t: z.literal('progress'), model, version, hwm: index, complete: z.boolean() }),
  z.object({ t: z.literal('chunk-query'), size: z.number().int().nonnegative() }),
  z.object({
    t: z.literal('chunk-advice'),
    size: z.number().int().nonnegative(),
    chunkSize: z
      .number()
      .int()
      .min(4096)
      .max(2 ** 31),
  }),
  z.object({ t: z.literal('error'), code: z.string().max(64), message: z.string().max(1024) }),
  z.object({ t: z.literal('ping') }),
  z.object({ t: z.literal('pong') }),
]);

export type PeerMessage = z.infer<typeof peerMessageSchema>;
export type PeerMessageOf<T extends PeerMessage['t']> = Extract<PeerMessage, { t: T }>;

// Plain maps and Uint8Arrays only: no records/structures extension, so any msgpack decoder reads it.
const packr = new Packr({ useRecords: false, moreTypes: false });

export function encodePeerMessage(message: PeerMessage): Buffer {
  return packr.pack(message);
}

/** Decodes and validates a header; throws ProtocolError with a stable code on anything else. */
export function decodePeerMessage(header: Uint8Array): PeerMessage {
  if (header.byteLength === 0 || header.byteLength > MAX_PEER_HEADER_BYTES) {
    throw new ProtocolError(ErrorCodes.PEER_BAD_MESSAGE, `message header of ${header.byteLength} bytes`);
  }
  let raw: unknown;
  try {
    raw = packr.unpack(header);
  } catch (err) {
    throw new ProtocolError(ErrorCodes.PEER_BAD_MESSAGE, `message header is not msgpack: ${(err as Error).message}`);
  }
  const parsed = peerMessageSchema.safeParse(raw);
  if (!parsed.success) {
    throw new ProtocolError(ErrorCodes.PEER_BAD_MESSAGE, `invalid message: ${parsed.error.issues[0]?.message ?? 'schema'}`);
  }
  return parsed.data;
}
