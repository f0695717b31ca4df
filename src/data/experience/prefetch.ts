/**
 * Prefetch: assembles the next batch while the trainer trains on the current one, so that
 * sample() of a ready batch returns at once. One batch is kept ready. With 'after-release', the
 * next assembly waits until the trainer releases the batch it was handed (into that memory), or
 * asks for the next one without releasing it.
 */
import type { Logger } from '../../common/logger.js';
import { delay } from '../../common/concurrency.js';
import type { ChangeNotifier } from '../waiter.js';
import { RecordsMissing, type Assembled, type BatchAssembler, type Holding, type Picked } from './batch-assembly.js';
import type { BufferBooks } from './buffer-books.js';
import type { ReadActivity } from './read-activity.js';

export interface PrefetchOptions {
  books: BufferBooks;
  assembler: BatchAssembler;
  /** Chooses and reserves the next batch's entries, or undefined when not possible yet (never throws). */
  pick: () => Picked | undefined;
  closed: () => boolean;
  reads: ReadActivity;
  changed: ChangeNotifier;
  logger: Logger;
}

export class Prefetch {
  private readonly ready: Assembled[] = [];
  /**
   * prefetch 'after-release': the batch handed over last, until the trainer releases it (its
   * release starts the next assembly: a read about to start, see ReadActivity).
   */
  private awaitingRelease: { holding: Holding; endRead: () => void } | undefined;
  private loop: Promise<void> = Promise.resolve();

  constructor(private readonly options: PrefetchOptions) {}

  /** Batches assembled and not handed over yet. */
  get readyCount(): number {
    return this.ready.length;
  }

  /** A handed-over batch holds the next assembly back ('after-release'). */
  get awaiting(): boolean {
    return this.awaitingRelease !== undefined;
  }

  start(): void {
    this.loop = this.run();
  }

  /** The next assembled batch, if one is ready. */
  take(): Assembled | undefined {
    return this.ready.shift();
  }

  /** 'after-release': the next assembly waits until `holding` is released. */
  awaitRelease(holding: Holding): void {
    this.awaitingRelease = { holding, endRead: this.options.reads.begin() };
  }

  /** The trainer released a batch's memory: the next assembly may start if it waited for that one. */
  released(holding: Holding): void {
    if (this.awaitingRelease?.holding === holding) this.stopAwaitingRelease();
  }

  /** The handed-over batch no longer holds back the next assembly: the prefetch loop may start it. */
  stopAwaitingRelease(): void {
    const awaiting = this.awaitingRelease;
    if (!awaiting) return;
    this.awaitingRelease = undefined;
    awaiting.endRead();
    this.options.changed.notify();
  }

  /** Waits for the loop to end (the sampler is closed), then lets go of the ready batches. */
  async close(): Promise<void> {
    await this.loop;
    for (const a of this.ready.splice(0)) {
      this.options.books.index.release(a.entries);
      // Its memory goes back to the allocator (a shared-memory file is removed, not left behind).
      a.batch.release();
    }
    this.stopAwaitingRelease();
  }

  private async run(): Promise<void> {
    const { books, changed } = this.options;
    while (!this.options.closed()) {
      const picked = this.ready.length === 0 && this.awaitingRelease === undefined ? this.options.pick() : undefined;
      if (!picked) {
        await changed.wait().catch(() => undefined);
        continue;
      }
      try {
        const assembled = await this.options.assembler.assemble(picked, true);
        if (this.options.closed()) books.index.release(picked.entries);
        else this.ready.push(assembled);
      } catch (err) {
        if (!(err instanceof RecordsMissing)) {
          books.index.release(picked.entries);
          books.samples -= picked.entries.length;
          this.options.logger.warn({ err: (err as Error).message }, 'prefetch failed; retrying');
          await delay(200);
        }
      }
      changed.notify();
    }
  }
}
