/**
 * The running requests of a LeapEngine by the decode step at which each finishes, earliest
 * first, ties in admission order (the order in which EngineCore finishes the requests of one
 * step). Its minimum is how far the engine can leap before a finish; an indexed binary heap
 * (each request knows its slot) so that preemption and repack-out remove from the middle in
 * O(log n) without stale entries piling up.
 */
import type { EngineRequest } from './request.js';

export class FinishHeap {
  private readonly items: EngineRequest[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): EngineRequest | undefined {
    return this.items[0];
  }

  push(r: EngineRequest): void {
    r.heapIndex = this.items.length;
    this.items.push(r);
    this.up(r.heapIndex);
  }

  pop(): EngineRequest | undefined {
    const top = this.items[0];
    if (top) this.remove(top);
    return top;
  }

  /** Takes out `r`, which must be in this heap. */
  remove(r: EngineRequest): void {
    const at = r.heapIndex;
    const last = this.items.pop()!;
    r.heapIndex = -1;
    if (last === r) return;
    this.items[at] = last;
    last.heapIndex = at;
    // The moved entry may belong above or below its new slot.
    this.up(at);
    this.down(last.heapIndex);
  }

  private less(a: EngineRequest, b: EngineRequest): boolean {
    return a.finishStep < b.finishStep || (a.finishStep === b.finishStep && a.admitSeq < b.admitSeq);
  }

  private up(i: number): void {
    const items = this.items;
    const r = items[i]!;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent]!;
      if (!this.less(r, p)) break;
      items[i] = p;
      p.heapIndex = i;
      i = parent;
    }
    items[i] = r;
    r.heapIndex = i;
  }

  private down(i: number): void {
    const items = this.items;
    const n = items.length;
    const r = items[i]!;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && this.less(items[right]!, items[left]!) ? right : left;
      const c = items[child]!;
      if (!this.less(c, r)) break;
      items[i] = c;
      c.heapIndex = i;
      i = child;
    }
    items[i] = r;
    r.heapIndex = i;
  }
}
