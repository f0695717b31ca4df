/**
 * Replays recorded trajectories through a remaining-length predictor in time order and measures
 * its error, so that a predictor and its baseline are compared on the same events (the agentic
 * bench and the tests use it; traces come from the simulator's workload or a real job's log).
 *
 * At every turn boundary (a trajectory's start and the end of each turn at a tool call) the
 * predictor is asked for the remaining tokens and turns, and the absolute errors against the
 * trajectory's actual remainder are summed. Finishes are delivered at their time, so a predictor
 * only ever knows the trajectories that have ended before the moment it predicts.
 */
import type { RemainingLengthPredictor } from './remaining-length.js';

export interface TrajectoryTrace {
  id: string;
  group: string;
  /** Training step; predictions of steps below `fromStep` train the predictors but are not scored. */
  step: number;
  /** Output tokens at the end of each turn that ends in a tool call, increasing. */
  callsAt: number[];
  /** Times (ms) at which each of those turns ends. */
  callTimesMs: number[];
  startMs: number;
  totalTokens: number;
  finishMs: number;
}

export interface PredictionError {
  predictions: number;
  /** Mean absolute error of the remaining tokens. */
  tokensMae: number;
  /** Mean absolute error of the remaining turns. */
  turnsMae: number;
  /**
   * The same over the predictions made once a trajectory has ended at least one turn. At its
   * start a trajectory has shown nothing of itself yet, so every predictor without the prompt's
   * text can only answer the job's (or group's) median there.
   */
  afterFirstTurn: { predictions: number; tokensMae: number; turnsMae: number };
}

class ErrorSum {
  n = 0;
  tokens = 0;
  turns = 0;
  add(tokens: number, turns: number): void {
    this.n++;
    this.tokens += tokens;
    this.turns += turns;
  }
  get result(): { predictions: number; tokensMae: number; turnsMae: number } {
    return { predictions: this.n, tokensMae: this.n === 0 ? 0 : this.tokens / this.n, turnsMae: this.n === 0 ? 0 : this.turns / this.n };
  }
}

/** kind: 0 a turn boundary (call index, or -1 for the start), 1 a finish; finishes first at equal times. */
interface ReplayEvent {
  atMs: number;
  kind: 0 | 1;
  trace: TrajectoryTrace;
  call: number;
}

export function replayPredictions(traces: readonly TrajectoryTrace[], predictor: RemainingLengthPredictor, fromStep = 0): PredictionError {
  const events: ReplayEvent[] = [];
  for (const trace of traces) {
    events.push({ atMs: trace.startMs, kind: 0, trace, call: -1 });
    trace.callTimesMs.forEach((atMs, call) => events.push({ atMs, kind: 0, trace, call }));
    events.push({ atMs: trace.finishMs, kind: 1, trace, call: 0 });
  }
  events.sort((a, b) => a.atMs - b.atMs || b.kind - a.kind);
  const all = new ErrorSum();
  const later = new ErrorSum();
  for (const { kind, trace, call } of events) {
    const totalTurns = trace.callsAt.length + 1;
    if (kind === 1) {
      predictor.finish(trace.id, { tokens: trace.totalTokens, turns: totalTurns });
      continue;
    }
    const tokens = call < 0 ? 0 : trace.callsAt[call]!;
    const turns = call + 1;
    const p = predictor.observe({ id: trace.id, group: trace.group, tokens, turns });
    if (trace.step < fromStep) continue;
    const tokensErr = Math.abs(p.tokens - (trace.totalTokens - tokens));
    const turnsErr = Math.abs(p.turns - (totalTurns - turns));
    all.add(tokensErr, turnsErr);
    if (turns > 0) later.add(tokensErr, turnsErr);
  }
  return { ...all.result, afterFirstTurn: later.result };
}
