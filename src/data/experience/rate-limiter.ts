/**
 * Rate limiting after Reverb: sampling waits until the buffer holds `minSizeToSample` items
 * and, with `samplesPerInsert`, until samples stay within `errorBuffer` of
 * inserts × samplesPerInsert. Only the sampler is gated: rollouts never wait for the trainer
 * (paper §3), a surplus of inserts is handled by eviction instead.
 */
import { DataInputError } from '../errors.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface RateLimitOptions {
  /** Default 1. */
  minSizeToSample?: number;
  /** Target samples per inserted trajectory (e.g. 1 = each used about once). */
  samplesPerInsert?: number;
  /** Tolerance in samples around the target ratio. Default: one batch. */
  errorBuffer?: number;
}

export interface RateState {
  size: number;
  inserts: number;
  samples: number;
}

export class RateLimiter {
  readonly minSize: number;
  readonly spi: number | undefined;
  private readonly errorBuffer: number | undefined;

  constructor(options: RateLimitOptions = {}) {
    this.minSize = options.minSizeToSample ?? 1;
    this.spi = options.samplesPerInsert;
    this.errorBuffer = options.errorBuffer;
    if (!Number.isInteger(this.minSize) || this.minSize < 0) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'minSizeToSample must be an integer >= 0');
    if (this.spi !== undefined && !(this.spi > 0)) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'samplesPerInsert must be > 0');
    if (this.errorBuffer !== undefined && !(this.errorBuffer >= 0)) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'errorBuffer must be >= 0');
  }

  /** May a batch of `count` be taken now? */
  allows(count: number, s: RateState): boolean {
    if (s.size < this.minSize) return false;
    if (this.spi === undefined) return true;
    return s.samples + count <= s.inserts * this.spi + (this.errorBuffer ?? count);
  }
}
