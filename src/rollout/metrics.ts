/** The rollout SDK's Prometheus metrics (README: "Rollout SDK"). */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

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
    const registers = [registry];
    this.tasks = new Counter({
      name: 'laminar_rollout_tasks_total',
      help: 'trajectories by what happened to them here: started, resumed, completed, duplicate, lost (taken by another rollout), handed-over, skipped (already done elsewhere)',
      labelNames: ['outcome'],
      registers,
    });
    this.owned = new Gauge({ name: 'laminar_rollout_owned', help: 'trajectories this rollout generates now', registers });
    this.commands = new Counter({ name: 'laminar_rollout_commands_total', help: "manager commands handled, by kind and result", labelNames: ['command', 'result'], registers });
    this.commandSeconds = new Histogram({ name: 'laminar_rollout_command_seconds', help: 'time to carry out a manager command', labelNames: ['command'], buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10], registers });
    this.weightVersion = new Gauge({ name: 'laminar_rollout_weight_version', help: 'weight version the engine generates with', registers });
    this.weightLoadSeconds = new Histogram({ name: 'laminar_rollout_weight_load_seconds', help: 'acquire from the local relay to the engine holding the weights', buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10], registers });
    this.weightAcquireFailures = new Counter({ name: 'laminar_rollout_weight_acquire_failures_total', help: 'acquires from the local relay that failed, by code (ERR_CLOSED: the relay is away; each acquire tries to connect again)', labelNames: ['code'], registers });
    this.kvUsed = new Gauge({ name: 'laminar_rollout_kv_used', help: 'KV-cache utilisation reported by the engine', registers });
    this.running = new Gauge({ name: 'laminar_rollout_running', help: 'requests in the engine\'s decode batch', registers });
    this.waiting = new Gauge({ name: 'laminar_rollout_waiting', help: 'requests admitted but waiting for KV space', registers });
    this.tokensPerSecond = new Gauge({ name: 'laminar_rollout_tokens_per_second', help: 'generated tokens per second, recent', registers });
    this.rejected = new Counter({ name: 'laminar_rollout_control_rejected_total', help: 'control messages rejected, by code', labelNames: ['code'], registers });
  }
}
