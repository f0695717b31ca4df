/** The rollout agent's Prometheus metrics (docs/reference/metrics.md, "Rollout agent"); the SDK's laminar_rollout_* sit beside them. */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../common/metric-factory.js';

export class AgentMetrics {
  readonly engineUp: Gauge;
  readonly engineDowns: Counter;
  readonly requests: Counter<'result'>;
  readonly tokens: Counter;
  readonly reloads: Counter<'result'>;
  readonly reloadSeconds: Histogram;
  readonly pausedSeconds: Histogram;
  readonly rewardFailures: Counter;
  readonly badPayloads: Counter;
  readonly versionMismatches: Counter;
  readonly engineErrors: Counter<'code'>;

  constructor(registry: Registry) {
    this.engineUp = gauge(registry, { name: 'laminar_agent_engine_up', help: '1 while the engine answers its health check and the agent serves it, else 0' });
    this.engineDowns = counter(registry, {
      name: 'laminar_agent_engine_down_total',
      help: 'times the engine was found unreachable (the rollout left the job until it came back)',
    });
    this.requests = counter(registry, {
      name: 'laminar_agent_requests_total',
      help: 'generate requests sent to the engine, by how they ended: length, stop, abort (by the engine), stopped (by the agent: repack, shutdown), failed',
      labelNames: ['result'],
    });
    this.tokens = counter(registry, { name: 'laminar_agent_tokens_total', help: 'response tokens streamed from the engine' });
    this.reloads = counter(registry, {
      name: 'laminar_agent_weight_reloads_total',
      help: 'weight versions the engine was told to load, by result (ok, refused, failed: the engine could not be reached)',
      labelNames: ['result'],
    });
    this.reloadSeconds = histogram(registry, {
      name: 'laminar_agent_weight_reload_seconds',
      help: "the engine's load of a version directory (update_weights_from_disk), request to answer",
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    });
    this.pausedSeconds = histogram(registry, {
      name: 'laminar_agent_engine_paused_seconds',
      help: 'generation paused for a weight update (partial rollout: pause to continue)',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    });
    this.rewardFailures = counter(registry, {
      name: 'laminar_agent_reward_failures_total',
      help: 'trajectories whose reward could not be computed (kept, not completed)',
    });
    this.badPayloads = counter(registry, {
      name: 'laminar_agent_bad_payloads_total',
      help: 'prompts whose payload could not be turned into an engine request',
    });
    this.versionMismatches = counter(registry, {
      name: 'laminar_agent_version_mismatches_total',
      help: 'streamed tokens the engine reported under another weight version than the trajectory (should stay 0 without --partial-rollout)',
    });
    this.engineErrors = counter(registry, { name: 'laminar_agent_engine_errors_total', help: 'failed engine calls, by code', labelNames: ['code'] });
  }
}
