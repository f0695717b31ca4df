/**
 * The chunk messages of claim-check payloads, as the index feed sees them. A writer publishes a
 * payload's chunks first and its record last (the commit point); the record names the chunks'
 * sequences. A chunk that no record has claimed `orphanAgeMs` after it was stored (server time,
 * measured against the newest message seen, so clocks of other hosts never matter) is an orphan:
 * its writer crashed or gave up mid-write, and no record will ever point to it.
 */
export class ChunkTracker {
  /** Unclaimed chunks: sequence -> server time (ms), in stream order. */
  private readonly unclaimed = new Map<number, number>();
  private newest = 0;

  constructor(private readonly orphanAgeMs: number) {}

  chunk(seq: number, timeMs: number): void {
    this.unclaimed.set(seq, timeMs);
    this.seen(timeMs);
  }

  /** A record arrived: its chunks are accounted for. */
  claim(seqs: readonly number[], timeMs: number): void {
    for (const s of seqs) this.unclaimed.delete(s);
    this.seen(timeMs);
  }

  /** Orphans as of the newest server time seen, oldest first; they are forgotten here. */
  takeOrphans(): number[] {
    const out: number[] = [];
    for (const [seq, t] of this.unclaimed) {
      if (this.newest - t < this.orphanAgeMs) break;
      out.push(seq);
    }
    for (const seq of out) this.unclaimed.delete(seq);
    return out;
  }

  /** The oldest chunk a record may still claim (nothing at or above it may be compacted away). */
  oldestUnclaimed(): number | undefined {
    return this.unclaimed.keys().next().value;
  }

  get size(): number {
    return this.unclaimed.size;
  }

  private seen(timeMs: number): void {
    if (timeMs > this.newest) this.newest = timeMs;
  }
}
