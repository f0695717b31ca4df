/**
 * A LeapEngine living in a Simulation: one Wake, kept at the engine's nextEventAt() after every
 * call, so the event queue holds one pending entry per engine whatever it runs. Finishes the
 * engine reports are handed to the owner after the engine call has returned (a LeapEngine must
 * not be called from its own listener, and an owner typically reacts to a finish by submitting
 * more work). Every command takes effect at the simulation's current time.
 */
import type { EngineProfile } from '../../stand-ins/engine-core.js';
import { Wake, type Simulation } from '../core/simulation.js';
import { LeapEngine, type EngineLoadView, type LeapListener, type LeapRequest } from './leap-engine.js';

export interface EngineActorOwner {
  /** Trajectory `id` completed at `atMs` (the simulation's current time). */
  finished(id: number, atMs: number): void;
  /** Optional: admissions and preemptions as they happen (tracing, first-prefill latency). */
  admitted?(id: number, atMs: number): void;
  preempted?(id: number, atMs: number): void;
}

export class EngineActor {
  readonly engine: LeapEngine;
  private readonly wake: Wake;
  /** Finishes reported during the current engine call: ids and times, flat. */
  private doneIds: number[] = [];
  private doneAt: number[] = [];

  constructor(
    private readonly sim: Simulation,
    profile: EngineProfile,
    private readonly owner: EngineActorOwner,
  ) {
    const listener: LeapListener = {
      finished: (id, atMs) => {
        this.doneIds.push(id);
        this.doneAt.push(atMs);
      },
    };
    if (owner.admitted) listener.admitted = owner.admitted.bind(owner);
    if (owner.preempted) listener.preempted = owner.preempted.bind(owner);
    this.engine = new LeapEngine(profile, listener, sim.now);
    this.wake = new Wake(sim, (s) => {
      this.engine.wake(s.now);
      this.settle();
    });
  }

  submit(requests: Iterable<LeapRequest>): void {
    this.engine.submit(requests, this.sim.now);
    this.settle();
  }

  remove(ids: Iterable<number>): LeapRequest[] {
    const out = this.engine.remove(ids, this.sim.now);
    this.settle();
    return out;
  }

  drain(): LeapRequest[] {
    const out = this.engine.drain(this.sim.now);
    this.settle();
    return out;
  }

  /**
   * Runs the engine up to now (every step that starts before it) so that its counters are
   * current, handing over what finished: a timeline's sample. Only runs that sample pay for it;
   * the engine's results do not depend on when it is driven, up to float rounding.
   */
  sample(): void {
    this.engine.advanceTo(this.sim.now);
    this.settle();
  }

  /** KV, running and waiting now (read-only). */
  load(): EngineLoadView {
    return this.engine.loadAt(this.sim.now);
  }

  /** Re-arms the wake for the engine's next event, then hands over what finished. */
  private settle(): void {
    const next = this.engine.nextEventAt();
    if (next === Number.POSITIVE_INFINITY) this.wake.cancel();
    else if (this.wake.pendingAt !== next) this.wake.schedule(next);
    if (this.doneIds.length === 0) return;
    const ids = this.doneIds;
    const at = this.doneAt;
    this.doneIds = [];
    this.doneAt = [];
    for (let i = 0; i < ids.length; i++) this.owner.finished(ids[i]!, at[i]!);
  }
}
