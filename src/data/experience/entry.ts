/** What the sampler keeps per stored trajectory: metadata only, never the payload. */
import type { RecordMeta } from '../codec/record-meta.js';

export interface BufferEntry extends Readonly<Omit<RecordMeta, 'v' | 'priority'>> {
  /** Stream sequence of the record message. */
  readonly seq: number;
  /** Mutable through Sampler.updatePriority (prioritized strategy). */
  priority: number;
  timesSampled: number;
  /** When the sampler indexed it (epoch ms). */
  readonly indexedAt: number;
}

/**
 * An index entry from a record's metadata. Every entry is built by this one literal, so all
 * share one hidden class and the loops over thousands of them (strategies, batch hand-over,
 * eviction) stay monomorphic; an object spread would give entries shapes that V8 cannot share,
 * and each field access in such a loop costs about a microsecond instead of a nanosecond.
 */
export function entryOf(seq: number, m: RecordMeta, indexedAt: number): BufferEntry {
  return {
    id: m.id,
    promptId: m.promptId,
    groupId: m.groupId,
    sampleIndex: m.sampleIndex,
    groupSize: m.groupSize,
    weightVersion: m.weightVersion,
    reward: m.reward,
    tokenCount: m.tokenCount,
    promptLength: m.promptLength,
    responseLength: m.responseLength,
    createdAt: m.createdAt,
    completedAt: m.completedAt,
    rolloutId: m.rolloutId,
    info: m.info,
    segments: m.segments,
    bytes: m.bytes,
    chunkSeqs: m.chunkSeqs,
    seq,
    priority: m.priority,
    timesSampled: 0,
    indexedAt,
  };
}

/** A GRPO group as the index sees it. */
export interface GroupState {
  readonly size: number;
  /** Entries of the group currently in the buffer, by sample index. */
  readonly members: Map<number, BufferEntry>;
}
