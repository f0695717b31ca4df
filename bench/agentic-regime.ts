/**
 * The regime of the agentic bench's `sched` batch (agentic-sched.ts): its work over the engines'
 * capacity against its critical path. Apart from agentic-sched.ts so that its test
 * (test/agentic/sched-regime.test.ts) does not load the section's services.
 */
import type { EngineRate } from './agentic-prefill.js';
import type { SchedArgs } from './agentic-sched.js';
import { round } from './support.js';

/** The section's engines (and rollout agents, one each). */
export const ENGINES = 2;

/**
 * Which regime the batch is in (docs/performance/agentic.md). A batch takes at least the longer of
 * its work over the engines' capacity (every token decoded at the engines' full rate) and its
 * critical path (its longest trajectory's own path: its tool waits, one fewer than its turns, and
 * its tokens at one sequence's time per token at the engines' batch, never queued). First in first
 * out claims start the long tail late and queue it behind short turns, so `before` takes about
 * (most of the work) + (the critical path); longest-predicted-first can approach the larger of the
 * two. Where one term dwarfs the other no order gains much: all work (the tail ends inside it
 * however late it starts), or all path (the tail's own path, whatever its start). The gain has
 * room where they are comparable, as in a real step whose long tail decides the makespan
 * (Heddle §2.2).
 *
 * The capacity is the engines' rate or what the agents' ownership allows, whichever is less: an
 * agent owns at most inFlight + atTools trajectories, and each spends at least a tool call and a
 * turn's decode per turn (Little's law), so with long tools and few owned the engines idle.
 */
export function regime(
  a: Pick<SchedArgs, 'inFlight' | 'atTools' | 'toolMs'>,
  batch: { paths: readonly { turns: number; generated: number }[] } | undefined,
  rate: EngineRate,
  beforeMakespanS: number,
): Record<string, number> {
  if (batch === undefined || !Number.isFinite(rate.tokensPerS)) return {};
  const tokens = batch.paths.reduce((n, p) => n + p.generated, 0);
  const perTurn =
    tokens /
    Math.max(
      1,
      batch.paths.reduce((n, p) => n + p.turns, 0),
    );
  const ownedRate = ((a.inFlight + a.atTools) * perTurn * 1000) / (a.toolMs + perTurn * rate.msPerToken);
  const workS = tokens / (ENGINES * Math.min(rate.tokensPerS, ownedRate));
  const pathS = Math.max(...batch.paths.map((p) => (Math.max(0, p.turns - 1) * a.toolMs + p.generated * rate.msPerToken) / 1000));
  const boundS = Math.max(workS, pathS);
  return {
    sched_engine_tokens_per_s: round(rate.tokensPerS, 1),
    sched_ms_per_token_at_batch: round(rate.msPerToken, 3),
    // What one agent's owned trajectories can ask of its engine at most (tokens/s).
    sched_owned_tokens_per_s: round(ownedRate, 1),
    sched_work_tokens: tokens,
    sched_work_over_capacity_s: round(workS, 2),
    sched_critical_path_s: round(pathS, 2),
    sched_path_over_work: round(pathS / workS, 2),
    sched_makespan_lower_bound_s: round(boundS, 2),
    // The most any order of claims and turns could gain over before on these engines.
    sched_gain_ceiling: round(beforeMakespanS / boundS),
  };
}
