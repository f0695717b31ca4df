/** The rollout SDK's Prometheus metrics (docs/reference/metrics.md, "Rollouts and repack"). */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../common/metric-factory.js';

export class RolloutMetrics {
  readonly tasks: Counter;
  readonly owned: Gauge;
  readonly commands: Counter;
  readonly commandSeconds: Histogram;
  readonly weightVersion: Gauge;
  readonly weightLoadSeconds: Histogram;
  readonly weightAcquireFailures: Counter;
  readonly kvUsed: Gauge;
  readonly rejected: Counter;
  readonly running: Gauge;
  readonly waiting: Gauge;
  readonly tokensPerSecond: Gauge;

  constructor(registry: Registry) {
    this.tasks = counter(registry, {
      name: 'laminar_rollout_tasks_total',
      help: 'trajectories by what happened to them here: started, resumed, completed, duplicate, lost (taken by another rollout), handed-over, returned (given back to the prompt pool: stale at a turn boundary), skipped (already done elsewhere), bad-prompt (samples of a prompt whose payload the engine cannot take: the prompt is dropped)',
      labelNames: ['outcome'],
    });
    this.owned = gauge(registry, { name: 'laminar_rollout_owned', help: 'trajectories this rollout generates now' });
    this.commands = counter(registry, {
      name: 'laminar_rollout_commands_total',
      help: 'manager commands handled, by kind and result',
      labelNames: ['command', 'result'],
    });
    this.commandSeconds = histogram(registry, {
      name: 'laminar_rollout_command_seconds',
      help: 'time to carry out a manager command',
      labelNames: ['command'],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10],
    });
    this.weightVersion = gauge(registry, { name: 'laminar_rollout_weight_version', help: 'weight version the engine generates with' });
    this.weightLoadSeconds = histogram(registry, {
      name: 'laminar_rollout_weight_load_seconds',
      help: 'acquire from the local relay to the engine holding the weights',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10],
    });
    this.weightAcquireFailures = counter(registry, {
      name: 'laminar_rollout_weight_acquire_failures_total',
      help: 'acquires from the local relay that failed, by code (ERR_CLOSED: the relay is away; each acquire tries to connect again)',
      labelNames: ['code'],
    });
    this.kvUsed = gauge(registry, { name: 'laminar_rollout_kv_used', help: 'KV-cache utilisation reported by the engine' });
    this.running = gauge(registry, { name: 'laminar_rollout_running', help: "requests in the engine's decode batch" });
    this.waiting = gauge(registry, { name: 'laminar_rollout_waiting', help: 'requests admitted but waiting for KV space' });
    this.tokensPerSecond = gauge(registry, { name: 'laminar_rollout_tokens_per_second', help: 'generated tokens per second, recent' });
    this.rejected = counter(registry, { name: 'laminar_rollout_control_rejected_total', help: 'control messages rejected, by code', labelNames: ['code'] });
  }
}
