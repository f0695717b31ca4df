/**
 * The sampler's in-memory index of the buffer: entries in stream order (oldest first), by id,
 * by group, with item and byte totals, and the set reserved by a batch being prefetched.
 */
import type { BufferEntry, GroupState } from './entry.js';

export class BufferIndex {
  private readonly bySeq = new Map<number, BufferEntry>();
  private readonly byId = new Map<string, BufferEntry>();
  readonly groups = new Map<string, GroupState>();
  private readonly reserved = new Set<number>();
  /** Indexed entries whose payload is in chunks (claim check). */
  private readonly chunked = new Set<BufferEntry>();
  bytes = 0;

  get size(): number {
    return this.bySeq.size;
  }

  /** False when the id (or the group slot) is already indexed. */
  add(e: BufferEntry): boolean {
    if (this.byId.has(e.id)) return false;
    let g = this.groups.get(e.groupId);
    if (!g) {
      g = { size: e.groupSize, members: new Map() };
      this.groups.set(e.groupId, g);
    }
    if (g.members.has(e.sampleIndex) || g.size !== e.groupSize) return false;
    g.members.set(e.sampleIndex, e);
    this.bySeq.set(e.seq, e);
    this.byId.set(e.id, e);
    if (e.chunkSeqs.length > 0) this.chunked.add(e);
    this.bytes += e.bytes;
    return true;
  }

  remove(e: BufferEntry): void {
    if (!this.bySeq.delete(e.seq)) return;
    this.byId.delete(e.id);
    this.chunked.delete(e);
    this.reserved.delete(e.seq);
    this.bytes -= e.bytes;
    const g = this.groups.get(e.groupId);
    g?.members.delete(e.sampleIndex);
    if (g && g.members.size === 0) this.groups.delete(e.groupId);
  }

  /** Whether this very entry is indexed (not removed, not replaced). */
  holds(e: BufferEntry): boolean {
    return this.bySeq.get(e.seq) === e;
  }

  get(id: string): BufferEntry | undefined {
    return this.byId.get(id);
  }

  /** The oldest sequence still indexed, or undefined when empty. */
  firstSeq(): number | undefined {
    return this.bySeq.keys().next().value;
  }

  /** The oldest chunk sequence of an indexed entry, or undefined when none has chunks. */
  oldestChunk(): number | undefined {
    let min: number | undefined;
    for (const e of this.chunked) for (const c of e.chunkSeqs) if (min === undefined || c < min) min = c;
    return min;
  }

  reserve(entries: readonly BufferEntry[]): void {
    for (const e of entries) this.reserved.add(e.seq);
  }

  release(entries: readonly BufferEntry[]): void {
    for (const e of entries) this.reserved.delete(e.seq);
  }

  isReserved(e: BufferEntry): boolean {
    return this.reserved.has(e.seq);
  }

  get reservedCount(): number {
    return this.reserved.size;
  }

  /** All entries, oldest first. */
  all(): BufferEntry[] {
    return [...this.bySeq.values()];
  }

  /** Entries a new batch may take (not reserved), oldest first. */
  candidates(): BufferEntry[] {
    const out: BufferEntry[] = [];
    for (const e of this.bySeq.values()) if (!this.reserved.has(e.seq)) out.push(e);
    return out;
  }
}
