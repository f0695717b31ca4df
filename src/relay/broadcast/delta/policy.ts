/**
 * When a chunk goes as a delta and when in full. A delta costs an encode (a scan of the chunk
 * and of the base's chunk) at the sender, a rebuild at the receiver (the same scan, at about the
 * same speed; both on the libuv pool, E timed on the encoding thread), and sends `ratio` of the
 * chunk's bytes; the full chunk costs only its bytes on the link. (A relay in the middle of the
 * chain forwards the deltas it received without an encode: encoder.ts.) With E the encoder's
 * measured throughput and B the link's bandwidth, one chunk of L bytes takes about
 * 2L/E + ratio·L/B as a delta against L/B in full: the delta pays when
 *
 *   E · (1 - ratio) > 2 · B
 *
 * On a slow link (a data centre's uplink, 2 Gbit/s) it nearly always does; on a fast one
 * (loopback, a 400 Gbit/s RDMA NIC) the encoder is the bottleneck and full chunks are faster.
 * Under `auto` a sender that chose full still encodes one chunk in PROBE_EVERY, so that E and
 * the ratio follow the data and the host's load. Pure: the measurements come from encoder.ts.
 */
import { InvalidInputError } from '../../../common/errors.js';
import { ErrorCodes } from '../../../common/error-codes.js';

/** `--delta`: auto (measured, the default), on (every chunk encoded), off (every chunk full). */
export type DeltaMode = 'auto' | 'on' | 'off';
export const DELTA_MODES: readonly DeltaMode[] = ['auto', 'on', 'off'];
export const DEFAULT_DELTA_MODE: DeltaMode = 'auto';

/** Under auto, a sender sending full chunks still encodes one in this many to keep measuring. */
export const PROBE_EVERY = 32;
/** A chunk costs its encode at the sender and about as much again to rebuild at the receiver. */
export const REBUILD_FACTOR = 2;
/** Weight of the newest sample in the moving averages of E and the ratio. */
export const DELTA_EWMA_ALPHA = 0.2;

export function parseDeltaMode(value: unknown): DeltaMode {
  if (typeof value === 'string' && (DELTA_MODES as readonly string[]).includes(value)) return value as DeltaMode;
  throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--delta must be one of ${DELTA_MODES.join(', ')}, got ${JSON.stringify(value)}`);
}

/** What the sender has measured of its own encodes (null before the first). */
export interface EncodeMeasure {
  /** Bytes of chunk scanned per second by the encoder. */
  bytesPerSecond: number | null;
  /** Payload bytes over chunk bytes of the recent encodes (0: all unchanged, 1: nothing saved). */
  ratio: number | null;
}

/** Whether a delta of one chunk is expected to beat the full chunk on a link of `linkBandwidth` bytes/s. */
export function deltaPays(measure: EncodeMeasure, linkBandwidth: number): boolean {
  // Nothing measured yet: encode, which measures.
  if (measure.bytesPerSecond === null || measure.ratio === null) return true;
  return measure.bytesPerSecond * (1 - measure.ratio) > REBUILD_FACTOR * linkBandwidth;
}

/** The moving averages of a relay's encodes: one per relay, shared by its downstream sessions. */
export class EncodeMeter {
  private speed: number | null = null;
  private ratioValue: number | null = null;

  constructor(private readonly alpha = DELTA_EWMA_ALPHA) {}

  /** One chunk of `chunkBytes` encoded in `seconds` to `payloadBytes`. */
  record(chunkBytes: number, payloadBytes: number, seconds: number): void {
    const ratio = chunkBytes > 0 ? Math.min(1, payloadBytes / chunkBytes) : 1;
    this.ratioValue = this.ratioValue === null ? ratio : this.alpha * ratio + (1 - this.alpha) * this.ratioValue;
    // A chunk scanned faster than the clock can tell says nothing about E.
    if (seconds <= 0 || chunkBytes < 64 * 1024) return;
    const speed = chunkBytes / seconds;
    this.speed = this.speed === null ? speed : this.alpha * speed + (1 - this.alpha) * this.speed;
  }

  get measure(): EncodeMeasure {
    return { bytesPerSecond: this.speed, ratio: this.ratioValue };
  }
}
