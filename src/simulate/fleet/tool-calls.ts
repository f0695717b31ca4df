/**
 * The multi-turn agent loop of the tool-call task (docs/design/simulator.md, "Tool calls"): a
 * trajectory's request runs in its engine up to its next tool call (workload.ts gives the
 * positions and latencies), leaves the engine for the sandbox, freeing its KV, and comes back
 * to the same engine after the call's latency with every token so far (a resume: the engine
 * re-prefills prompt and output), until its last turn completes the response. The engine sees a
 * turn's end as a finish; only the last one is the trajectory's completion.
 */
import type { EngineActor } from '../engine/engine-actor.js';
import type { LeapRequest } from '../engine/leap-engine.js';
import type { Simulation } from '../core/simulation.js';
import type { Workload } from '../workload/workload.js';

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

  constructor(
    private readonly sim: Simulation,
    private readonly workload: Workload,
  ) {}

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
    this.sim.after(this.workload.toolLatencyMs(id, k), {
      fire: () => {
        // Taken out meanwhile (its rollout failed): it went the orphans' way.
        if (waiting.get(id) !== req) return;
        waiting.delete(id);
        this.inCall--;
        actor.submit([req]);
      },
    });
    return true;
  }

  /** The trajectories of `actor` out at their tool, taken back (its rollout failed). */
  takeOut(actor: EngineActor): LeapRequest[] {
    const waiting = this.out.get(actor);
    if (waiting === undefined) return [];
    const reqs = [...waiting.values()];
    waiting.clear();
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
