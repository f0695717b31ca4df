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

/** A GRPO group as the index sees it. */
export interface GroupState {
  readonly size: number;
  /** Entries of the group currently in the buffer, by sample index. */
  readonly members: Map<number, BufferEntry>;
}
