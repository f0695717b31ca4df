/**
 * The page's side of `GET /events`: an EventSource that takes the manager's snapshot, then
 * applies each delta with applyDelta (model.ts, the same code as the manager's). A delta that
 * does not follow the page's state (ERR_DASHBOARD_DELTA: an update was missed) or that cannot be
 * read closes the stream and opens a new one, which starts with a snapshot. A stream the browser
 * gave up on (the manager refused it, 503 with ERR_DASHBOARD_FULL, or stopped) is opened again
 * after a pause; while the browser retries on its own the page says it is reconnecting.
 */
import { applyDelta, DASHBOARD_MODEL_VERSION, type DashboardDelta, type DashboardState } from '../model.js';

export type StreamState = 'connecting' | 'live' | 'reconnecting';

export interface ConnectionHandlers {
  /** A new state: from a snapshot (`delta` null) or a delta that arrived at `arrivedAt` (performance.now()). */
  state(state: DashboardState, delta: DashboardDelta | null, arrivedAt: number): void;
  stream(state: StreamState): void;
}

/** Pause before opening a stream again once the browser gave up on one (ms). */
const REOPEN_MS = 2000;

export class DashboardConnection {
  private source: EventSource | null = null;
  private current: DashboardState | null = null;
  private reopenTimer: ReturnType<typeof setTimeout> | null = null;
  /** Streams opened again because a delta did not follow (for the tests and the bench). */
  resyncs = 0;

  constructor(
    private readonly url: string,
    private readonly handlers: ConnectionHandlers,
  ) {}

  open(): void {
    this.source?.close();
    this.handlers.stream(this.current ? 'reconnecting' : 'connecting');
    const source = new EventSource(this.url);
    this.source = source;
    source.addEventListener('snapshot', (e) => this.onSnapshot(e as MessageEvent<string>));
    source.addEventListener('delta', (e) => this.onDelta(e as MessageEvent<string>));
    source.addEventListener('error', () => {
      if (source !== this.source) return;
      this.handlers.stream('reconnecting');
      // CLOSED: the browser will not retry (an answer other than 200 text/event-stream).
      if (source.readyState === EventSource.CLOSED) this.reopenLater();
    });
  }

  get state(): DashboardState | null {
    return this.current;
  }

  private onSnapshot(e: MessageEvent<string>): void {
    const arrivedAt = performance.now();
    const state = JSON.parse(e.data) as DashboardState;
    // Another model version: the manager was upgraded, and so were its assets.
    if ((state.v as number) !== DASHBOARD_MODEL_VERSION) {
      location.reload();
      return;
    }
    this.current = state;
    this.handlers.stream('live');
    this.handlers.state(state, null, arrivedAt);
  }

  private onDelta(e: MessageEvent<string>): void {
    const arrivedAt = performance.now();
    if (!this.current) return;
    let next: DashboardState;
    try {
      const delta = JSON.parse(e.data) as DashboardDelta;
      next = applyDelta(this.current, delta);
      this.current = next;
      this.handlers.stream('live');
      this.handlers.state(next, delta, arrivedAt);
    } catch (err) {
      // ERR_DASHBOARD_DELTA or a delta that cannot be read: start again from a snapshot.
      console.warn('dashboard: reconnecting for a snapshot', err);
      this.resyncs++;
      this.open();
    }
  }

  private reopenLater(): void {
    if (this.reopenTimer !== null) return;
    this.reopenTimer = setTimeout(() => {
      this.reopenTimer = null;
      this.open();
    }, REOPEN_MS);
  }
}
