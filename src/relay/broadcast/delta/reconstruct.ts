/**
 * The receiver's half of a delta hop: chunk i of the new version rebuilt in its segment from
 * chunk i of the base this relay holds and what the sender sent: nothing for 'same', a sparse
 * payload for 'sparse'. The rebuild runs on the libuv pool and hashes the chunk as it writes it;
 * the caller compares that hash with the new version's own checksum, as for a full chunk: a
 * payload that decodes to the wrong bytes is caught there, one that does not decode throws
 * ERR_DELTA_CORRUPT here; either way the chunk is asked for again, in full.
 */
import type { Mapping } from '../../../native/index.js';
import { chunkRange, type VersionLayout } from '../../../safetensors/header.js';
import type { IncomingMessage } from '../../../ucx/index.js';
import { rebuildMappedChunk } from '../../delta/codec.js';
import type { StoredVersion } from '../../store.js';
import { LaminarError } from '../../../common/errors.js';
import { ErrorCodes } from '../../../common/error-codes.js';

/** How a chunk message's bytes stand for the chunk (the chunk message's `enc`; absent: full). */
export type DeltaEncoding = 'same' | 'sparse';

export interface DeltaTarget {
  layout: VersionLayout;
  /**
   * Runs `write` on the new version's writable mapping once it is set up and no other rebuild of
   * the chunk is in progress; null, without running it, when the segment never will be or the
   * chunk's arrival was superseded meanwhile (incoming.ts: exclusiveWrite).
   */
  write(write: (mapping: Mapping) => Promise<bigint>): Promise<bigint | null>;
}

/**
 * Rebuilds chunk `index` of `target` from `base` and the message's payload; resolves with the
 * XXH3-64 of the rebuilt chunk, or null when the chunk was superseded meanwhile (nothing
 * written: see DeltaTarget.write). `pull` moves the payload (in the order of the link's other
 * pulls) and returns false when superseded; `arrived` sees the payload as soon as it is here,
 * before the rebuild (a relay forwards it from there to a successor holding the same base), and
 * before the target's segment is set up.
 */
export async function rebuildChunk(
  encoding: DeltaEncoding,
  index: number,
  incoming: IncomingMessage,
  base: StoredVersion,
  target: DeltaTarget,
  pull: (into: Uint8Array) => Promise<boolean>,
  arrived?: (payload: Uint8Array) => void,
): Promise<bigint | null> {
  const baseGone = (): LaminarError => new LaminarError(ErrorCodes.TRANSFER_ABANDONED, `the base v${base.version} of a delta is no longer mapped`);
  // Read again after the waits below: the transfer's lease keeps the base, but a relay stopping does not.
  const baseMapping = (): Mapping | null => base.mapping;
  if (baseMapping() === null) {
    incoming.release();
    throw baseGone();
  }
  const at = chunkRange(target.layout, index);
  const from = chunkRange(base.layout, index);
  // In the link's order, like a full chunk ('same' has no payload: this only settles the message).
  const payload = new Uint8Array(incoming.length);
  if (!(await pull(payload))) return null;
  arrived?.(payload);
  return target.write((mapping) => {
    const source = baseMapping();
    if (source === null) throw baseGone();
    return rebuildMappedChunk(encoding, { mapping: source, offset: from.offset }, payload, { mapping, offset: at.offset }, at.length);
  });
}
