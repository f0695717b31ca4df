/**
 * How long the page takes to show an update: from a delta's arrival to the end of the frame that
 * shows it (a message posted from the frame's callback runs once the frame is done). The last
 * 100 are kept, read by the browser tests and the dashboard bench through `window.laminarDashboard`,
 * with the count of every update timed (so a reader can take the times since its last read).
 * Deltas that arrive while the tab is hidden are not timed (no frame runs until it is shown).
 */
const KEPT = 100;

export class RenderTimings {
  private readonly times: number[] = [];
  /** Updates timed since the page loaded (the kept times are the newest of them). */
  count = 0;
  private readonly channel = new MessageChannel();
  private pending: number[] = [];
  private finishing: number[] = [];

  constructor() {
    this.channel.port1.onmessage = () => {
      const end = performance.now();
      for (const arrived of this.finishing) this.push(end - arrived);
      this.finishing = [];
    };
  }

  /** A delta arrived at `at` (performance.now()). */
  arrived(at: number): void {
    if (!document.hidden) this.pending.push(at);
  }

  /** Called at the end of the frame's rendering: the arrivals it shows finish with this frame. */
  frameRendered(): void {
    if (this.pending.length === 0) return;
    this.finishing.push(...this.pending);
    this.pending = [];
    this.channel.port2.postMessage(null);
  }

  /** The kept times in ms, oldest first. */
  list(): number[] {
    return this.times.slice();
  }

  private push(ms: number): void {
    this.count++;
    this.times.push(ms);
    if (this.times.length > KEPT) this.times.shift();
  }
}
