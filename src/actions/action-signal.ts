/**
 * The abort signal of one running action (ActionContext.signal), made only when its handler reads
 * it. Most tools never do (the no-op and lookup tools answer at once), and an AbortController
 * with a listener on the worker's stop was a few microseconds of every action on the actions
 * bench's profile. A signal read after the abort is born aborted, with the same reason.
 */
export class ActionSignal {
  private controller: AbortController | undefined;
  private reason: Error | undefined;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.reason) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  get aborted(): boolean {
    return this.reason !== undefined;
  }

  /** Aborts the signal (the first reason stays, as AbortController keeps it). */
  abort(reason: Error): void {
    if (this.reason) return;
    this.reason = reason;
    this.controller?.abort(reason);
  }
}
