/**
 * Turn-by-turn traces of the tool-call task, for evaluating remaining-length predictors (issue
 * #49) on the simulator's workload without running the cluster simulation: every trajectory's
 * turn ends (its tool calls), total length and tool latencies come from the scenario's Workload,
 * exactly as the simulator draws them.
 *
 * Time is simplified: each trajectory decodes at a constant rate (no batching interference, no
 * queueing) and waits out each tool call; the steps run one after another, a step's groups all
 * starting together when the previous step's last trajectory ends (a synchronous rollout). Only
 * the order of events matters to a predictor (which group members have finished when another
 * ends a turn), and that order is dominated by lengths and tool latencies, which are the
 * workload's own.
 */
import type { TrajectoryTrace } from '../../manager/agentic/prediction-replay.js';
import type { Workload } from './workload.js';

/** One token per 30 ms per trajectory: a 7B engine's decode step at a moderate batch. */
export const TRACE_MS_PER_TOKEN = 30;

export function turnTraces(workload: Workload, steps: number, promptsPerStep = workload.promptsPerStep, msPerToken = TRACE_MS_PER_TOKEN): TrajectoryTrace[] {
  const out: TrajectoryTrace[] = [];
  let stepStart = 0;
  for (let step = 0; step < steps; step++) {
    let stepEnd = stepStart;
    for (let p = 0; p < promptsPerStep; p++) {
      // Prompts of nominal step `step`, so that lengths drift over the steps as in the simulator.
      const prompt = step * workload.promptsPerStep + p;
      for (let i = 0; i < workload.groupSize; i++) {
        const id = prompt * workload.groupSize + i;
        const totalTokens = workload.outputTokens(id);
        const callsAt = workload.callsOf(id, totalTokens);
        const callTimesMs: number[] = [];
        let waited = 0;
        callsAt.forEach((at, k) => {
          callTimesMs.push(stepStart + at * msPerToken + waited);
          waited += workload.toolLatencyMs(id, k);
        });
        const finishMs = stepStart + totalTokens * msPerToken + waited;
        stepEnd = Math.max(stepEnd, finishMs);
        out.push({ id: `t${id}`, group: `g${prompt}`, step, callsAt, callTimesMs, startMs: stepStart, totalTokens, finishMs });
      }
    }
    stepStart = stepEnd;
  }
  return out;
}
