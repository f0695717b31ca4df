/**
 * Spare segments: files in the shm directory whose pages are already allocated, kept so that the
 * next version's segment costs a rename instead of a fresh allocation.
 *
 * A new segment on tmpfs costs the allocation of every page (`posix_fallocate`) and their
 * zeroing at first touch: more CPU than receiving the bytes over a fast link (on 2 cores a
 * loopback hop ran at 0.5 x the speed of one into a reused segment), and several times that
 * on a VM whose host backs guest memory on first touch. RL training publishes a version of the same size every
 * step, so the relay keeps the file of a retired version (or prepares one while idle) and
 * renames it into place for the next: the new version is written over the old bytes, which
 * were never visible once the version retired (only complete, verified segments are served).
 *
 * The pool never raises the relay's peak memory: a spare is the room the next version takes
 * while it arrives anyway. It counts against the memory budget and is the first thing dropped
 * when a publication needs room. A reader that keeps using a mapping after releasing its lease
 * would now see a later version's bytes instead of the retired ones: leases are the contract
 * (`--spare-segments 0` turns recycling off).
 */
import { chmod, rename, stat, truncate, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import { Mapping, createSegmentAsync } from '../native/index.js';

export const SPARE_SUFFIX = '.segment.spare';
/** Pages of a prepared spare are touched this many bytes at a time. */
const TOUCH_STEP = 64 * 1024 * 1024;

export interface SpareOptions {
  dir: string;
  /** Spares kept at most; 0 disables recycling. */
  capacity: number;
  fileMode: number;
  log: Logger;
  /** Counts prepared, kept (from a retired version), reused and dropped spares. */
  events: Counter<'event'>;
}

interface Spare {
  path: string;
  size: number;
  /** False while the file is still being renamed into the pool. */
  ready: boolean;
  /** True while a prepared spare's pages are still being touched. */
  warming?: boolean;
}

export class SparePool {
  private readonly spares: Spare[] = [];
  /** Bytes of a spare being allocated right now (counted as held, so the budget stays true). */
  private preparingBytes = 0;
  private counter = 0;

  constructor(private readonly options: SpareOptions) {}

  static isSpareName(name: string): boolean {
    return name.endsWith(SPARE_SUFFIX);
  }

  get count(): number {
    return this.spares.length;
  }

  /** Spares whose pages are still being touched (taking one now saves less). */
  get warming(): number {
    return this.spares.filter((s) => s.warming).length;
  }

  /** Bytes held by spares, including one being prepared. */
  get bytes(): number {
    return this.spares.reduce((s, x) => s + x.size, this.preparingBytes);
  }

  private get full(): boolean {
    return this.spares.length + (this.preparingBytes > 0 ? 1 : 0) >= this.options.capacity;
  }

  /** True when a spare of at least `size` bytes is there (or on its way). */
  covers(size: number): boolean {
    return this.preparingBytes >= size || this.spares.some((s) => s.size >= size);
  }

  private nextPath(): string {
    return join(this.options.dir, `spare-${process.pid}-${++this.counter}${SPARE_SUFFIX}`);
  }

  /**
   * Takes the smallest ready spare of at least `size` bytes out of the pool (synchronously, so
   * that two allocations never take the same file); null when there is none.
   */
  claim(size: number): Spare | null {
    let best = -1;
    this.spares.forEach((s, i) => {
      if (s.ready && s.size >= size && (best < 0 || s.size < this.spares[best]!.size)) best = i;
    });
    return best < 0 ? null : this.spares.splice(best, 1)[0]!;
  }

  /**
   * Moves a claimed spare to `path`, cut to `size` and writable. False when that failed (the
   * spare is gone and the caller allocates a new segment).
   */
  async moveInto(spare: Spare, path: string, size: number): Promise<boolean> {
    try {
      await rename(spare.path, path);
      if (spare.size > size) await truncate(path, size);
      await chmod(path, this.options.fileMode);
      this.options.events.inc({ event: 'reused' });
      return true;
    } catch (err) {
      this.options.log.warn({ err, spare: spare.path }, 'could not reuse a spare segment; allocating a new one');
      await unlink(spare.path).catch(() => undefined);
      await unlink(path).catch(() => undefined);
      return false;
    }
  }

  /**
   * Keeps the file of a retired version as a spare (renamed out of the served names). False
   * when the pool is full or the rename failed: the caller unlinks the file.
   */
  async keep(path: string, size: number): Promise<boolean> {
    if (this.full) return false;
    // In the pool (and counted) before the rename, so that the relay's memory never looks smaller than it is.
    const spare: Spare = { path: this.nextPath(), size, ready: false };
    this.spares.push(spare);
    try {
      await rename(path, spare.path);
    } catch {
      this.spares.splice(this.spares.indexOf(spare), 1);
      return false;
    }
    spare.ready = true;
    this.options.events.inc({ event: 'kept' });
    return true;
  }

  /**
   * Allocates a spare of `size` bytes, unless one that large exists or the pool is full, and
   * touches its pages: fallocate on tmpfs reserves pages but leaves them to be zeroed at first
   * touch, which the next version would otherwise pay as it arrives. The touching runs in steps,
   * waits while `busy()` (it must not compete with a transfer) and stops when a version claims
   * the spare first (it takes the file as it is; its own pre-faulting does the rest).
   */
  async prepare(size: number, busy: () => boolean): Promise<void> {
    if (this.full || this.covers(size)) return;
    const path = this.nextPath();
    this.preparingBytes = size;
    let spare: Spare;
    try {
      await createSegmentAsync(path, size, this.options.fileMode);
      spare = { path, size, ready: true, warming: true };
      this.spares.push(spare);
    } catch (err) {
      // Only an optimisation: the next version allocates its own segment.
      this.options.log.warn({ err, size }, 'could not allocate a spare segment');
      return;
    } finally {
      this.preparingBytes = 0;
    }
    this.options.events.inc({ event: 'prepared' });
    let mapping: Mapping | null = null;
    try {
      mapping = new Mapping(path, { writable: true });
      for (let at = 0; at < size && this.spares.includes(spare);) {
        if (busy()) {
          await new Promise((r) => setTimeout(r, 100));
          continue;
        }
        const n = Math.min(TOUCH_STEP, size - at);
        await mapping.populate(at, n, true);
        at += n;
      }
    } catch (err) {
      this.options.log.debug({ err, size }, 'could not touch the pages of a spare segment');
    } finally {
      spare.warming = false;
      // Its page tables are a gigabyte's worth of written entries: unmapped on the pool.
      void mapping?.closeAsync();
    }
  }

  /** Adopts a spare found in the directory at start-up (pages survive a relay restart). */
  async adopt(name: string): Promise<void> {
    const path = join(this.options.dir, name);
    const size = await stat(path).then(
      (s) => s.size,
      () => 0,
    );
    if (size > 0 && !this.full) {
      this.spares.push({ path, size, ready: true });
      return;
    }
    await unlink(path).catch(() => undefined);
  }

  /** Unlinks every spare: their memory is needed. Returns the bytes given back. */
  dropAll(): number {
    const dropped = this.spares.filter((s) => s.ready);
    for (const s of dropped) this.spares.splice(this.spares.indexOf(s), 1);
    for (const s of dropped) {
      void unlink(s.path).catch(() => undefined);
      this.options.events.inc({ event: 'dropped' });
    }
    return dropped.reduce((sum, s) => sum + s.size, 0);
  }
}
