/**
 * The completed trajectories waiting for the trainer, in completion order: the paper's and the
 * project's default strategy (`fifo`, src/data/experience/strategies/) takes the oldest first, so
 * a batch is the head of this queue. A ring of ids that doubles, since 100 steps of the 1,024-GPU
 * scenario pass about 10^6 ids through it.
 *
 * Not yet driven through the real strategies (`uniform`, `groups`, `maxStaleness`): that needs the
 * design's refactor 7 (a pure strategyContext) and BufferIndex entries; fifo's selection is this queue.
 */
export class BatchBuffer {
  private ring = new Int32Array(1024);
  private head = 0;
  private length = 0;

  get size(): number {
    return this.length;
  }

  push(id: number): void {
    if (this.length === this.ring.length) this.grow();
    this.ring[(this.head + this.length) % this.ring.length] = id;
    this.length++;
  }

  /** Removes and returns the `count` oldest ids (count <= size). */
  take(count: number): Int32Array {
    const out = new Int32Array(count);
    for (let i = 0; i < count; i++) {
      out[i] = this.ring[this.head]!;
      this.head = (this.head + 1) % this.ring.length;
    }
    this.length -= count;
    return out;
  }

  private grow(): void {
    const next = new Int32Array(this.ring.length * 2);
    for (let i = 0; i < this.length; i++) next[i] = this.ring[(this.head + i) % this.ring.length]!;
    this.ring = next;
    this.head = 0;
  }
}
