/**
 * The dashboard's actions panel (model.ts `ActionsPanel`): the action pool read from the same
 * sources as `laminar actions` (src/actions/status.ts: the kinds' consumers, the workers' bucket,
 * the recent results), and the turns per trajectory the manager counts from the buffer's records.
 *
 * Reads happen on demand: each state the publisher builds asks for the latest read, and a new
 * read starts when the last one is older than the interval and none is under way. No page open,
 * no read (the Grafana dashboards cover the long run from the workers' and clients' metrics). A
 * state never waits for a read: it takes the last one that answered.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../../common/logger.js';
import { readActionsStatus, type ActionsStatus, type KindStatus } from '../../actions/status.js';
import type { ActionKindRow, ActionsPanel } from './model.js';
import type { TurnCounts } from './series-recorder.js';

export const DEFAULT_ACTIONS_READ_INTERVAL_MS = 3000;
/** Results the completion times are taken over (as `laminar actions` by default). */
export const DEFAULT_ACTIONS_RECENT = 1000;

export interface ActionPoolWatchOptions {
  nc: NatsConnection;
  pool: string;
  intervalMs?: number;
  recent?: number;
  logger?: Logger;
  clock?: () => number;
}

/** What the last reads said: the last status that answered, and the last failure if the newest read failed. */
export interface ActionPoolReading {
  pool: string;
  status: ActionsStatus | null;
  error: string | null;
}

export class ActionPoolWatch {
  private readonly intervalMs: number;
  private readonly clock: () => number;
  private status: ActionsStatus | null = null;
  private error: string | null = null;
  private startedAt = -Infinity;
  private reading: Promise<void> | null = null;
  private closed = false;

  constructor(private readonly options: ActionPoolWatchOptions) {
    this.intervalMs = options.intervalMs ?? DEFAULT_ACTIONS_READ_INTERVAL_MS;
    this.clock = options.clock ?? Date.now;
  }

  /** The last reading; starts the next read when it is due. */
  latest(): ActionPoolReading {
    const now = this.clock();
    if (!this.closed && this.reading === null && now - this.startedAt >= this.intervalMs) {
      this.startedAt = now;
      this.reading = this.read().finally(() => (this.reading = null));
    }
    return { pool: this.options.pool, status: this.status, error: this.error };
  }

  /** Resolves once the read under way (if any) has ended: for tests and close(). */
  async settled(): Promise<void> {
    await this.reading;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.reading;
  }

  private async read(): Promise<void> {
    try {
      this.status = await readActionsStatus(this.options.nc, this.options.pool, this.options.recent ?? DEFAULT_ACTIONS_RECENT);
      this.error = null;
    } catch (err) {
      this.error = (err as Error).message;
      this.options.logger?.debug({ err: this.error, pool: this.options.pool }, 'dashboard: the action pool was not read');
    }
  }
}

/** The panel of a state: the pool's last reading and the turn counts (null: no buffer followed). */
export function actionsPanel(reading: ActionPoolReading, turns: TurnCounts | null): ActionsPanel {
  return {
    pool: reading.pool,
    kinds: reading.status ? reading.status.kinds.map(kindRow) : null,
    recent: reading.status?.recent ?? 0,
    error: reading.error,
    turns: turns?.counts ?? null,
    windowS: turns?.windowS ?? 60,
    maxTurns: turns?.maxValue ?? 64,
  };
}

/** Times to a tenth of a millisecond: what the page shows, so a reading that looks the same makes no delta. */
const tenth = (ms: number | null): number | null => (ms === null ? null : Math.round(ms * 10) / 10);

function kindRow(k: KindStatus): ActionKindRow {
  return {
    kind: k.kind,
    waiting: k.waiting,
    running: k.running,
    capacity: k.capacity,
    redelivered: k.redelivered,
    workers: k.workers.length,
    slots: k.workers.reduce((s, w) => s + w.slots, 0),
    busy: k.workers.reduce((s, w) => s + w.busy, 0),
    results: k.results,
    byStatus: k.byStatus,
    queueMsP50: tenth(k.queueMsP50),
    queueMsP99: tenth(k.queueMsP99),
    execMsP50: tenth(k.execMsP50),
    execMsP99: tenth(k.execMsP99),
  };
}
