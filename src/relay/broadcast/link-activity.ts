/**
 * Which transfers on one downstream link have chunks in flight now. A transfer times its hop
 * (outgoing.ts, hopSample) as its own bytes over the time it had chunks in flight: while another
 * transfer sent on the same link at the same time (two models at once, a bf16 version and its
 * FP8 one under `--fp8-broadcast also`), that time carried the other's bytes too, and the hop
 * would tell the chunk-size model (chunking/) a link half as fast as it is. Such a transfer is
 * marked as having shared the link, and its hop is not taken as a measurement.
 */
export interface LinkUser {
  /** Called when another transfer had chunks in flight on the link at the same time. */
  sharedLink(): void;
}

export class LinkActivity {
  private readonly busy = new Set<LinkUser>();

  /** `user` has chunks in flight from now on. */
  started(user: LinkUser): void {
    this.busy.add(user);
    if (this.busy.size > 1) for (const other of this.busy) other.sharedLink();
  }

  /** `user` has nothing in flight any more (its chunks were taken, or it ended). */
  stopped(user: LinkUser): void {
    this.busy.delete(user);
  }
}
