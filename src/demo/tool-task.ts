/**
 * `npm run demo -- --engine torch --task tools`: the learning job on the lookup task
 * (laminar.testing.tools): the answer is a value the model must fetch with a `lookup` tool call
 * and copy. What the job adds for it: lookup action workers (`laminar action-worker --executor
 * lookup`, one of them killed with `--kill-an-action-worker`), the rollout agents' multi-turn
 * flags, and what the live view and the summary show of episodes and actions (from the agents'
 * /metrics and the action pool's status).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { readActionsStatus } from '../actions/index.js';
import { parsePrometheusText, sumOf, type Sample } from '../rollout-agent/prometheus-text.js';

export type DemoTask = 'digits' | 'tools';

/** The agents' flags of the lookup task: its parser, its tool, its reward, and the per-turn staleness bound. */
export function toolAgentArgs(maxStaleness: number): string[] {
  return ['--tools', 'lookup', '--tool-parser', 'token-calls', '--reward', 'tool-match', '--max-staleness', String(maxStaleness)];
}

/** The prompts of the task: `python -m laminar.testing.<module> prompts ...` arguments. */
export function promptArgs(task: DemoTask, count: number, groupSize: number): string[] {
  if (task === 'tools') return ['-m', 'laminar.testing.tools', 'prompts', '--count', String(count), '--seed', '1', '--n', String(groupSize)];
  // Repeat a 3-digit string: a task a 100k-parameter model learns by RL alone in a few minutes of CPU.
  return [
    ...['-m', 'laminar.testing.digits', 'prompts', '--count', String(count), '--seed', '1', '--n', String(groupSize)],
    ...['--min-digits', '3', '--max-digits', '3', '--tasks', 'repeat'],
  ];
}

/** The lookup workers' command line (each its own process). */
export function actionWorkerArgv(common: string[], id: string): string[] {
  return ['action-worker', ...common, '--kind', 'lookup', '--executor', 'lookup', '--concurrency', '8', '--id', id, '--ack-wait', '2s', '--metrics-port', '-1'];
}

/** Episodes and actions as the agents' /metrics and the action pool say. */
export interface ToolView {
  trajectories: number;
  turnsMean: number | null;
  toolCalls: Record<string, number>;
  staleAborts: number;
  /** Actions the agents wait for now. */
  inFlight: number;
  queueMsP50: number | null;
  execMsP50: number | null;
  queueMsP99: number | null;
  execMsP99: number | null;
  waiting: number;
  running: number;
  redelivered: number;
  results: number;
  resultsByStatus: Record<string, number>;
}

/** Reads every agent's /metrics (the ones that answer) and the pool's status. */
export async function readToolView(nc: NatsConnection, agentMetricsPorts: number[]): Promise<ToolView> {
  const samples: Sample[] = [];
  await Promise.all(
    agentMetricsPorts.map(async (port) => {
      const text = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(2000) })
        .then((r) => r.text())
        .catch(() => '');
      samples.push(...parsePrometheusText(text));
    }),
  );
  const toolCalls: Record<string, number> = {};
  for (const s of samples)
    if (s.name === 'laminar_agent_tool_calls_total') toolCalls[s.labels.status ?? '?'] = (toolCalls[s.labels.status ?? '?'] ?? 0) + s.value;
  const turns = sumOf(samples, 'laminar_agent_turns_sum');
  const trajectories = sumOf(samples, 'laminar_agent_turns_count') ?? 0;
  const status = await readActionsStatus(nc, 'default', 100_000).catch(() => null);
  const lookup = status?.kinds.find((k) => k.kind === 'lookup');
  return {
    trajectories,
    turnsMean: turns !== null && trajectories > 0 ? turns / trajectories : null,
    toolCalls,
    staleAborts: sumOf(samples, 'laminar_agent_stale_aborts_total') ?? 0,
    inFlight: sumOf(samples, 'laminar_action_in_flight') ?? 0,
    queueMsP50: lookup?.queueMsP50 ?? null,
    execMsP50: lookup?.execMsP50 ?? null,
    queueMsP99: lookup?.queueMsP99 ?? null,
    execMsP99: lookup?.execMsP99 ?? null,
    waiting: lookup?.waiting ?? 0,
    running: lookup?.running ?? 0,
    redelivered: lookup?.redelivered ?? 0,
    results: lookup?.results ?? 0,
    resultsByStatus: lookup?.byStatus ?? {},
  };
}

const ms = (v: number | null): string => (v === null ? '-' : `${v.toFixed(1)} ms`);
const counts = (c: Record<string, number>): string =>
  Object.entries(c)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ') || 'none';

/** One line of the live view. */
export function toolLine(v: ToolView): string {
  const failures = Object.entries(v.toolCalls).reduce((n, [status, c]) => n + (status === 'ok' ? 0 : c), 0);
  return (
    `  episodes: turns/trajectory ${v.turnsMean?.toFixed(2) ?? '-'}   tool calls ${counts(v.toolCalls)} (failures ${failures})` +
    `   action time p50: queue ${ms(v.queueMsP50)} + execution ${ms(v.execMsP50)}   stale at a turn ${v.staleAborts}`
  );
}

/** The summary's lines of episodes and actions. */
export function toolSummary(v: ToolView): string[] {
  return [
    `  turns per trajectory         mean ${v.turnsMean?.toFixed(2) ?? '-'} over ${v.trajectories} completed`,
    `  tool calls                   ${counts(v.toolCalls)}`,
    `  action completion time       queue wait p50 ${ms(v.queueMsP50)} p99 ${ms(v.queueMsP99)}; execution p50 ${ms(v.execMsP50)} p99 ${ms(v.execMsP99)}`,
    `  stale at a turn boundary     ${v.staleAborts} trajectories returned to the prompt pool`,
  ];
}

/** Every action started has its result once the queue drained: none waiting, none running. */
export function actionLedger(v: ToolView): { line: string; ok: boolean } {
  const ok = v.waiting === 0 && v.running === 0;
  return {
    ok,
    line: `  action ledger                ${v.results} results (${counts(v.resultsByStatus)}), ${v.waiting} waiting, ${v.running} running, ${v.redelivered} redelivered${ok ? ': every action accounted for' : ''}`,
  };
}
