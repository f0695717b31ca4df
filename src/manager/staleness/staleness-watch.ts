/**
 * What the manager reports of the data the trainer gets, while it leads: trajectories completed,
 * their inherent staleness (the paper's Figure 10: the trainer's version when a trajectory
 * completed minus the version that generated it), and the consumption staleness of the batches
 * trained on (the trainer's version at training minus the generating version).
 *
 * Inherent staleness is measured here, on one clock: each record is read as it is written
 * (record-watch.ts) and compared with the newest version the trainer had announced by then.
 * Consumption staleness is known only where batches are assembled: samplers publish a summary of
 * each batch (data/experience/batch-summary.ts), and the manager adds it to its histogram.
 */
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Counter, Histogram } from 'prom-client';
import type { Logger } from '../../common/logger.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { batchSummarySchema, batchSummarySubject, decode } from '../../control/schema.js';
import { RecordWatch } from './record-watch.js';

export interface StalenessMetrics {
  completed: Counter;
  inherent: Histogram;
  consumption: Histogram;
  restarts: Counter;
  /** Messages refused, by code (the manager's `laminar_manager_rejected_total`). */
  rejected: Counter;
}

/**
 * What else hears of each completion and staleness value, beside the metrics: the dashboard's
 * series recorder (its percentiles over the last minute, which a Prometheus histogram cannot give).
 */
export interface StalenessListener {
  /** A trajectory was written to the buffer. */
  completed(): void;
  /** Its inherent staleness (only when the trainer had announced a version). */
  inherent(value: number): void;
  /** `count` trajectories of a batch trained on had consumption staleness `value`. */
  consumption(value: number, count: number): void;
  /** The trajectory written had `turns` generated turns (1 for a single-turn one). */
  turns(turns: number): void;
}

export interface StalenessWatchOptions {
  nc: NatsConnection;
  buffer: string;
  /** The newest version the trainer announced (undefined: none yet). */
  trainerVersion: () => number | undefined;
  metrics: StalenessMetrics;
  log: Logger;
  listener?: StalenessListener;
}

export class StalenessWatch {
  private readonly records: RecordWatch;
  private readonly batches: Subscription;

  constructor(private readonly options: StalenessWatchOptions) {
    const { metrics, log, listener } = options;
    this.records = new RecordWatch({
      nc: options.nc,
      buffer: options.buffer,
      onRecord: (meta) => {
        metrics.completed.inc();
        listener?.completed();
        listener?.turns(meta.segments ? meta.segments.filter((s) => s.kind === 'generated').length : 1);
        const version = options.trainerVersion();
        if (version !== undefined) {
          const staleness = Math.max(version - meta.weightVersion, 0);
          metrics.inherent.observe(staleness);
          listener?.inherent(staleness);
        }
      },
      onUnreadable: (err) => {
        metrics.rejected.inc({ code: ErrorCodes.CORRUPT_RECORD });
        log.warn({ err: (err as Error).message }, 'staleness: a record whose metadata cannot be read');
      },
      onRestart: () => metrics.restarts.inc(),
      log,
    });
    this.batches = options.nc.subscribe(batchSummarySubject(options.buffer), {
      callback: (err, msg) => {
        if (err) return;
        try {
          const summary = decode(batchSummarySchema, msg.data, 'batch summary');
          for (const [value, count] of summary.staleness) {
            for (let i = 0; i < count; i++) metrics.consumption.observe(value);
            listener?.consumption(value, count);
          }
        } catch (e) {
          // Input never takes the manager down: counted.
          metrics.rejected.inc({ code: (e as { code?: string }).code ?? ErrorCodes.INTERNAL });
        }
      },
    });
  }

  async stop(): Promise<void> {
    this.batches.unsubscribe();
    await this.records.stop();
  }
}
