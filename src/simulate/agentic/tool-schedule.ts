/**
 * How laminar's simulated rollouts schedule the turns of the tool-call task (issue #49, "measured
 * at scale in the simulator"): each of #49's mechanisms as a switch, so that a run can be laminar's
 * scheduling before the issue, the new one, or either with one mechanism changed.
 *
 * - `priority`: `fifo`, the engines first come first served (laminar before #49); or
 *   `longest-predicted`, progressive priority (Heddle §4.2): each turn goes to its engine with its
 *   trajectory's predicted remaining tokens as priority, refined at every tool call, and the
 *   engine serves the larger first (leap-engine.ts).
 * - `predictor`: what predicts the remaining tokens, the manager's `length` predictor
 *   (src/manager/agentic/length-predictor.ts) or the `group-median` baseline.
 * - `placement`: `same-engine`, a trajectory's turns go back to the rollout that claimed it
 *   (laminar's rollout agent keeps its trajectories) and Algorithm 1 repacks whole rollouts;
 *   `least-load`, the step-centric router: every returning turn goes to the rollout of its
 *   version holding the fewest requests (Heddle's least-load baseline), Algorithm 1 as well;
 *   `dp-at-tool`, the manager's `--planner dp`: in every repack round Heddle's presorted DP
 *   places the group's trajectories by predicted length and those waiting at tools move
 *   (src/manager/repack/tool-call-moves.ts), in place of Algorithm 1, as the manager does.
 * - `tools`: the sandbox's slots, `budget` in all (null: unbounded, the scenario's own sandbox),
 *   `static` (each rollout its own budget / rollouts slots, provisioned per worker) or `elastic`
 *   (one pool of the budget shared by every rollout's calls: ARL-Tangram's pooled resources).
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

export const TURN_PRIORITIES = ['fifo', 'longest-predicted'] as const;
export const TURN_PREDICTORS = ['length', 'group-median'] as const;
export const TURN_PLACEMENTS = ['same-engine', 'least-load', 'dp-at-tool'] as const;
export const TOOL_PROVISIONING = ['static', 'elastic'] as const;

export interface ToolSchedule {
  priority: (typeof TURN_PRIORITIES)[number];
  predictor: (typeof TURN_PREDICTORS)[number];
  placement: (typeof TURN_PLACEMENTS)[number];
  tools: { budget: number | null; provisioning: (typeof TOOL_PROVISIONING)[number] };
}

/** laminar before issue #49: FCFS engines, turns back to their rollout, Algorithm 1, the scenario's sandbox. */
export const LAMINAR_BEFORE_49: Readonly<ToolSchedule> = Object.freeze({
  priority: 'fifo',
  predictor: 'length',
  placement: 'same-engine',
  tools: Object.freeze({ budget: null, provisioning: 'static' }),
});

/** Every mechanism of issue #49 on (the tools' budget is the caller's). */
export const ISSUE_49: Readonly<ToolSchedule> = Object.freeze({
  priority: 'longest-predicted',
  predictor: 'length',
  placement: 'dp-at-tool',
  tools: Object.freeze({ budget: null, provisioning: 'elastic' }),
});

/** Checks a schedule; ERR_INVALID_ARG naming the field at fault. */
export function checkToolSchedule(s: ToolSchedule): ToolSchedule {
  const bad = (field: string, value: unknown, allowed: string): never => {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `tool schedule: ${field} is ${String(value)}, not ${allowed}`, { field });
  };
  if (!(TURN_PRIORITIES as readonly string[]).includes(s.priority)) bad('priority', s.priority, TURN_PRIORITIES.join(' or '));
  if (!(TURN_PREDICTORS as readonly string[]).includes(s.predictor)) bad('predictor', s.predictor, TURN_PREDICTORS.join(' or '));
  if (!(TURN_PLACEMENTS as readonly string[]).includes(s.placement)) bad('placement', s.placement, TURN_PLACEMENTS.join(', '));
  if (!(TOOL_PROVISIONING as readonly string[]).includes(s.tools.provisioning)) bad('tools.provisioning', s.tools.provisioning, 'static or elastic');
  if (s.tools.budget !== null && !(Number.isSafeInteger(s.tools.budget) && s.tools.budget > 0))
    bad('tools.budget', s.tools.budget, 'a positive integer or null');
  return s;
}
