/**
 * The completed trajectories waiting for the simulated trainer, sampled through the project's
 * real strategies (src/data/experience/strategies/: fifo, uniform, whole groups, staleness-bounded
 * drop), over the sampler's own index (BufferIndex) of entries made by `entryOf`, with the context
 * built by the same `strategyContext` the sampler's books use. A scenario's `trainer.strategy`
 * and `maxStaleness` name the strategy as sim-trainer's flags do (`strategyByName`).
 *
 * Entries dropped by the strategy (too stale) leave the index and are reported to `onDrop`, so
 * the ledger counts them dropped: consumed or dropped, never lost. A batch is taken whole, each
 * trajectory sampled once (the sampler's default maxTimesSampled = 1).
 */
import { RECORD_VERSION } from '../../data/codec/record-meta.js';
import { BufferIndex } from '../../data/experience/buffer-index.js';
import { entryOf, type BufferEntry } from '../../data/experience/entry.js';
import { strategyContext } from '../../data/experience/strategies/context.js';
import type { SamplingStrategy } from '../../data/experience/strategies/strategy.js';

/** What the simulator knows of a completed trajectory. */
export interface CompletedTrajectory {
  /** The simulator's trajectory number (the ledger's id). */
  id: number;
  /** Its prompt (its GRPO group) and its place in the group. */
  prompt: number;
  sampleIndex: number;
  groupSize: number;
  weightVersion: number;
  promptTokens: number;
  responseTokens: number;
  /** Virtual ms. */
  completedAtMs: number;
}

export class StrategyBuffer {
  private readonly index = new BufferIndex();
  /** Completion order: the stream sequence a real buffer would have given the record. */
  private seq = 0;

  constructor(
    private readonly strategy: SamplingStrategy,
    private readonly random: () => number,
    private readonly onDrop: (id: number) => void,
  ) {}

  get size(): number {
    return this.index.size;
  }

  push(t: CompletedTrajectory): void {
    const seq = ++this.seq;
    const entry = entryOf(
      seq,
      {
        v: RECORD_VERSION,
        id: String(t.id),
        promptId: String(t.prompt),
        groupId: String(t.prompt),
        sampleIndex: t.sampleIndex,
        groupSize: t.groupSize,
        weightVersion: t.weightVersion,
        reward: 0,
        tokenCount: t.promptTokens + t.responseTokens,
        promptLength: t.promptTokens,
        responseLength: t.responseTokens,
        createdAt: t.completedAtMs,
        completedAt: t.completedAtMs,
        priority: 1,
        bytes: 0,
        chunkSeqs: [],
      },
      t.completedAtMs,
    );
    // Ids are unique (the ledger has checked the completion), so the index always takes it.
    this.index.add(entry);
  }

  /**
   * The strategy's next batch of `count` at `trainerVersion`, taken out of the buffer, or null
   * ("not yet": the trainer asks again when more has completed). Fewer than `count` candidates
   * can never make a batch of `count` distinct entries, so the strategy is not asked then.
   */
  take(count: number, trainerVersion: number): Int32Array | null {
    if (this.index.size < count) return null;
    const dropped: BufferEntry[] = [];
    const ctx = strategyContext(trainerVersion, this.random, this.index.groups, (e) => void dropped.push(e));
    const chosen = this.strategy.select(this.index.candidates(), count, ctx);
    let batch: Int32Array | null = null;
    if (chosen.length === count) {
      batch = new Int32Array(count);
      for (let i = 0; i < count; i++) {
        batch[i] = Number(chosen[i]!.id);
        this.index.remove(chosen[i]!);
      }
    }
    // As the sampler's books: a drop removes only what is still there (not chosen meanwhile).
    for (const e of dropped) {
      if (!this.index.holds(e)) continue;
      this.index.remove(e);
      this.onDrop(Number(e.id));
    }
    return batch;
  }
}
