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
 * with a queue.
 */
import type { EngineActor } from '../engine/engine-actor.js';
import type { LeapRequest } from '../engine/leap-engine.js';
import type { Simulation } from '../core/simulation.js';
import type { Workload } from '../workload/workload.js';
import { Sandbox } from './sandbox.js';

export class ToolCallLoop {
  /** Calls made so far, per trajectory id (grows by doubling). */
  private turns = new Uint8Array(1024);
  /** Per engine, the trajectories out at their tool and the request each comes back as. */
  private readonly out = new Map<EngineActor, Map<number, LeapRequest>>();
  /** Turn ends the engines reported (finishes that were not completions). */
  turnEnds = 0;
  /** Trajectories at their tool now (generating in the ledger, in no engine). */
  inCall = 0;
  /** Tool calls made. */
  calls = 0;
  /** Lockstep: per engine, the calls of the round in progress (latency, ms, per request). */
  private readonly round = new Map<EngineActor, Map<LeapRequest, number>>();
  /** Lockstep: engines with a round-end check queued (one per engine at a time). */
  private readonly checking = new Set<EngineActor>();
  /** Lockstep: tool phases run (one per round that ended with calls) and their summed length, ms. */
  toolPhases = 0;
  toolPhaseMs = 0;
  readonly sandbox: Sandbox;

  constructor(
    private readonly sim: Simulation,
    private readonly workload: Workload,
    /** Turns in lockstep per engine (mechanism turnLockstep); false: each trajectory on its own. */
    readonly lockstep = false,
  ) {
    this.sandbox = new Sandbox(sim, workload.toolCalls?.sandboxSlots ?? null);
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
    let waiting = this.out.get(actor);
    if (waiting === undefined) this.out.set(actor, (waiting = new Map<number, LeapRequest>()));
    waiting.set(id, req);
    const latencyMs = this.workload.toolLatencyMs(id, k);
    if (this.lockstep) {
      let calls = this.round.get(actor);
      if (calls === undefined) this.round.set(actor, (calls = new Map<LeapRequest, number>()));
      calls.set(req, latencyMs);
      return true;
    }
    this.sandbox.run(latencyMs, () => this.back(actor, [req]));
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
          this.back(actor, reqs);
        };
        if (this.sandbox.slots === null) {
          // Unbounded: the phase is its slowest call (one event rather than one per call).
          let phaseMs = 0;
          for (const ms of calls.values()) phaseMs = Math.max(phaseMs, ms);
          this.sandbox.run(phaseMs, phaseOver);
          return;
        }
        let left = calls.size;
        for (const ms of calls.values()) {
          this.sandbox.run(ms, () => {
            if (--left === 0) phaseOver();
          });
        }
      },
    });
  }

  /** Calls returned: the requests still waiting (not taken out by a failure) go back to `actor`. */
  private back(actor: EngineActor, reqs: LeapRequest[]): void {
    const waiting = this.out.get(actor)!;
    // One taken out meanwhile (its rollout failed) went the orphans' way.
    const live = reqs.filter((req) => waiting.get(req.id) === req);
    if (live.length === 0) return;
    for (const req of live) waiting.delete(req.id);
    this.inCall -= live.length;
    actor.submit(live);
  }

  /** The trajectories of `actor` out at their tool, taken back (its rollout failed). */
  takeOut(actor: EngineActor): LeapRequest[] {
    const waiting = this.out.get(actor);
    if (waiting === undefined) return [];
    const reqs = [...waiting.values()];
    waiting.clear();
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
