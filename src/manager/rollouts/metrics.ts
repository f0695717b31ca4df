/** The manager's rollout metrics: repack and rollout failover (docs/reference/metrics.md, "Rollouts and repack"). */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../../common/metric-factory.js';

export class RolloutCoordinatorMetrics {
  readonly repackRounds: Counter;
  readonly repackMoves: Counter;
  readonly repackTrajectories: Counter;
  readonly repackSeconds: Histogram;
  readonly plannerSeconds: Histogram;
  readonly reinitialise: Counter;
  readonly orphans: Counter;
  readonly orphansWaiting: Gauge;
  readonly orphanScanFailures: Counter;
  readonly orphanReturnFailures: Counter;

  constructor(registry: Registry) {
    this.repackRounds = counter(registry, {
      name: 'laminar_manager_repack_rounds_total',
      help: 'repack planning rounds, by trigger (interval, version)',
      labelNames: ['trigger'],
    });
    this.repackMoves = counter(registry, {
      name: 'laminar_manager_repack_moves_total',
      help: 'source -> destination moves, by result (done, empty, failed code)',
      labelNames: ['result'],
    });
    this.repackTrajectories = counter(registry, {
      name: 'laminar_manager_repack_trajectories_total',
      help: 'trajectories moved by repack, by outcome (resumed, completed, lost)',
      labelNames: ['outcome'],
    });
    this.repackSeconds = histogram(registry, {
      name: 'laminar_manager_repack_seconds',
      help: 'overhead of one move: repack-out sent to the destination resuming',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10],
    });
    this.plannerSeconds = histogram(registry, {
      name: 'laminar_manager_repack_planner_seconds',
      help: 'time to plan one weight-version group',
      buckets: [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05],
    });
    this.reinitialise = counter(registry, {
      name: 'laminar_manager_reinitialise_total',
      help: 'rollouts asked to reinitialise after missed heartbeats, by result',
      labelNames: ['result'],
    });
    this.orphans = counter(registry, {
      name: 'laminar_manager_orphans_total',
      help: 'trajectories of dead rollouts, by outcome (resumed on a rollout of the same version, completed already, returned to the prompt pool, lost a race)',
      labelNames: ['outcome'],
    });
    this.orphanScanFailures = counter(registry, {
      name: 'laminar_manager_orphan_scan_failures_total',
      help: 'partial-pool reads of the orphan scan that failed, by step (list: the pool; owner: a trajectory whose owner could not be read; corrupt: a log without its start); after list or owner the scan runs again 2 s later, doubling while it keeps failing',
      labelNames: ['step'],
    });
    this.orphanReturnFailures = counter(registry, {
      name: 'laminar_manager_orphan_return_failures_total',
      help: "returns of a parked orphan's sample to the prompt pool that failed, by error code; each is retried (idempotently) 1 s later, doubling while it keeps failing, up to the scan period",
      labelNames: ['code'],
    });
    this.orphansWaiting = gauge(registry, {
      name: 'laminar_manager_orphans_waiting',
      help: "orphaned trajectories waiting for a rollout of their weight version, or parked and waiting for their sample's return to the prompt pool to succeed",
    });
  }
}
