/**
 * The agentic bench's `sched` workloads (`--sched-workload`): how long each GRPO group's
 * trajectories are, set per group from a long-tailed list cycled over the groups. The untrained
 * model never answers, so an episode ends at its turn limit or its token budget; every turn ends
 * at `</tool_call>` (the model draws it about once in 22 tokens; EOS is ignored) and waits at its
 * tool. The draws are seeded by trajectory: every configuration generates the same tokens.
 *
 *   tool-waits    the long tail is in turns: groups of 1-3 turns and two of 10-12, each turn ~22
 *                 tokens and a tool call. With calls of a second the long groups' path is their
 *                 tool waits (12 s), which no order of claims or turns shortens; at its default
 *                 128 groups the batch's work (~18.5 s at the engines' rate) is the bound, and
 *                 first-in-first-out claims leave the engines ~30 % idle (docs/performance/agentic.md).
 *   long-answers  the long tail is in generated tokens: each group's answer (its generated tokens
 *                 over all its turns) has a budget from a long-tailed list (median 16 tokens, mean
 *                 59, two groups of 300-360), turns end at their call as above, so a long answer
 *                 is also many turns (~16), and the tool calls are meant to be short beside the
 *                 decode (Heddle: 0.4-1.4 s of tool against tens of seconds of generation per step).
 *                 The long groups' path is then their decode at saturated engines, where the
 *                 order of claims and turns and the placement decide how long they queue.
 */
/** Context limit: an observation that would not fit ends the episode (the model's is 512). */
export const MAX_CONTEXT = 500;

export const SCHED_WORKLOADS = ['tool-waits', 'long-answers'] as const;
export type SchedWorkload = (typeof SCHED_WORKLOADS)[number];

/** `--sched-workload` when not given. */
export const DEFAULT_WORKLOAD: SchedWorkload = 'tool-waits';

/** tool-waits: turns per group (the mean is 2.8; the long groups at positions 7 and 15 of 16). */
export const TURNS_BY_GROUP = [1, 1, 2, 1, 3, 1, 2, 12, 1, 2, 1, 4, 1, 1, 2, 10];

/** long-answers: generated tokens per group (median 16, mean 59; the long groups at 7 and 15 of 16). */
export const TOKENS_BY_GROUP = [8, 12, 24, 8, 40, 12, 16, 360, 8, 24, 12, 64, 8, 16, 32, 300];

/** long-answers: no turn limit below what the context allows (6 prompt tokens, ~22 + 6 a turn). */
const LONG_ANSWER_TURNS = 24;

/**
 * The job around each workload when its flags are not given (`--sched-groups`, ...): the engines'
 * decode batch and step, the agents' places, the tools' time. A workload's tail only means
 * something beside them: a tail in turns needs tools long beside a turn's decode, a tail in
 * tokens engines whose decode it occupies (docs/performance/agentic.md, "The workload against
 * Heddle's").
 */
export interface WorkloadDefaults {
  groups: number;
  groupSize: number;
  maxRunning: number;
  inFlight: number;
  atTools: number;
  toolMs: number;
  stepMs: number;
}

export const WORKLOAD_DEFAULTS: Readonly<Record<SchedWorkload, Readonly<WorkloadDefaults>>> = {
  // 2 sequences decoded an engine, 6 queued beyond them (the queue progressive priority orders),
  // 96 more at tools: an agent owns up to 104 trajectories, as a rollout of Heddle's holds its
  // batch (~100). With 32 (before 2026-12-01) what the agents could own, not the engines, bounded
  // the batch (Little's law: 1,327 tokens/s an agent against an engine's 2,535): longest-first
  // claims filled every place with the long tail, waiting at tools for 10 s while the engines
  // idled (docs/performance/agentic.md). 128 groups (2026-11-30 20:30; 48 before): at 48 the
  // batch was path-bound and first-in-first-out came within 1.19-1.43 of its bound, too little
  // for a scheduler's gain to stand out of the machine's noise.
  'tool-waits': { groups: 128, groupSize: 4, maxRunning: 2, inFlight: 8, atTools: 96, toolMs: 1000, stepMs: 0 },
  // Heddle's proportions (docs/performance/agentic.md): tools short beside a step's generation
  // (§7.5, Table 1: 0.05 s for the math agent's calculator against tens of seconds of generation
  // a step), and each engine decoding a sizeable share of its batch at once with a GPU-like
  // step that occupies the engine and not the CPU (`/slow_down`), 8 more requests queued beyond.
  // 16 at once puts the longest trajectory's path about the batch's work (the longest answer's
  // 360 tokens x 2 engines x 16 = 11,520, the batch's 11,328 tokens), where a scheduler has room.
  'long-answers': { groups: 48, groupSize: 4, maxRunning: 16, inFlight: 24, atTools: 32, toolMs: 50, stepMs: 80 },
};

/** What the payload of group `i` limits: its turns and its generated tokens. */
export interface GroupShape {
  maxTurns: number;
  maxNewTokens: number;
}

export function groupShape(workload: SchedWorkload, i: number): GroupShape {
  if (workload === 'tool-waits') return { maxTurns: TURNS_BY_GROUP[i % TURNS_BY_GROUP.length]!, maxNewTokens: MAX_CONTEXT };
  return { maxTurns: LONG_ANSWER_TURNS, maxNewTokens: TOKENS_BY_GROUP[i % TOKENS_BY_GROUP.length]! };
}

/** The agents' turn limit: the most any group of the workload may take. */
export function maxTurnsOf(workload: SchedWorkload): number {
  return workload === 'tool-waits' ? Math.max(...TURNS_BY_GROUP) : LONG_ANSWER_TURNS;
}

/** The workload's list, for the JSON line. */
export function lengthsOf(workload: SchedWorkload): { sched_turns_by_group: number[] } | { sched_tokens_by_group: number[] } {
  return workload === 'tool-waits' ? { sched_turns_by_group: TURNS_BY_GROUP } : { sched_tokens_by_group: TOKENS_BY_GROUP };
}
