/**
 * The one header an action or a result carries, `Nats-Msg-Id` (the stream's duplicate window
 * drops a second message of the same id), written straight to bytes.
 *
 * nats.js's `headers()` builds a map, canonicalises the key, searches it, trims and checks the
 * value, then renders the whole block to a string and encodes it, for every message: a few
 * microseconds of each action on the actions bench's profile, for a block that is always
 * `NATS/1.0\r\nNats-Msg-Id: <id>\r\n\r\n`. A publish reads nothing of its headers but their
 * `encode()` (nats-core 3's protocol.publish; a method of MsgHdrsImpl that MsgHdrs' public type
 * leaves out), so this object is all it needs. test/unit/action-hot-path.test.ts compares its
 * bytes with nats.js's own: a nats.js that stops calling encode() fails there, and in every
 * actions test.
 */
import type { MsgHdrs } from '@nats-io/transport-node';
import { InvalidInputError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

const LINE_BREAK = /[\r\n]/;

class MsgIdHeader {
  constructor(private readonly id: string) {}

  encode(): Uint8Array {
    // Buffer.from: a slice of Node's pool, where TextEncoder allocates a buffer each time (4 times slower).
    return Buffer.from(`NATS/1.0\r\nNats-Msg-Id: ${this.id}\r\n\r\n`, 'utf8');
  }
}

/**
 * The headers of a message whose id is `id`, for `nc.publish(..., { headers })`. An id that
 * cannot be a header value (a line break) is refused (ERR_BAD_ACTION), as nats.js refuses it; an
 * id with spaces at its ends is trimmed, as nats.js trims it (the action client refuses both).
 */
export function msgIdHeader(id: string): MsgHdrs {
  if (LINE_BREAK.test(id)) throw new InvalidInputError(ErrorCodes.BAD_ACTION, `a message id cannot hold a line break: ${JSON.stringify(id)}`);
  return new MsgIdHeader(id.trim()) as unknown as MsgHdrs;
}
