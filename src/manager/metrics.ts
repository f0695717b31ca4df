/** The manager's Prometheus metrics (docs/reference/metrics.md, "Manager"). */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../common/metric-factory.js';
import type { StalenessMetrics } from './staleness/staleness-watch.js';

const STALENESS_BUCKETS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64];

/**
 * What the gauges that describe the fleet read at scrape time (not on every tick: at a thousand
 * members, setting a gauge per member ten times a second was most of the manager's work).
 */
export interface ManagerGaugeSource {
  /** Each member's kind and health. */
  members(): Array<{ kind: string; state: string }>;
  /** The share of the newest version of each model each live relay holds. */
  relayProgress(): Array<{ relay: string; model: string; fraction: number }>;
  /** What each live rollout last reported. */
  rolloutLoads(): Array<{ rollout: string; kvUsed: number; weightVersion: number | null; refusedVersion: number | null }>;
}

export class ManagerMetrics {
  readonly leader: Gauge;
  readonly takeovers: Counter;
  readonly suspicions: Counter;
  readonly deaths: Counter;
  readonly detectionSeconds: Histogram;
  readonly epoch: Gauge;
  readonly plans: Counter;
  readonly repairSeconds: Histogram;
  readonly stalls: Counter;
  readonly rejected: Counter;
  readonly checkpointLoads: Counter;
  /** Trajectories and staleness of the data the trainer gets (staleness/staleness-watch.ts). */
  readonly staleness: StalenessMetrics;

  constructor(registry: Registry, source: ManagerGaugeSource) {
    this.leader = gauge(registry, { name: 'laminar_manager_leader', help: '1 while this manager holds the leader lease and leads the job' });
    this.takeovers = counter(registry, {
      name: 'laminar_manager_takeovers_total',
      help: 'takeovers of the job after winning the lease, by result (done; failed: a read of the stored state failed, the lease was handed back)',
      labelNames: ['result'],
    });
    scrapedGauge(registry, 'laminar_manager_members', 'registered members by kind and health', ['kind', 'state'], (g) => {
      for (const { kind, state } of source.members()) g.inc({ kind, state });
    });
    this.suspicions = counter(registry, { name: 'laminar_manager_suspicions_total', help: 'members suspected after missed heartbeats', labelNames: ['kind'] });
    this.deaths = counter(registry, {
      name: 'laminar_manager_deaths_total',
      help: 'members declared dead, by cause (heartbeat, report)',
      labelNames: ['kind', 'cause'],
    });
    this.detectionSeconds = histogram(registry, {
      name: 'laminar_manager_detection_seconds',
      help: 'from the last heartbeat of a member to its declaration as dead, by cause',
      labelNames: ['cause'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30],
    });
    this.epoch = gauge(registry, { name: 'laminar_manager_epoch', help: 'epoch of the chain plan in force' });
    this.plans = counter(registry, { name: 'laminar_manager_plans_total', help: 'chain plans published, by reason', labelNames: ['reason'] });
    this.repairSeconds = histogram(registry, {
      name: 'laminar_manager_repair_seconds',
      help: 'from a fault being known to the manager to the repaired plan being published',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2],
    });
    this.stalls = counter(registry, { name: 'laminar_manager_stalled_links_total', help: 'chain links found without progress' });
    this.rejected = counter(registry, { name: 'laminar_manager_rejected_total', help: 'control messages rejected, by code', labelNames: ['code'] });
    scrapedGauge(registry, 'laminar_manager_relay_progress', 'fraction of the newest version of a model each relay holds', ['relay', 'model'], (g) => {
      for (const { relay, model, fraction } of source.relayProgress()) g.set({ relay, model }, fraction);
    });
    this.checkpointLoads = counter(registry, {
      name: 'laminar_manager_checkpoint_loads_total',
      help: 'relays told to load a version from the trainer checkpoint',
    });
    this.staleness = {
      completed: counter(registry, {
        name: 'laminar_manager_trajectories_completed_total',
        help: 'trajectories written to the experience buffer, as the leading manager read them',
      }),
      inherent: histogram(registry, {
        name: 'laminar_manager_inherent_staleness',
        help: "inherent staleness of each trajectory written: the trainer's newest announced version when it was written - its generating version",
        buckets: STALENESS_BUCKETS,
      }),
      consumption: histogram(registry, {
        name: 'laminar_manager_consumption_staleness',
        help: "consumption staleness of the trajectories trained on (trainer version at training - generating version), from the samplers' batch summaries",
        buckets: STALENESS_BUCKETS,
      }),
      restarts: counter(registry, {
        name: 'laminar_manager_record_watch_restarts_total',
        help: "times the manager's headers-only follower of the experience buffer was made again (nats-server restarts, a stream created later)",
      }),
      rejected: this.rejected,
    };
    // Rollouts that are gone drop out of these at the next scrape rather than keep their last value.
    scrapedGauge(registry, 'laminar_manager_rollout_kv_used', 'KV-cache utilisation each live rollout reports', ['rollout'], (g) => {
      for (const { rollout, kvUsed } of source.rolloutLoads()) g.set({ rollout }, kvUsed);
    });
    scrapedGauge(registry, 'laminar_manager_rollout_weight_version', 'weight version each live rollout generates with', ['rollout'], (g) => {
      for (const { rollout, weightVersion } of source.rolloutLoads()) if (weightVersion !== null) g.set({ rollout }, weightVersion);
    });
    scrapedGauge(
      registry,
      'laminar_manager_rollout_refused_version',
      "the weight version a live rollout's engine refused to load (it goes on with the one it has); absent while its last load succeeded",
      ['rollout'],
      (g) => {
        for (const { rollout, refusedVersion } of source.rolloutLoads()) if (refusedVersion !== null) g.set({ rollout }, refusedVersion);
      },
    );
  }
}

/** A gauge filled from the manager's state when it is scraped: emptied, then `fill`ed. */
function scrapedGauge<L extends string>(registry: Registry, name: string, help: string, labelNames: L[], fill: (gauge: Gauge<L>) => void): Gauge<L> {
  return gauge(registry, {
    name,
    help,
    labelNames,
    collect() {
      this.reset();
      fill(this);
    },
  });
}
