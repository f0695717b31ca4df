/**
 * The agentic bench's regime figures (bench/agentic-sched.ts, regime()): which of the batch's work
 * over the engines' capacity and its critical path bounds the makespan, so that a reader of the
 * bench sees whether any order of claims and turns had room to gain.
 */
import { describe, expect, it } from 'vitest';
import { regime } from '../../bench/agentic-regime.js';
import type { SchedArgs } from '../../bench/agentic-sched.js';

const args = (o: Partial<SchedArgs>): SchedArgs => ({
  groups: 2,
  groupSize: 2,
  maxRunning: 2,
  inFlight: 8,
  atTools: 32,
  rounds: 1,
  configs: ['before', 'all'],
  deadlineS: 60,
  toolMs: 1000,
  workload: 'tool-waits',
  stepMs: 0,
  ...o,
});

// Two engines of 500 tokens/s at batch 2: 4 ms a token for one sequence.
const rate = { tokensPerS: 500, msPerToken: 4 };

describe('agentic sched regime', () => {
  it('takes the critical path from the longest trajectory: its tool waits (one fewer than its turns) and its tokens', () => {
    const paths = [
      { turns: 12, generated: 250 },
      { turns: 1, generated: 750 },
    ];
    const r = regime(args({}), { paths }, rate, 20);
    // 11 tool calls of 1 s and 250 tokens at 4 ms; the 1-turn one: no tool, 3 s.
    expect(r.sched_critical_path_s).toBe(12);
    // 1,000 tokens over 2 engines x 500 tokens/s (the agents own enough: 40 x 76.9 tokens a turn / 1.31 s each).
    expect(r.sched_work_over_capacity_s).toBe(1);
    expect(r.sched_makespan_lower_bound_s).toBe(12);
    expect(r.sched_gain_ceiling).toBeCloseTo(20 / 12, 3);
    expect(r.sched_path_over_work).toBe(12);
  });

  it("bounds the capacity by what the agents' owned trajectories can ask when tools are long", () => {
    const paths = Array.from({ length: 100 }, () => ({ turns: 2, generated: 40 }));
    // 20 tokens a turn; 2 owned per agent, each asking 20 tokens per 1,080 ms: 37 tokens/s, below 500.
    const r = regime(args({ inFlight: 1, atTools: 1 }), { paths }, rate, 100);
    expect(r.sched_owned_tokens_per_s).toBeCloseTo((2 * 20 * 1000) / 1080, 1);
    expect(r.sched_work_over_capacity_s).toBeCloseTo(4000 / (2 * ((2 * 20 * 1000) / 1080)), 1);
    // Owning many, the engines' rate bounds it again.
    expect(regime(args({ inFlight: 100, atTools: 100 }), { paths }, rate, 100).sched_work_over_capacity_s).toBe(4);
  });

  it('says nothing without a batch or a measured rate', () => {
    expect(regime(args({}), undefined, rate, 10)).toEqual({});
    expect(regime(args({}), { paths: [{ turns: 1, generated: 1 }] }, { tokensPerS: Number.NaN, msPerToken: Number.NaN }, 10)).toEqual({});
  });
});
