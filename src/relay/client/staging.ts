/**
 * Private memory a remote publisher lays versions out in, kept from one publish to the next. A
 * trainer publishes the same layout every step, and fresh pages cost their first touch (the
 * kernel zeroes each one; ~0.4 s per GiB on the development VM, five times the copy itself).
 */
import { Mapping } from '../../native/index.js';

export class StagingBuffer {
  private kept: Mapping | null = null;
  private closed = false;

  /** A private mapping of exactly `size` bytes: the kept one when it has that size, else a new one. */
  take(size: number): Mapping {
    const kept = this.kept;
    this.kept = null;
    if (kept !== null && kept.size === size) return kept;
    if (kept !== null) void kept.closeAsync();
    return new Mapping(null, { size });
  }

  /** Keeps `mapping` for the next take (its bytes are overwritten then); one is kept at most. */
  give(mapping: Mapping): void {
    if (this.closed || mapping.closed) {
      void mapping.closeAsync();
      return;
    }
    if (this.kept !== null) void this.kept.closeAsync();
    this.kept = mapping;
  }

  /** Unmaps what is kept (on the libuv pool); later gives are unmapped at once. */
  close(): void {
    this.closed = true;
    if (this.kept !== null) void this.kept.closeAsync();
    this.kept = null;
  }
}
