/**
 * The regime of the agentic bench's `sched` batch (agentic-sched.ts): its work over the engines'
 * capacity against its critical path, the least makespan they allow per configuration, and where
 * a batch spent the rest (the engines' busy timelines, the trajectory that ended last, the long
 * tail's spread over the engines). Apart from agentic-sched.ts so that its test
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
 * agent owns at most inFlight + atTools trajectories, and each spends at least a turn's decode per
 * turn and a tool call per turn but its last (Little's law), so with long tools and few owned the
 * engines idle. (Until 2026-12-01 every turn was charged a tool call: with 1.8 calls in a
 * trajectory of 2.8 turns, the bound came out 16 % above the makespan `claims` reached.)
 */
export function regime(
  a: Pick<SchedArgs, 'inFlight' | 'atTools' | 'toolMs'>,
  batch: { paths: readonly { turns: number; generated: number }[] } | undefined,
  rate: EngineRate,
  beforeMakespanS: number,
): Record<string, number> {
  if (batch === undefined || !Number.isFinite(rate.tokensPerS)) return {};
  const b = makespanBound(a, batch, rate, 0);
  return {
    sched_engine_tokens_per_s: round(rate.tokensPerS, 1),
    sched_ms_per_token_at_batch: round(rate.msPerToken, 3),
    // What one agent's owned trajectories can ask of its engine at most (tokens/s).
    sched_owned_tokens_per_s: round(b.ownedTokensPerS, 1),
    sched_work_tokens: b.tokens,
    sched_work_over_capacity_s: round(b.decodeS, 2),
    sched_critical_path_s: round(b.pathS, 2),
    sched_path_over_work: round(b.pathS / b.decodeS, 2),
    sched_makespan_lower_bound_s: round(b.boundS, 2),
    // The most any order of claims and turns could gain over before on these engines.
    sched_gain_ceiling: round(beforeMakespanS / b.boundS),
  };
}

/** One batch's lower bound on its makespan, and its two terms. */
export interface MakespanBound {
  tokens: number;
  /** What one agent's owned trajectories can ask of its engine (tokens/s, Little's law). */
  ownedTokensPerS: number;
  /** The generated tokens over the engines' capacity (s). */
  decodeS: number;
  /** The prompt tokens the engines computed (not served by their prefix caches), spread over the engines (s). */
  prefillS: number;
  /** The longest trajectory's own path (s). */
  pathS: number;
  /** max(decodeS + prefillS, pathS). */
  boundS: number;
}

/**
 * The least makespan a batch allows on these engines (see regime()): its work, decode plus the
 * prefills it caused, over the engines' capacity, or its longest trajectory's own path, whichever
 * is longer. Per configuration, since the prefills differ with the prefix cache's hits (moves
 * re-prefill; longest-first runs the longest contexts side by side). A makespan over this is time
 * the scheduling lost: queueing of the critical trajectory, an engine idle at the tail, the
 * agents' own time per turn (which neither term counts, so that the bound stays a bound).
 */
export function makespanBound(
  a: Pick<SchedArgs, 'inFlight' | 'atTools' | 'toolMs'>,
  batch: { paths: readonly { turns: number; generated: number }[]; prefilled?: number },
  rate: EngineRate,
  prefillMsPerToken: number,
): MakespanBound {
  const tokens = batch.paths.reduce((n, p) => n + p.generated, 0);
  const turns = batch.paths.reduce((n, p) => n + p.turns, 0);
  const toolCalls = batch.paths.reduce((n, p) => n + Math.max(0, p.turns - 1), 0);
  const perTurn = tokens / Math.max(1, turns);
  // A trajectory's last turn ends it without a tool call.
  const toolMsPerTurn = turns > 0 ? (a.toolMs * toolCalls) / turns : a.toolMs;
  const ownedTokensPerS = ((a.inFlight + a.atTools) * perTurn * 1000) / (toolMsPerTurn + perTurn * rate.msPerToken);
  const decodeS = tokens / (ENGINES * Math.min(rate.tokensPerS, ownedTokensPerS));
  const prefillS = ((batch.prefilled ?? 0) * prefillMsPerToken) / (ENGINES * 1000);
  const pathS = Math.max(0, ...batch.paths.map((p) => ownPathS(a, p, rate)));
  return { tokens, ownedTokensPerS, decodeS, prefillS, pathS, boundS: Math.max(decodeS + prefillS, pathS) };
}

/** A trajectory's own path, never queued: its tool calls (one fewer than its turns) and its tokens at one sequence's time at the engines' batch (s). */
export function ownPathS(a: Pick<SchedArgs, 'toolMs'>, p: { turns: number; generated: number }, rate: EngineRate): number {
  return (Math.max(0, p.turns - 1) * a.toolMs + p.generated * rate.msPerToken) / 1000;
}

/** One sample of the engines' load: when (ms after the batch started) and each engine's running requests. */
export interface EngineSample {
  atMs: number;
  running: readonly number[];
}

/** What the engines' busy timelines say of a batch (busyTimeline()). */
export interface BusyTimeline {
  /** The engines' mean occupancy: running over their decode batch, over the batch and all engines (0-1). */
  busyShare: number;
  /** Engine-seconds of decode slots left empty, over the batch (slots empty over the decode batch, summed over engines). */
  idleEngineS: number;
  /** The tail: from the last sample at which every engine ran its full decode batch to the batch's end (s). */
  tailS: number;
  /** The engines' mean occupancy within the tail (0-1). */
  tailBusyShare: number;
}

/**
 * The engines' busy timelines, from samples of their running requests: how much of their decode
 * capacity a batch left unused, and where: in the tail after the engines were last all full,
 * where a long trajectory claimed late or queued behind short turns keeps the batch open on an
 * engine that has nothing else to do (Heddle §2.2: the cluster idling for its stragglers). Each
 * sample holds until the next (the last until the batch's end).
 */
export function busyTimeline(samples: readonly EngineSample[], decodeBatch: number, makespanMs: number): BusyTimeline {
  const sorted = [...samples].filter((s) => s.atMs <= makespanMs).sort((x, y) => x.atMs - y.atMs);
  if (sorted.length === 0 || makespanMs <= 0) return { busyShare: Number.NaN, idleEngineS: Number.NaN, tailS: Number.NaN, tailBusyShare: Number.NaN };
  const engines = sorted[0]!.running.length;
  const occupancy = (s: EngineSample): number => s.running.reduce((n, r) => n + Math.min(r, decodeBatch), 0) / (engines * decodeBatch);
  const full = sorted.map((s) => s.running.every((r) => r >= decodeBatch));
  const lastFull = full.lastIndexOf(true);
  // The tail starts where the last full sample's interval ends (at 0 if the engines were never all full).
  const tailStartMs = lastFull < 0 ? 0 : (sorted[lastFull + 1]?.atMs ?? makespanMs);
  let busy = 0;
  let tailBusy = 0;
  for (const [i, s] of sorted.entries()) {
    // Before the first sample the engines are taken as in the first (the batch starts loading at once).
    const from = i === 0 ? 0 : s.atMs;
    const to = sorted[i + 1]?.atMs ?? makespanMs;
    busy += occupancy(s) * (to - from);
    tailBusy += occupancy(s) * Math.max(0, to - Math.max(from, tailStartMs));
  }
  const tailMs = makespanMs - tailStartMs;
  return {
    busyShare: busy / makespanMs,
    idleEngineS: ((makespanMs - busy) * engines) / 1000,
    tailS: tailMs / 1000,
    tailBusyShare: tailMs > 0 ? tailBusy / tailMs : 1,
  };
}

/** One generate request's times (ms, performance.now()): sent, its first token back, its end. */
export interface RequestTimes {
  engine: number;
  sentMs: number;
  firstTokenMs: number;
  endMs: number;
}

/**
 * The largest share of the batch's long tail (its eighth of trajectories with the most requests)
 * that any one engine served, counting each request where it went: 1/engines is an even spread,
 * 1 the whole tail on one engine, queueing behind itself there while the other has none of it.
 */
export function longTailShare(turns: ReadonlyMap<string, readonly RequestTimes[]>, engines: number): number {
  const lists = [...turns.values()].sort((x, y) => y.length - x.length);
  const tail = lists.slice(0, Math.max(1, Math.round(lists.length / 8))).flat();
  if (tail.length === 0) return Number.NaN;
  const per = Array.from({ length: engines }, (_, e) => tail.filter((t) => t.engine === e).length);
  return Math.max(...per) / tail.length;
}

/** The trajectory that ended last, its requests' times summed (s). */
export interface LastSplit {
  requests: number;
  atEngineS: number;
  decodingS: number;
  betweenS: number;
}

/**
 * Where the trajectory that ended last spent its time, from its requests: waiting at the engine
 * (sent to the first token: the engine's queue and its prefill), decoding (first token to end),
 * and between its requests (its tool calls and the agent's own time per turn boundary, the wait
 * for a place at the engine in the agent's line included). Null without requests.
 */
export function lastTrajectory(turns: ReadonlyMap<string, readonly RequestTimes[]>): LastSplit | null {
  let last: readonly RequestTimes[] | undefined;
  for (const list of turns.values()) if (!last || list.at(-1)!.endMs > last.at(-1)!.endMs) last = list;
  if (!last) return null;
  const sumS = (f: (t: RequestTimes, i: number) => number): number => last.reduce((n, t, i) => n + f(t, i), 0) / 1000;
  return {
    requests: last.length,
    atEngineS: sumS((t) => (Number.isNaN(t.firstTokenMs) ? t.endMs - t.sentMs : t.firstTokenMs - t.sentMs)),
    decodingS: sumS((t) => (Number.isNaN(t.firstTokenMs) ? 0 : t.endMs - t.firstTokenMs)),
    betweenS: sumS((t, i) => (i === 0 ? 0 : t.sentMs - last[i - 1]!.endMs)),
  };
}

/**
 * Where the agents' owned places went (slotAccount()), each a share of all they could own over the
 * batch (in-flight + at-tools, per agent, times the makespan): the five add up to 1.
 */
export interface SlotAccount {
  /** Places owned by nobody: the agents held fewer trajectories than they may (claims late or too few, the tail). */
  empty: number;
  /** Owned, at a tool call: the tool's own time (`toolMs` a call). */
  tools: number;
  /** Owned, sent to the engine and not yet given a first token (its queue and the prefill). */
  atEngine: number;
  /** Owned, decoding. */
  decoding: number;
  /**
   * Owned, and none of the above: the agent's own time (claiming, the turn boundaries, a tool
   * call's round trip beyond the tool, the record's write) and its line for a place at the engine.
   */
  agent: number;
}

/**
 * The agents' owned places over a batch, split: what Little's law in makespanBound() assumes (every
 * place always owned, each turn only its decode and its tool) against what happened. `ownedMean`
 * is the mean of all agents' owned trajectories together (sampled); `capacity` what they may own
 * together; the requests are every trajectory's (the engine clients' times).
 */
export function slotAccount(
  turns: ReadonlyMap<string, readonly RequestTimes[]>,
  toolMs: number,
  ownedMean: number,
  capacity: number,
  makespanMs: number,
): SlotAccount {
  const total = capacity * makespanMs;
  if (!(total > 0)) return { empty: Number.NaN, tools: Number.NaN, atEngine: Number.NaN, decoding: Number.NaN, agent: Number.NaN };
  let atEngine = 0;
  let decoding = 0;
  let tools = 0;
  for (const list of turns.values()) {
    tools += Math.max(0, list.length - 1) * toolMs;
    for (const t of list) {
      const first = Number.isNaN(t.firstTokenMs) ? t.endMs : t.firstTokenMs;
      atEngine += first - t.sentMs;
      decoding += t.endMs - first;
    }
  }
  const owned = Math.min(ownedMean, capacity) * makespanMs;
  return {
    empty: 1 - owned / total,
    tools: tools / total,
    atEngine: atEngine / total,
    decoding: decoding / total,
    agent: (owned - tools - atEngine - decoding) / total,
  };
}
