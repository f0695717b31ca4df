/**
 * The sampler's reads of the stream that are under way or about to start (a batch being
 * assembled; with prefetch 'after-release', a handed-over batch whose release starts the next
 * one). Background deletions wait for a quiet moment: a purge or a burst of deletes makes
 * nats-server stall the fetches of a batch being assembled while it runs, and between two
 * assemblies (the trainer's step) the server has nothing else to do.
 */
export class ReadActivity {
  private active = 0;
  private readonly onQuiet = new Set<() => void>();

  get quiet(): boolean {
    return this.active === 0;
  }

  /** Marks a read as under way; the returned function ends it (calling it again does nothing). */
  begin(): () => void {
    this.active++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      if (--this.active === 0) for (const wake of [...this.onQuiet]) wake();
    };
  }

  /**
   * Resolves once no read is under way, or after `maxMs` whatever happens, or when `hurry` is
   * called. Quiet must still hold on the next turn of the event loop: the code that ends a read
   * or queues a deletion (the release of a batch, the hand-over of the next) often starts the
   * next assembly right after, on the same turn.
   */
  whenQuiet(maxMs: number): { done: Promise<void>; hurry: () => void } {
    let hurry!: () => void;
    const done = new Promise<void>((resolve) => {
      const finish = (): void => {
        clearTimeout(timer);
        this.onQuiet.delete(check);
        resolve();
      };
      const check = (): void => {
        setImmediate(() => {
          if (this.quiet) finish();
        });
      };
      hurry = finish;
      const timer = setTimeout(finish, maxMs);
      this.onQuiet.add(check);
      if (this.quiet) check();
    });
    return { done, hurry };
  }
}
