/**
 * The agentic bench's regime figures (bench/agentic-sched.ts, regime()): which of the batch's work
 * over the engines' capacity and its critical path bounds the makespan, so that a reader of the
 * bench sees whether any order of claims and turns had room to gain.
 */
import { describe, expect, it } from 'vitest';
import { busyTimeline, lastTrajectory, longTailShare, makespanBound, regime, slotAccount, type RequestTimes } from '../../bench/agentic-regime.js';
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
  preemptionThreshold: 10,
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
    // 1,000 tokens over 2 engines x 500 tokens/s (the agents own enough: 40 x 76.9 tokens a turn / 1.15 s each).
    expect(r.sched_work_over_capacity_s).toBe(1);
    expect(r.sched_makespan_lower_bound_s).toBe(12);
    expect(r.sched_gain_ceiling).toBeCloseTo(20 / 12, 3);
    expect(r.sched_path_over_work).toBe(12);
  });

  it("bounds the capacity by what the agents' owned trajectories can ask when tools are long", () => {
    const paths = Array.from({ length: 100 }, () => ({ turns: 2, generated: 40 }));
    // 20 tokens a turn, and a tool call in every turn but a trajectory's last: 500 ms a turn on
    // average. 2 owned per agent, each asking 20 tokens per 580 ms: 69 tokens/s, below 500.
    const r = regime(args({ inFlight: 1, atTools: 1 }), { paths }, rate, 100);
    expect(r.sched_owned_tokens_per_s).toBeCloseTo((2 * 20 * 1000) / 580, 1);
    expect(r.sched_work_over_capacity_s).toBeCloseTo(4000 / (2 * ((2 * 20 * 1000) / 580)), 1);
    // Owning many, the engines' rate bounds it again.
    expect(regime(args({ inFlight: 100, atTools: 100 }), { paths }, rate, 100).sched_work_over_capacity_s).toBe(4);
  });

  it('says nothing without a batch or a measured rate', () => {
    expect(regime(args({}), undefined, rate, 10)).toEqual({});
    expect(regime(args({}), { paths: [{ turns: 1, generated: 1 }] }, { tokensPerS: Number.NaN, msPerToken: Number.NaN }, 10)).toEqual({});
  });

  it('adds the prefills the batch caused to its work, spread over the engines, and bounds by the larger term', () => {
    const paths = Array.from({ length: 10 }, () => ({ turns: 2, generated: 100 }));
    // 1,000 tokens over 2 x 500 tokens/s: 1 s of decode; 4,000 prompt tokens at 0.5 ms over 2 engines: 1 s of prefill.
    const b = makespanBound(args({}), { paths, prefilled: 4000 }, rate, 0.5);
    expect(b.decodeS).toBe(1);
    expect(b.prefillS).toBe(1);
    // The path: 1 tool call of 1 s and 100 tokens at 4 ms.
    expect(b.pathS).toBeCloseTo(1.4, 9);
    expect(b.boundS).toBe(2);
    // Without prefills the path bounds.
    expect(makespanBound(args({}), { paths }, rate, 0.5).boundS).toBeCloseTo(1.4, 9);
  });
});

describe("agentic sched engines' busy timelines", () => {
  it('measures the unused decode slots, and the tail after the engines were last all full', () => {
    // Two engines of batch 2, sampled every second over a 4-s batch: both full for 2 s, then one
    // engine runs 1 and the other nothing (an engine waiting for the straggler on the other).
    const samples = [
      { atMs: 0, running: [2, 2] },
      { atMs: 1000, running: [2, 2] },
      { atMs: 2000, running: [1, 0] },
      { atMs: 3000, running: [1, 0] },
    ];
    const t = busyTimeline(samples, 2, 4000);
    expect(t.busyShare).toBeCloseTo((2 * 1000 + 2 * 0.25 * 1000) / 4000, 9);
    // 2 engines x 4 s, less the busy share.
    expect(t.idleEngineS).toBeCloseTo(2 * 4 * (1 - t.busyShare), 9);
    expect(t.tailS).toBe(2);
    expect(t.tailBusyShare).toBe(0.25);
  });

  it('has no tail when the engines are full to the end, all tail when never full, and counts no more than the decode batch', () => {
    const full = busyTimeline(
      [
        { atMs: 0, running: [3, 2] },
        { atMs: 500, running: [2, 5] },
      ],
      2,
      1000,
    );
    expect(full).toEqual({ busyShare: 1, idleEngineS: 0, tailS: 0, tailBusyShare: 1 });
    const never = busyTimeline([{ atMs: 0, running: [1, 1] }], 2, 2000);
    expect(never.tailS).toBe(2);
    expect(never.busyShare).toBe(0.5);
    // Samples after the batch's end are not counted; none at all: nothing to say.
    expect(busyTimeline([{ atMs: 5000, running: [2, 2] }], 2, 1000).busyShare).toBeNaN();
  });
});

describe('agentic sched: the trajectory that ended last, and where the long tail ran', () => {
  const req = (engine: number, sentMs: number, firstTokenMs: number, endMs: number): RequestTimes => ({ engine, sentMs, firstTokenMs, endMs });

  it("splits the last trajectory's time: at the engine to its first token, decoding, and between its requests", () => {
    const turns = new Map<string, RequestTimes[]>([
      // Ends at 900: not the last.
      ['short', [req(0, 0, 100, 900)]],
      // Two turns: 200 ms to its first token then 300 decoding; 1,000 between; 500 to its first token then 100.
      ['long', [req(1, 0, 200, 500), req(1, 1500, 2000, 2100)]],
    ]);
    expect(lastTrajectory(turns)).toEqual({ requests: 2, atEngineS: 0.7, decodingS: 0.4, betweenS: 1 });
    // A request that streamed nothing (aborted before its first token) counts at the engine whole.
    expect(lastTrajectory(new Map([['a', [req(0, 0, Number.NaN, 300)]]]))).toEqual({ requests: 1, atEngineS: 0.3, decodingS: 0, betweenS: 0 });
    expect(lastTrajectory(new Map())).toBeNull();
  });

  it("measures how much of the long tail's requests one engine served", () => {
    const turns = new Map<string, RequestTimes[]>();
    // 16 trajectories: 14 of one request; the longest eighth (2) have 3 requests each.
    for (let i = 0; i < 14; i++) turns.set(`s${i}`, [req(i % 2, 0, 1, 2)]);
    turns.set('l0', [req(0, 0, 1, 2), req(0, 3, 4, 5), req(0, 6, 7, 8)]);
    turns.set('l1', [req(0, 0, 1, 2), req(1, 3, 4, 5), req(1, 6, 7, 8)]);
    // 4 of the 6 long requests on engine 0 (one trajectory moved after its first turn).
    expect(longTailShare(turns, 2)).toBeCloseTo(4 / 6, 9);
    turns.set('l1', [req(0, 0, 1, 2), req(0, 3, 4, 5), req(0, 6, 7, 8)]);
    expect(longTailShare(turns, 2)).toBe(1);
    expect(longTailShare(new Map(), 2)).toBeNaN();
  });

  it("splits the agents' owned places: empty, at tools, at the engine, decoding, and the agent's own", () => {
    const turns = new Map<string, RequestTimes[]>([
      // Two turns, one tool call of 1,000 ms between them: 200 at the engine, 300 decoding; then 500 and 100.
      ['long', [req(1, 0, 200, 500), req(1, 1600, 2100, 2200)]],
      // One turn: 100 at the engine, 800 decoding.
      ['short', [req(0, 0, 100, 900)]],
    ]);
    // 4 places over 2,500 ms (10,000 place-ms), 2 owned on average (5,000).
    const s = slotAccount(turns, 1000, 2, 4, 2500);
    expect(s.empty).toBeCloseTo(0.5, 9);
    expect(s.tools).toBeCloseTo(0.1, 9);
    expect(s.atEngine).toBeCloseTo(0.08, 9);
    expect(s.decoding).toBeCloseTo(0.12, 9);
    // 5,000 owned less 1,000 + 800 + 1,200.
    expect(s.agent).toBeCloseTo(0.2, 9);
    expect(s.empty + s.tools + s.atEngine + s.decoding + s.agent).toBeCloseTo(1, 9);
    // Never more owned than the places (a sample taken mid-claim can exceed them).
    expect(slotAccount(turns, 1000, 5, 4, 2500).empty).toBe(0);
    expect(slotAccount(turns, 1000, 2, 4, 0).empty).toBeNaN();
  });
});
