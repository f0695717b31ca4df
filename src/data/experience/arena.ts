/**
 * The memory of one batch: a single ArrayBuffer of exactly the batch's payload bytes, handed
 * out front to back (a bump allocator), so that a batch costs its own bytes and nothing more.
 *
 * The first write to each page of a fresh buffer is a page fault: about 0.5 s of kernel time per
 * GiB on an idle machine and several times that on a VM whose host backs guest memory on first
 * touch. Paid on the JS thread, that is more than the copy itself and as much as receiving the
 * bytes. So a large arena is populated ahead of the writes on the libuv pool (a read() of
 * /dev/zero into the next few MiB, two steps in flight), and a writer waits only when it catches
 * up with the populated prefix. Where /dev/zero cannot be opened the pages fault in place.
 *
 * An arena can also be built over the buffer of a batch the trainer released (arena-pool.ts),
 * possibly larger than needed. Its pages are resident already, so it skips population. It is
 * not zeroed either: the loader overwrites every byte of every payload it hands out, and a
 * batch with a payload that did not arrive whole is never handed out. The same holds for
 * memory an allocator made resident itself (arena-allocator.ts: a shared-memory file reserved
 * with fallocate).
 */
import { openSync, read } from 'node:fs';

/** Below this size the pages are left to fault in place (a thread hop costs more). */
const POPULATE_MIN_BYTES = 32 * 1024 * 1024;
const STEP = 8 * 1024 * 1024;
/** How far ahead of the write position population runs. */
const AHEAD = 64 * 1024 * 1024;
const IN_FLIGHT = 2;

let zeroFd: number | null | undefined;
/** One descriptor of /dev/zero for the process, opened on first use (null where there is none). */
function devZero(): number | null {
  if (zeroFd === undefined) {
    try {
      zeroFd = openSync('/dev/zero', 'r');
    } catch {
      zeroFd = null;
    }
  }
  return zeroFd;
}

export class Arena {
  readonly buffer: ArrayBuffer;
  private used = 0;
  /** [0, populated) is populated; [populated, requested) has reads in flight or queued. */
  private populated: number;
  private requested: number;
  private inFlight = 0;
  private readonly done = new Map<number, number>();
  private readonly waiters: Array<{ end: number; wake: () => void }> = [];
  /** Set when population ends early (a failed read, or stop()): pages then fault in place. */
  private populating = true;
  private readonly idle: Array<() => void> = [];
  private readonly fd: number | null;

  /**
   * `buffer`: at least `size` bytes, written over as they are. `populate`: its pages are not
   * resident yet (fresh private memory), so a large arena populates them ahead of the writes.
   */
  constructor(
    readonly size: number,
    buffer: ArrayBuffer,
    populate: boolean,
  ) {
    this.buffer = buffer;
    this.fd = populate && size >= POPULATE_MIN_BYTES ? devZero() : null;
    this.populated = this.fd === null ? size : 0;
    this.requested = this.populated;
    this.pump(0);
  }

  /** Bytes handed out so far. */
  get allocated(): number {
    return this.used;
  }

  /**
   * The next `bytes` of the arena, or undefined when they would not fit. The returned range is
   * safe to write once `ready(range)` is true (or `whenReady(range)` resolved).
   */
  allocate(bytes: number): number | undefined {
    if (bytes > this.size - this.used) return undefined;
    const at = this.used;
    this.used += bytes;
    this.pump(this.used);
    return at;
  }

  /** True when [0, end) is populated and may be written. */
  ready(end: number): boolean {
    return end <= this.populated;
  }

  whenReady(end: number): Promise<void> {
    if (end <= this.populated) return Promise.resolve();
    return new Promise((wake) => this.waiters.push({ end, wake }));
  }

  /**
   * Ends population and resolves once no read is in flight, after which nothing writes into the
   * buffer behind its next owner's back (a batch given up half loaded goes back to the pool).
   */
  stop(): Promise<void> {
    this.endPopulation();
    if (this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  /** Issues population reads up to AHEAD bytes past `position`, at most IN_FLIGHT at a time. */
  private pump(position: number): void {
    const fd = this.fd;
    if (fd === null || !this.populating) return;
    const target = Math.min(this.size, position + AHEAD);
    while (this.inFlight < IN_FLIGHT && this.requested < target) {
      const at = this.requested;
      const len = Math.min(STEP, this.size - at);
      this.requested += len;
      this.inFlight++;
      this.zero(fd, at, len);
    }
  }

  /** Reads zeros into [at, at + len); `from` bytes of it are already done (short reads). */
  private zero(fd: number, at: number, len: number, from = 0): void {
    read(fd, new Uint8Array(this.buffer, at + from, len - from), 0, len - from, null, (err, n) => {
      if (!err && n > 0 && from + n < len) {
        this.zero(fd, at, len, from + n);
        return;
      }
      this.inFlight--;
      // Population is only an optimisation: after a failed read, pages fault in place.
      if (err || n === 0) this.endPopulation();
      else if (this.populating) {
        this.done.set(at, len);
        let next = this.done.get(this.populated);
        while (next !== undefined) {
          this.done.delete(this.populated);
          this.populated += next;
          next = this.done.get(this.populated);
        }
      }
      this.wakeWriters();
      if (this.inFlight === 0) for (const resolve of this.idle.splice(0)) resolve();
      this.pump(this.used);
    });
  }

  private endPopulation(): void {
    this.populating = false;
    this.populated = this.size;
    this.wakeWriters();
  }

  private wakeWriters(): void {
    for (let i = this.waiters.length - 1; i >= 0; i--) {
      const w = this.waiters[i]!;
      if (w.end <= this.populated) {
        this.waiters.splice(i, 1);
        w.wake();
      }
    }
  }
}
