/**
 * Progressive priority across a tool-call move (src/rollout-agent/turn-priority.ts, issue #49): a
 * trajectory the manager's dp planner moves at a tool call is predicted afresh by its new
 * rollout's predictor, whose history is that rollout's own. Before the fix a long trajectory moved
 * to a rollout whose history never went as far went to the engine at priority 0 at every turn
 * (the predictor fell back to "the job's median less what it did"): last in line, the long tail
 * progressive priority is meant to serve first.
 */
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import type { RemainingLength, RemainingLengthPredictor } from '../../src/manager/agentic/remaining-length.js';
import type { GenerationTask } from '../../src/rollout/task.js';
import { ProgressivePriority } from '../../src/rollout-agent/turn-priority.js';

const TOKENS_A_TURN = 22;
/** The agentic bench's turns per group (bench/agentic-workloads.ts): mostly 1-4 turns, two long groups. */
const TURNS = [1, 1, 2, 1, 3, 1, 2, 12, 1, 2, 1, 4, 1, 1, 2, 10];

/** What ProgressivePriority reads of a task: its id, group, generated tokens and closed turns. */
function task(id: string, group: string, turns: number): GenerationTask {
  const segments = Array.from({ length: turns }, () => ({ kind: 'generated' as const, length: TOKENS_A_TURN }));
  return { trajectoryId: id, groupId: group, modelTokens: turns * TOKENS_A_TURN, segments } as unknown as GenerationTask;
}

function rollout(): ProgressivePriority {
  const error = new Histogram({ name: 'e', help: 'e', labelNames: ['predictor'], registers: [new Registry()] });
  return new ProgressivePriority({ error });
}

/** Runs whole groups of 4 through a rollout turn by turn, to their end: its history. */
function finishGroups(p: ProgressivePriority, turnsByGroup: readonly number[], prefix: string): void {
  turnsByGroup.forEach((turns, g) => {
    for (let s = 0; s < 4; s++) {
      const id = `${prefix}${g}-${s}`;
      for (let k = 0; k < turns; k++) p.priorityOf(task(id, `${prefix}${g}`, k));
      p.finished(task(id, `${prefix}${g}`, turns));
    }
  });
}

describe('ProgressivePriority across a tool-call move', () => {
  it('keeps a moved long trajectory ahead of the short ones on a rollout whose history never went as far', () => {
    const source = rollout();
    const destination = rollout();
    const batch = [...TURNS, ...TURNS, ...TURNS];
    // The planner gathered the long tail on the source: the destination finished short groups only.
    finishGroups(source, batch, 's');
    finishGroups(
      destination,
      batch.filter((t) => t <= 4),
      'd',
    );
    for (const turns of [5, 6, 9]) {
      const id = `long-${turns}`;
      // On the source, at its tool call after `turns` turns: predicted long (it has seen such).
      const before = source.priorityOf(task(id, 'long', turns));
      expect(before).toBeGreaterThan(0);
      // Moved: the source forgets it, the destination predicts it for its next turn.
      source.left(id);
      const after = destination.priorityOf(task(id, 'long', turns));
      // Ahead of any trajectory the destination starts now (the longest first, as on the source), never 0.
      const shortest = Math.max(...[0, 1, 2, 3].map((k) => destination.priorityOf(task(`new-${turns}-${k}`, 'new', k))));
      expect(after, `moved at turn ${turns}`).toBeGreaterThan(shortest);
      // Its next turns there too: still predicted, not dropped to 0 as it outlives the history.
      expect(destination.priorityOf(task(id, 'long', turns + 1))).toBeGreaterThan(shortest);
    }
  });
});

/** A predictor that answers what it is told: the ordering under test is the priority's, not the prediction's. */
class FixedPredictor implements RemainingLengthPredictor {
  constructor(private readonly answers: ReadonlyMap<string, RemainingLength>) {}
  observe(progress: { id: string }): RemainingLength {
    return this.answers.get(progress.id) ?? { tokens: 0, turns: 1 };
  }
  finish(): void {}
  forget(): void {}
}

/** A trajectory after `turns` turns, each of 10 tokens ended by a call of `tool` that took `latencyMs`. */
function afterTools(id: string, turns: number, tool: string, latencyMs: number): GenerationTask {
  const segments = [];
  for (let k = 0; k < turns; k++) {
    segments.push({ kind: 'generated' as const, length: 10 });
    segments.push({ kind: 'observation' as const, length: 5, action: { tool, actionId: `${id}/turn-${k}`, status: 'ok', latencyMs } });
  }
  return { trajectoryId: id, groupId: 'g', modelTokens: turns * 10, segments } as unknown as GenerationTask;
}

describe('ProgressivePriority by predicted remaining time', () => {
  // Near its end with many tool calls left against one with more tokens but no call left.
  const answers = new Map([
    ['calls', { tokens: 2, turns: 6 }],
    ['tokens', { tokens: 60, turns: 1 }],
  ]);
  function priorities(): ProgressivePriority {
    const error = new Histogram({ name: 'e', help: 'e', labelNames: ['predictor'], registers: [new Registry()] });
    return new ProgressivePriority({ error, predictor: new FixedPredictor(answers), baseline: new FixedPredictor(answers) });
  }

  it('ranks 5 tool calls of 1 s above 60 tokens of 10 ms', () => {
    const p = priorities();
    p.decoded(100, 1000); // 10 ms a token
    const calls = p.priorityOf(afterTools('calls', 3, 'search', 1000));
    const tokens = p.priorityOf(afterTools('tokens', 3, 'search', 1000));
    expect(calls).toBe(2 * 10 + 5 * 1000);
    expect(tokens).toBe(60 * 10);
    expect(calls).toBeGreaterThan(tokens);
  });

  it('keeps the token ordering when tools are instant', () => {
    const p = priorities();
    p.decoded(100, 1000);
    const calls = p.priorityOf(afterTools('calls', 3, 'search', 0));
    const tokens = p.priorityOf(afterTools('tokens', 3, 'search', 0));
    expect(tokens).toBeGreaterThan(calls);
  });

  it('falls back to the predicted tokens until the decode rate and a tool latency are measured', () => {
    const p = priorities();
    // A tool latency but no stream measured yet.
    expect(p.priorityOf(afterTools('calls', 3, 'search', 1000))).toBe(2);
    expect(p.priorityOf(afterTools('tokens', 3, 'search', 1000))).toBe(60);
  });

  it("costs a trajectory's remaining calls at its own tool's latency", () => {
    const p = priorities();
    p.decoded(100, 1000);
    // A slow tool seen first, then a fast one: each trajectory's calls are costed by the tool it calls.
    const slow = p.priorityOf(afterTools('calls', 1, 'compile', 2000));
    p.left('calls');
    const fast = p.priorityOf(afterTools('calls', 2, 'search', 100));
    expect(slow).toBe(20 + 5 * 2000);
    expect(fast).toBe(20 + 5 * 100);
  });
});

describe("ProgressivePriority with the prompt's history", () => {
  /** `task` of the file's first part, with the prompt's recorded length (PromptClaim.lastLength). */
  const withHistory = (id: string, turns: number, groupLastLength: number | undefined): GenerationTask =>
    Object.assign(task(id, `group-of-${id}`, turns), { groupLastLength });

  it('starts a trajectory of a prompt that ran long last time ahead of the fresh ones, and lowers it as it catches up', () => {
    const p = rollout();
    finishGroups(p, [...TURNS, ...TURNS], 'h');
    const fresh = p.priorityOf(withHistory('fresh', 0, undefined));
    const short = p.priorityOf(withHistory('short', 0, TOKENS_A_TURN));
    const long = p.priorityOf(withHistory('long', 0, 12 * TOKENS_A_TURN));
    // A prompt recorded short says nothing beyond the predictor; a long one lifts its trajectory.
    expect(short).toBe(fresh);
    expect(long).toBeGreaterThan(fresh);
    // Its remaining tokens are the history's less what it generated: 12 turns' worth at its start.
    expect(p.predict(withHistory('long', 0, 12 * TOKENS_A_TURN)).tokens).toBe(12 * TOKENS_A_TURN);
    // Turn by turn its priority falls as it catches up with its history.
    let previous = long;
    for (let turns = 1; turns < 12; turns++) {
      const now = p.priorityOf(withHistory('long', turns, 12 * TOKENS_A_TURN));
      expect(now, `after ${turns} turns`).toBeLessThanOrEqual(previous);
      previous = now;
    }
    // In turns too, from this agent's tokens a turn (the history's groups: 22 each).
    expect(p.predict(withHistory('long2', 0, 12 * TOKENS_A_TURN)).turns).toBe(12);
  });
});

describe("ProgressivePriority within the episode's turn limit", () => {
  it('never predicts more turns than the limit leaves, however short the agent has seen turns run', () => {
    const p = rollout();
    p.decoded(100, 1000); // 10 ms a token
    // The agent has seen turns of 10 tokens; a prompt that ran 1,000 tokens last time.
    for (let k = 0; k <= 3; k++) p.priorityOf(afterTools('seen', k, 'lookup', 1000));
    const long = (id: string): GenerationTask => Object.assign(afterTools(id, 1, 'lookup', 1000), { groupLastLength: 1000 });
    // From the history alone: 990 tokens left at 10 a turn, 99 turns.
    expect(p.predict(long('unbounded')).turns).toBe(99);
    // An episode of 12 turns has 11 left after its first.
    expect(p.predict(long('bounded'), 12)).toEqual({ tokens: 990, turns: 11 });
    expect(p.priorityOf(long('ranked'), 12)).toBe(990 * 10 + 10 * 1000);
  });
});
