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
  readonly turns: Histogram;
  readonly toolCalls: Counter<'status'>;
  readonly toolWaitSeconds: Histogram;
  readonly staleAborts: Counter;
  readonly episodeEnds: Counter<'reason'>;
  readonly remainingTokensError: Histogram<'predictor'>;

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
    this.turns = histogram(registry, {
      name: 'laminar_agent_turns',
      help: 'generated turns per completed trajectory (multi-turn episodes; 1 for a single-turn one)',
      buckets: [1, 2, 3, 4, 6, 8, 12, 16, 32],
    });
    this.toolCalls = counter(registry, {
      name: 'laminar_agent_tool_calls_total',
      help: 'tool calls of multi-turn episodes, by the status of their observation: ok, truncated, error, timeout, failed, bad_call (did not parse, unknown tool, arguments of the wrong type)',
      labelNames: ['status'],
    });
    this.toolWaitSeconds = histogram(registry, {
      name: 'laminar_agent_tool_wait_seconds',
      help: "a trajectory's wait at a tool call, from the action's submission to its result (queue wait + execution; the engine holds nothing meanwhile)",
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    });
    this.staleAborts = counter(registry, {
      name: 'laminar_agent_stale_aborts_total',
      help: 'trajectories given back to the prompt pool at a turn boundary: more than --max-staleness versions behind the newest',
    });
    this.episodeEnds = counter(registry, {
      name: 'laminar_agent_episode_limits_total',
      help: 'episodes ended by a limit rather than by an answer: max_turns (a call at the last turn allowed), context (the next observation would not fit)',
      labelNames: ['reason'],
    });
    this.remainingTokensError = histogram(registry, {
      name: 'laminar_agent_remaining_tokens_error',
      help: "progressive priority: absolute error of a trajectory's predicted remaining output tokens, one per turn boundary, scored when it ends, by predictor: length_predictor (the one that sets priorities) or group_median (the baseline it must beat)",
      labelNames: ['predictor'],
      buckets: [4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
    });
  }
}
