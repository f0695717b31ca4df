/**
 * Per-job quotas of an ActionClient: at most `limit` actions of a job in flight from this client;
 * a further submission waits its turn (first come, first served). The kinds' own caps
 * (max_ack_pending) bound what all jobs together run; quotas keep one job from filling a kind's
 * queue ahead of the others that share the pool. They are per client: a job of R rollouts that
 * may run Q actions gives each rollout's client Q / R.
 */
export class JobQuotas {
  private readonly inFlight = new Map<string, number>();
  private readonly waiting = new Map<string, Array<() => void>>();

  constructor(
    private readonly limits: ReadonlyMap<string, number>,
    private readonly defaultLimit: number | undefined,
  ) {}

  /**
   * Takes a place for one more action of the job if there is one now (nobody waits then: a
   * place that frees passes to the first waiting); false otherwise. The path of every action
   * that does not wait, without a promise.
   */
  tryAcquire(job: string): boolean {
    const limit = this.limits.get(job) ?? this.defaultLimit;
    const n = this.inFlight.get(job) ?? 0;
    if (limit !== undefined && n >= limit) return false;
    this.inFlight.set(job, n + 1);
    return true;
  }

  /** Resolves when the job may start one more action. */
  acquire(job: string): Promise<void> {
    if (this.tryAcquire(job)) return Promise.resolve();
    return new Promise((resolve) => {
      const queue = this.waiting.get(job) ?? [];
      queue.push(resolve);
      this.waiting.set(job, queue);
    });
  }

  /** One action of the job ended: the next waiting one takes its place. */
  release(job: string): void {
    const next = this.waiting.get(job)?.shift();
    if (next) {
      next(); // the slot passes on: in-flight count unchanged
      return;
    }
    const n = (this.inFlight.get(job) ?? 1) - 1;
    if (n <= 0) this.inFlight.delete(job);
    else this.inFlight.set(job, n);
  }

  waitingCount(job: string): number {
    return this.waiting.get(job)?.length ?? 0;
  }
}
