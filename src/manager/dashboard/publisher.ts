/**
 * The dashboard's live updates (docs/design/dashboard.md, "Updates"): every open page holds a
 * server-sent-events response of `GET /events`. A page first gets `event: snapshot` with the
 * whole state; then, while at least one page is open, one timer (1 s) takes the manager's status,
 * builds the next state with the series, the events, the staleness histograms and the actions
 * panel, diffs it
 * against the current one and writes the same bytes, `event: delta`, to every page. The state,
 * the diff and the serialisation are paid once per update whatever the number of pages; a
 * snapshot's JSON is made once per state, so pages opening together cost one. No page open: no
 * timer, no cost.
 *
 * Limits: a page that cannot keep up (more than `maxBufferedBytes` written and not yet taken by
 * its socket) is cut off and counted; its EventSource reconnects and gets a fresh snapshot, so no
 * queue per page grows. At most `maxPages` pages at once: the next one gets 503 with
 * `Retry-After` and ERR_DASHBOARD_FULL (EventSource retries on its own). A page reconnecting
 * always gets a snapshot (`Last-Event-ID` is not read: the manager keeps no deltas). close()
 * ends every stream.
 */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { ErrorCodes } from '../../common/error-codes.js';
import { InvalidInputError } from '../../common/errors.js';
import { sendError } from '../../common/http-answers.js';
import type { HeldStream, HttpExchange } from '../../common/http-server.js';
import type { Logger } from '../../common/logger.js';
import { counter, gauge, histogram } from '../../common/metric-factory.js';
import { watchdog, type Watchdog } from '../../common/watchdog.js';
import type { ManagerStatus } from '../manager-status.js';
import { diffStates } from './diff.js';
import { dashboardState } from './from-status.js';
import type { ActionsPanel, DashboardEvent, DashboardState, SeriesWindow, StalenessCounts } from './model.js';

/** Events a state carries (the page's log); the journal keeps more. */
export const EVENTS_SHOWN = 200;
export const DEFAULT_DASHBOARD_INTERVAL_MS = 1000;
export const DEFAULT_DASHBOARD_PAGES = 32;
/** About a minute of worst-case deltas (16 KB a second). */
export const DEFAULT_MAX_BUFFERED_BYTES = 1 << 20;
/** What a refused page is told to wait, in seconds. */
const RETRY_AFTER_S = 5;
/** What an EventSource waits before reconnecting after its stream ended (ms). */
const RECONNECT_MS = 2000;

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  // Proxies (nginx) would otherwise buffer the stream.
  'x-accel-buffering': 'no',
};

/** Why a page's stream ended: too slow, refused (the limit), it went away, the manager stopping. */
export type PageCloseReason = 'slow' | 'full' | 'left' | 'shutdown';

export interface DashboardPublisherOptions {
  /** The manager's status, taken once per update. */
  status: () => ManagerStatus;
  /** The series window (the series recorder's). */
  series: () => SeriesWindow;
  /** The newest events, oldest first (the journal's). */
  events: () => DashboardEvent[];
  /** The staleness histograms of the window ending at the state's time `t` (the manager's); absent or null: no staleness source. */
  staleness?: (t: number) => StalenessCounts | null;
  /** The actions panel at the state's time `t` (action-pool-watch.ts); absent or null: none (a standby). */
  actions?: (t: number) => ActionsPanel | null;
  /** Where the dashboard's metrics go (the manager's registry). */
  registry: Registry;
  /** Period of the updates while a page is open (default 1 s). */
  intervalMs?: number;
  /** Pages open at once (default 32). */
  maxPages?: number;
  /** Bytes written to a page and not yet taken by its socket beyond which it is cut off (default 1 MiB). */
  maxBufferedBytes?: number;
  logger?: Logger;
  clock?: () => number;
}

interface PublisherMetrics {
  pages: Gauge;
  updates: Counter;
  updateSeconds: Histogram;
  bytes: Counter;
  closed: Counter<'reason'>;
}

export class DashboardPublisher {
  readonly intervalMs: number;
  readonly maxPages: number;
  readonly maxBufferedBytes: number;
  private readonly pages = new Set<HeldStream>();
  /** Why the publisher ended a page's stream (a page ending its own reads as `left`). */
  private readonly ending = new Map<HeldStream, PageCloseReason>();
  private readonly metrics: PublisherMetrics;
  private readonly clock: () => number;
  /** The state the open pages hold (null while none is open). */
  private state: DashboardState | null = null;
  /** The snapshot message of `state`, made at most once per state. */
  private snapshot: Buffer | null = null;
  private seq = 0;
  private timer: Watchdog | null = null;
  private stopped = false;

  constructor(private readonly options: DashboardPublisherOptions) {
    this.intervalMs = positive('dashboard interval', options.intervalMs ?? DEFAULT_DASHBOARD_INTERVAL_MS);
    this.maxPages = positive('dashboard pages', options.maxPages ?? DEFAULT_DASHBOARD_PAGES);
    this.maxBufferedBytes = positive('dashboard buffered bytes', options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES);
    this.clock = options.clock ?? Date.now;
    const registry = options.registry;
    this.metrics = {
      pages: gauge(registry, { name: 'laminar_dashboard_pages', help: 'dashboard pages open (server-sent-event streams of /events)' }),
      updates: counter(registry, {
        name: 'laminar_dashboard_updates_total',
        help: 'dashboard updates made (one per period while a page is open, whatever the number of pages)',
      }),
      updateSeconds: histogram(registry, {
        name: 'laminar_dashboard_update_seconds',
        help: 'time to make one dashboard update: the status, the next state, the diff and its serialisation',
        buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25],
      }),
      bytes: counter(registry, { name: 'laminar_dashboard_bytes_total', help: 'bytes written to dashboard pages (snapshots and updates, every page counted)' }),
      closed: counter(registry, {
        name: 'laminar_dashboard_pages_closed_total',
        help: 'dashboard page streams ended, by reason: slow (cut off, too much unread), full (refused: too many pages), left (the page went away), shutdown',
        labelNames: ['reason'],
      }),
    };
  }

  /** Pages open now. */
  get open(): number {
    return this.pages.size;
  }

  /** Number of the state the pages hold (0 before the first). */
  get currentSeq(): number {
    return this.state?.seq ?? 0;
  }

  /** Serves `GET /events`: refuses the page beyond the limit, else sends the snapshot and keeps the stream for the updates. */
  serve(exchange: HttpExchange): void {
    // A HEAD gets the stream's headers and holds nothing: never refused, never counted.
    if (exchange.head) {
      exchange.stream(SSE_HEADERS);
      return;
    }
    if (this.stopped || this.pages.size >= this.maxPages) {
      this.metrics.closed.inc({ reason: 'full' });
      const why = this.stopped
        ? 'the manager is stopping'
        : `the manager already serves ${this.pages.size} dashboard pages, the most it takes (--dashboard-pages)`;
      sendError(exchange.res, 503, ErrorCodes.DASHBOARD_FULL, why, { 'retry-after': String(RETRY_AFTER_S) });
      return;
    }
    const stream = exchange.stream(SSE_HEADERS)!;
    // The first page after none: a fresh state (the one kept would be as old as the last page).
    if (this.pages.size === 0 || !this.state) this.take(this.build());
    this.pages.add(stream);
    this.metrics.pages.set(this.pages.size);
    stream.onClose(() => this.forget(stream));
    this.snapshot ??= Buffer.from(`retry: ${RECONNECT_MS}\nid: ${this.state!.seq}\nevent: snapshot\ndata: ${JSON.stringify(this.state)}\n\n`, 'utf8');
    this.send(stream, this.snapshot);
    this.timer ??= watchdog(this.intervalMs, () => this.update());
  }

  /**
   * One update: the next state, its delta from the current one, written to every page as one
   * buffer. Runs on the timer; public for tests that step it themselves.
   */
  update(): void {
    if (this.pages.size === 0 || !this.state) return;
    const started = performance.now();
    let next: DashboardState;
    let message: Buffer;
    try {
      next = this.build();
      message = Buffer.from(`id: ${next.seq}\nevent: delta\ndata: ${JSON.stringify(diffStates(this.state, next))}\n\n`, 'utf8');
    } catch (err) {
      // The pages keep their state; the next period tries again.
      this.options.logger?.warn({ err }, 'dashboard update failed');
      return;
    }
    this.take(next);
    this.metrics.updates.inc();
    this.metrics.updateSeconds.observe((performance.now() - started) / 1e3);
    for (const page of [...this.pages]) this.send(page, message);
  }

  /** Ends every page's stream and stops the timer; later pages are refused. */
  close(): void {
    this.stopped = true;
    this.stopTimer();
    for (const page of [...this.pages]) {
      this.ending.set(page, 'shutdown');
      page.end();
    }
  }

  private build(): DashboardState {
    const at = this.clock();
    return dashboardState(this.options.status(), {
      seq: ++this.seq,
      at,
      series: this.options.series(),
      events: this.options.events(),
      staleness: this.options.staleness?.(at) ?? null,
      actions: this.options.actions?.(at) ?? null,
    });
  }

  private take(state: DashboardState): void {
    this.state = state;
    this.snapshot = null;
  }

  private send(page: HeldStream, message: Buffer): void {
    if (page.closed) return;
    page.write(message);
    this.metrics.bytes.inc(message.length);
    if (page.buffered > this.maxBufferedBytes) {
      this.ending.set(page, 'slow');
      this.options.logger?.warn({ buffered: page.buffered }, 'a dashboard page does not keep up: cut off (it reconnects for a snapshot)');
      page.destroy();
    }
  }

  private forget(page: HeldStream): void {
    if (!this.pages.delete(page)) return;
    this.metrics.closed.inc({ reason: this.ending.get(page) ?? 'left' });
    this.ending.delete(page);
    this.metrics.pages.set(this.pages.size);
    if (this.pages.size === 0) {
      this.stopTimer();
      this.state = null;
      this.snapshot = null;
    }
  }

  private stopTimer(): void {
    this.timer?.stop();
    this.timer = null;
  }
}

function positive(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${name} must be a positive integer, not ${value}`);
  return value;
}
