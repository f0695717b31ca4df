/**
 * The multi-turn agent loop of the tool-call task (docs/design/simulator.md, "Tool calls"): a
 * trajectory's request runs in its engine up to its next tool call (workload.ts gives the
 * positions and latencies), leaves the engine for the sandbox, freeing its KV, and comes back
 * to the same engine after the call's latency with every token so far (a resume: the engine
 * re-prefills prompt and output), until its last turn completes the response. The engine sees a
 * turn's end as a finish; only the last one is the trajectory's completion.
 *
 * In lockstep (mechanism turnLockstep, the verl-based baselines) a replica's turns go together, as
 * a batched multi-turn rollout loops: one generate call runs the turn of every trajectory the
 * replica still has; when the call returns (its engine empty) the tool calls of that turn start
 * together, and the next call starts when the slowest of them is back. A trajectory's call
 * therefore starts at its round's end, not at its own turn's end, and the engine idles through
 * the tool phase.
 *
 * The calls execute in the scenario's sandbox (sandbox.ts): unbounded, or a fixed number of slots
 * with a queue; or, with a tool-call schedule (agentic/tool-schedule.ts), in slots provisioned per
 * engine (static) or in one pool of the same size (elastic).
 *
 * A driver scheduling turns (issue #49, agentic/turn-scheduler.ts) may give each returning turn a
 * priority (`TurnHooks.priorityAtCall`), place it on another engine when its call returns
 * (`placeReturn`: least-load placement at every turn), or move it while it waits at its tool
 * (`relocate`: the manager's tool-call moves). Each trajectory at its tool is recorded under the
 * engine its next turn goes to.
 */
import type { EngineActor } from '../engine/engine-actor.js';
import type { LeapRequest } from '../engine/leap-engine.js';
import type { Simulation } from '../core/simulation.js';
import type { Workload } from '../workload/workload.js';
import { Sandbox } from './sandbox.js';

/** What a driver that schedules turns decides (every hook optional: without them, the loop of before). */
export interface TurnHooks {
  /**
   * The priority of trajectory `id`'s next turn, at the call that ended its turn `turns` after
   * `tokens` output tokens in `actor`'s engine.
   */
  priorityAtCall?: (actor: EngineActor, id: number, turns: number, tokens: number) => number;
  /** Where `req`'s next turn runs now that its call has returned; `from` is the engine it waited under. */
  placeReturn?: (from: EngineActor, req: LeapRequest) => EngineActor;
}

/** Where calls execute: the scenario's one sandbox, or `slots` per engine (static provisioning). */
export type SandboxProvisioning = { kind: 'shared'; slots: number | null } | { kind: 'per-engine'; slots: number };

export class ToolCallLoop {
  /** Calls made so far, per trajectory id (grows by doubling). */
  private turns = new Uint8Array(1024);
  /** Per engine, the trajectories out at their tool and the request each comes back as. */
  private readonly out = new Map<EngineActor, Map<number, LeapRequest>>();
  /** The engine each trajectory at its tool is recorded under (its next turn's, unless placed again). */
  private readonly at = new Map<number, EngineActor>();
  /** Per-engine sandboxes (static provisioning). */
  private readonly ownSandbox = new Map<EngineActor, Sandbox>();
  /** Trajectories moved to another engine while at their tool (relocate) or when back (placeReturn). */
  relocated = 0;
  returnedElsewhere = 0;
  /** Turn ends the engines reported (finishes that were not completions). */
  turnEnds = 0;
  /** Trajectories at their tool now (generating in the ledger, in no engine). */
  inCall = 0;
  /** Tool calls made, and their summed latency (ms, not counting a wait for a sandbox slot). */
  calls = 0;
  callLatencyMs = 0;
  /** Lockstep: per engine, the calls of the round in progress (latency, ms, per request). */
  private readonly round = new Map<EngineActor, Map<LeapRequest, number>>();
  /** Lockstep: engines with a round-end check queued (one per engine at a time). */
  private readonly checking = new Set<EngineActor>();
  /** Lockstep: tool phases run (one per round that ended with calls) and their summed length, ms. */
  toolPhases = 0;
  toolPhaseMs = 0;
  /** The shared sandbox (every call's, unless provisioned per engine). */
  readonly sandbox: Sandbox;
  hooks: TurnHooks = {};

  constructor(
    private readonly sim: Simulation,
    private readonly workload: Workload,
    /** Turns in lockstep per engine (mechanism turnLockstep); false: each trajectory on its own. */
    readonly lockstep = false,
    readonly provisioning: SandboxProvisioning = { kind: 'shared', slots: workload.toolCalls?.sandboxSlots ?? null },
  ) {
    this.sandbox = new Sandbox(sim, provisioning.kind === 'shared' ? provisioning.slots : null);
  }

  /** The sandbox the calls of `actor`'s trajectories run in. */
  sandboxOf(actor: EngineActor): Sandbox {
    if (this.provisioning.kind === 'shared') return this.sandbox;
    let own = this.ownSandbox.get(actor);
    if (own === undefined) this.ownSandbox.set(actor, (own = new Sandbox(this.sim, this.provisioning.slots)));
    return own;
  }

  /** Every sandbox's queueing: calls that waited for a slot and their summed wait, ms. */
  get queueing(): { queued: number; queuedMs: number } {
    let queued = this.sandbox.queued;
    let queuedMs = this.sandbox.queuedMs;
    for (const s of this.ownSandbox.values()) {
      queued += s.queued;
      queuedMs += s.queuedMs;
    }
    return { queued, queuedMs };
  }

  /** The trajectories recorded under `actor` that wait at their tool now. */
  atTool(actor: EngineActor): IterableIterator<number> {
    return (this.out.get(actor) ?? new Map<number, LeapRequest>()).keys();
  }

  /**
   * Trajectory `id`, waiting at its tool under `from`, will come back to `to` instead (a tool-call
   * move: it holds nothing at any engine, so nothing stops). False when it is not at its tool
   * under `from` (back already, or taken out).
   */
  relocate(id: number, from: EngineActor, to: EngineActor): boolean {
    if (this.lockstep) return false;
    const req = this.out.get(from)?.get(id);
    if (req === undefined) return false;
    this.out.get(from)!.delete(id);
    this.waitingOf(to).set(id, req);
    this.at.set(id, to);
    this.relocated++;
    return true;
  }

  private waitingOf(actor: EngineActor): Map<number, LeapRequest> {
    let waiting = this.out.get(actor);
    if (waiting === undefined) this.out.set(actor, (waiting = new Map<number, LeapRequest>()));
    return waiting;
  }

  /**
   * Trajectory `id` reached the end of a turn in `actor`'s engine: true when that was a tool call
   * (it comes back after the call), false when its response is complete.
   */
  turnEnded(actor: EngineActor, id: number): boolean {
    this.ensure(id);
    const total = this.workload.outputTokens(id);
    const calls = this.workload.callsOf(id, total);
    const k = this.turns[id]!;
    if (k >= calls.length) return false;
    this.turns[id] = k + 1;
    this.turnEnds++;
    this.calls++;
    this.inCall++;
    const req: LeapRequest = {
      id,
      promptTokens: this.workload.promptTokens(this.workload.promptOf(id)),
      generated: calls[k]!,
      targetTokens: calls[k + 1] ?? total,
    };
    if (this.hooks.priorityAtCall) req.priority = this.hooks.priorityAtCall(actor, id, k + 1, calls[k]!);
    this.waitingOf(actor).set(id, req);
    this.at.set(id, actor);
    const latencyMs = this.workload.toolLatencyMs(id, k);
    this.callLatencyMs += latencyMs;
    if (this.lockstep) {
      let calls = this.round.get(actor);
      if (calls === undefined) this.round.set(actor, (calls = new Map<LeapRequest, number>()));
      calls.set(req, latencyMs);
      return true;
    }
    this.sandboxOf(actor).run(latencyMs, () => this.back([req]));
    return true;
  }

  /**
   * Lockstep: a turn of `actor` ended (a call or a completion). Once its engine holds nothing the
   * round is over and its calls run together: they come back when the slowest one does. Checked
   * in an event at the same time, after every finish of the engine's call has been reported.
   */
  turnSettled(actor: EngineActor): void {
    if (!this.lockstep || this.checking.has(actor)) return;
    this.checking.add(actor);
    this.sim.after(0, {
      fire: () => {
        this.checking.delete(actor);
        const calls = this.round.get(actor);
        if (calls === undefined || calls.size === 0 || actor.engine.heldCount > 0) return;
        this.round.delete(actor);
        this.toolPhases++;
        const reqs = [...calls.keys()];
        const start = this.sim.now;
        const phaseOver = (): void => {
          this.toolPhaseMs += this.sim.now - start;
          this.back(reqs);
        };
        const sandbox = this.sandboxOf(actor);
        if (sandbox.slots === null) {
          // Unbounded: the phase is its slowest call (one event rather than one per call).
          let phaseMs = 0;
          for (const ms of calls.values()) phaseMs = Math.max(phaseMs, ms);
          sandbox.run(phaseMs, phaseOver);
          return;
        }
        let left = calls.size;
        for (const ms of calls.values()) {
          sandbox.run(ms, () => {
            if (--left === 0) phaseOver();
          });
        }
      },
    });
  }

  /**
   * Calls returned: the requests still waiting (not taken out by a failure) go back to the engine
   * they are recorded under, or where `placeReturn` puts them.
   */
  private back(reqs: LeapRequest[]): void {
    const to = new Map<EngineActor, LeapRequest[]>();
    for (const req of reqs) {
      const actor = this.at.get(req.id);
      const waiting = actor === undefined ? undefined : this.out.get(actor);
      // One taken out meanwhile (its rollout failed) went the orphans' way.
      if (actor === undefined || waiting?.get(req.id) !== req) continue;
      waiting.delete(req.id);
      this.at.delete(req.id);
      this.inCall--;
      const place = this.hooks.placeReturn;
      if (place) {
        // One at a time: each placement sees the engines' load with the previous ones in it.
        const dest = place(actor, req);
        if (dest !== actor) this.returnedElsewhere++;
        dest.submit([req]);
        continue;
      }
      let list = to.get(actor);
      if (list === undefined) to.set(actor, (list = []));
      list.push(req);
    }
    for (const [actor, live] of to) actor.submit(live);
  }

  /** The trajectories of `actor` out at their tool, taken back (its rollout failed). */
  takeOut(actor: EngineActor): LeapRequest[] {
    const waiting = this.out.get(actor);
    if (waiting === undefined) return [];
    const reqs = [...waiting.values()];
    waiting.clear();
    for (const req of reqs) this.at.delete(req.id);
    this.round.delete(actor);
    this.inCall -= reqs.length;
    return reqs;
  }

  /** A trajectory that starts over (given back to the prompt pool): from its first turn. */
  restart(id: number): void {
    this.ensure(id);
    this.turns[id] = 0;
  }

  private ensure(id: number): void {
    if (id < this.turns.length) return;
    let size = this.turns.length;
    while (size <= id) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.turns);
    this.turns = next;
  }
}
