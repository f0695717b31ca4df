/**
 * A doubly linked list threaded through the requests themselves (their prev/next fields): the
 * engine's running requests in admission order and its FCFS waiting queue. Every operation the
 * engine needs is O(1): append (admission), take from either end (preemption takes the newest
 * running, admission the oldest waiting), put back at the front (a preempted request waits ahead
 * of everything newer), and unlink from the middle (a finish, a repack-out). Arrays would make
 * the last two O(n) per request, which a 1,024-request engine pays millions of times.
 */
import type { EngineRequest } from './request.js';

export class RequestList {
  private first: EngineRequest | null = null;
  private last: EngineRequest | null = null;
  private count = 0;

  get size(): number {
    return this.count;
  }

  get head(): EngineRequest | null {
    return this.first;
  }

  get tail(): EngineRequest | null {
    return this.last;
  }

  pushBack(r: EngineRequest): void {
    r.prev = this.last;
    r.next = null;
    if (this.last) this.last.next = r;
    else this.first = r;
    this.last = r;
    this.count++;
  }

  pushFront(r: EngineRequest): void {
    r.next = this.first;
    r.prev = null;
    if (this.first) this.first.prev = r;
    else this.last = r;
    this.first = r;
    this.count++;
  }

  /**
   * Puts `r` behind every request of its priority or higher, ahead of every lower one (a waiting
   * queue ordered by priority, first come first served within one). Walks from the tail: O(1)
   * when every priority is equal (the FCFS engine), O(n) at worst.
   */
  insertByPriority(r: EngineRequest): void {
    let after = this.last;
    while (after !== null && after.priority < r.priority) after = after.prev;
    if (after === null) {
      this.pushFront(r);
      return;
    }
    r.prev = after;
    r.next = after.next;
    if (after.next) after.next.prev = r;
    else this.last = r;
    after.next = r;
    this.count++;
  }

  /**
   * Puts `r` ahead of every request of its priority or lower, behind every higher one (a
   * preempted request back in a queue ordered by priority). pushFront when every priority is equal.
   */
  insertAheadByPriority(r: EngineRequest): void {
    let before = this.first;
    while (before !== null && before.priority > r.priority) before = before.next;
    if (before === null) {
      this.pushBack(r);
      return;
    }
    r.next = before;
    r.prev = before.prev;
    if (before.prev) before.prev.next = r;
    else this.first = r;
    before.prev = r;
    this.count++;
  }

  /** Unlinks `r`, which must be in this list. */
  remove(r: EngineRequest): void {
    if (r.prev) r.prev.next = r.next;
    else this.first = r.next;
    if (r.next) r.next.prev = r.prev;
    else this.last = r.prev;
    r.prev = null;
    r.next = null;
    this.count--;
  }

  popFront(): EngineRequest | null {
    const r = this.first;
    if (r) this.remove(r);
    return r;
  }

  popBack(): EngineRequest | null {
    const r = this.last;
    if (r) this.remove(r);
    return r;
  }

  /** From head to tail. */
  *[Symbol.iterator](): IterableIterator<EngineRequest> {
    for (let r = this.first; r; r = r.next) yield r;
  }
}
