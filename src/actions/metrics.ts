/**
 * The actions' Prometheus metrics (docs/reference/metrics.md, the "laminar / actions" Grafana
 * dashboard). The submitter's side (ActionClient, in the rollout agent) measures what a trajectory sees:
 * completion time and results by status. The worker's side (ActionWorker, `laminar
 * action-worker`) splits the time into queue wait and execution, counts executions and reports
 * its kind's queue (depth, running) and its own slots.
 */
import type { Counter, Gauge, Registry } from 'prom-client';
import { counter, gauge, histogram, onCollect } from '../common/metric-factory.js';

const SECONDS = [0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

export function clientMetrics(registry: Registry) {
  return {
    completion: histogram(registry, {
      name: 'laminar_action_completion_seconds',
      help: 'Actions from submission to result, as the waiting trajectory sees it, by kind',
      labelNames: ['kind'],
      buckets: SECONDS,
    }),
    results: counter(registry, {
      name: 'laminar_action_results_total',
      help: 'Action results received by submitters, by kind and status (ok, truncated, error, timeout, failed, bad_call)',
      labelNames: ['kind', 'status'],
    }),
    dropped: counter(registry, {
      name: 'laminar_action_results_dropped_total',
      help: 'Results dropped by a submitter: duplicate (a second result of an action), foreign (names another trajectory), malformed',
      labelNames: ['reason'],
    }),
    inFlight: gauge(registry, { name: 'laminar_action_in_flight', help: 'Actions submitted and waiting for their result, by kind', labelNames: ['kind'] }),
  };
}

export function workerMetrics(registry: Registry) {
  return {
    executions: counter(registry, {
      name: 'laminar_action_executions_total',
      help: 'Deliveries handled by action workers, by kind and status (the last one of an action that ran out of deliveries is failed)',
      labelNames: ['kind', 'status'],
    }),
    queueWait: histogram(registry, {
      name: 'laminar_action_queue_wait_seconds',
      help: 'Actions from submission to the start of their execution, measured by the worker that ran them, by kind',
      labelNames: ['kind'],
      buckets: SECONDS,
    }),
    execution: histogram(registry, {
      name: 'laminar_action_execution_seconds',
      help: "The executor's own time of each action a worker ran, by kind",
      labelNames: ['kind'],
      buckets: SECONDS,
    }),
    busy: gauge(registry, { name: 'laminar_action_worker_busy', help: "Action workers' slots executing an action, by kind", labelNames: ['kind'] }),
    slots: gauge(registry, { name: 'laminar_action_worker_slots', help: "Action workers' slots (their concurrency), by kind", labelNames: ['kind'] }),
    queueDepth: gauge(registry, {
      name: 'laminar_action_queue_depth',
      help: "Actions waiting in a kind's queue for a worker (its consumer's pending count, read at scrape)",
      labelNames: ['kind'],
    }),
    unacked: gauge(registry, {
      name: 'laminar_action_queue_running',
      help: "Actions of a kind handed to a worker and not finished (its consumer's ack-pending count, read at scrape)",
      labelNames: ['kind'],
    }),
    redeliveries: counter(registry, {
      name: 'laminar_action_redeliveries_total',
      help: 'Actions a worker received again after another delivery lapsed (a worker died or hung), by kind',
      labelNames: ['kind'],
    }),
    malformed: counter(registry, {
      name: 'laminar_action_malformed_total',
      help: 'Messages on action queues that do not decode, dropped',
      labelNames: ['kind'],
    }),
  };
}

/**
 * A gauge by kind that changes with every action (in flight, busy), kept as plain counts and
 * brought to the gauge right before it is read (onCollect): prom-client hashes the labels of
 * every inc() and dec(), two of them per action for each gauge. Several owners may share one
 * gauge (clients of one registry): each adds what changed since its last read.
 */
export class KindCounts {
  private readonly counts = new Map<string, number>();
  /** What the gauge was last given, by kind. */
  private readonly given = new Map<string, number>();
  private readonly removeHook: () => void;

  constructor(private readonly gauge: Gauge<'kind'>) {
    this.removeHook = onCollect(gauge, () => this.flush());
  }

  add(kind: string, n: number): void {
    this.counts.set(kind, (this.counts.get(kind) ?? 0) + n);
  }

  /** Brings the gauge up to date. */
  flush(): void {
    for (const [kind, n] of this.counts) {
      const delta = n - (this.given.get(kind) ?? 0);
      if (delta === 0) continue;
      this.gauge.inc({ kind }, delta);
      this.given.set(kind, n);
    }
  }

  /** Brings the gauge up to date for the last time (the owner is closing). */
  close(): void {
    this.flush();
    this.removeHook();
  }
}

/**
 * A counter by kind and status that counts every action (results, executions), kept as plain
 * counts and given to the counter right before it is read (onCollect), as KindCounts does for
 * the gauges: prom-client checks and hashes the labels of every inc(). Several owners may share
 * one counter (clients of one registry): each gives what it counted since its last read.
 */
export class KindStatusCounts {
  private readonly counts = new Map<string, Map<string, number>>();
  private readonly removeHook: () => void;

  constructor(private readonly counter: Counter<'kind' | 'status'>) {
    this.removeHook = onCollect(counter, () => this.flush());
  }

  add(kind: string, status: string): void {
    let byStatus = this.counts.get(kind);
    if (!byStatus) this.counts.set(kind, (byStatus = new Map<string, number>()));
    byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
  }

  /** Brings the counter up to date. */
  flush(): void {
    for (const [kind, byStatus] of this.counts) {
      for (const [status, n] of byStatus) if (n > 0) this.counter.inc({ kind, status }, n);
      byStatus.clear();
    }
  }

  /** Brings the counter up to date for the last time (the owner is closing). */
  close(): void {
    this.flush();
    this.removeHook();
  }
}
