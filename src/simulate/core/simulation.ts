/**
 * The discrete-event core of the cluster simulator: a virtual clock and the loop that fires
 * scheduled events in time order. Nothing here reads the wall clock or sets a timer; virtual time
 * moves only when the loop takes the next event, to that event's time.
 *
 *   const sim = new Simulation();
 *   sim.after(5_000, { fire: (s) => repackRound(s.now) });
 *   sim.run({ until: 3_600_000 });
 *
 * Times are virtual milliseconds (float64), the unit of the simulated engine's step times.
 * An actor that reschedules itself (a rollout whose next engine event moved) uses a `Wake`:
 * scheduling it again cancels the pending one without touching the heap (the stale entry is
 * skipped when it comes out), so the queue holds about one entry per actor.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { EventQueue } from './event-queue.js';

export interface SimEvent {
  fire(sim: Simulation): void;
}

/** Virtual time in milliseconds; it never goes back. */
export class VirtualClock {
  private t: number;

  constructor(start = 0) {
    if (!Number.isFinite(start)) throw pastEvent(`the clock must start at a finite time, got ${String(start)}`, { start });
    this.t = start;
  }

  get now(): number {
    return this.t;
  }

  /** Moves the clock to `time` (>= now). */
  advanceTo(time: number): void {
    if (!(time >= this.t) || !Number.isFinite(time)) throw pastEvent(`the clock cannot move from ${this.t} to ${String(time)}`, { now: this.t, time });
    this.t = time;
  }
}

export interface RunOptions {
  /** Fire events up to and including this time, then leave the clock there. Default: until the queue is empty. */
  until?: number;
  /** Stop after this many events (a guard against a run that never ends). Default: no limit. */
  maxEvents?: number;
}

export type RunEnd = 'empty' | 'until' | 'max-events' | 'stopped';

export interface RunResult {
  /** Events fired in this call (cancelled wakes included: they were popped and looked at). */
  events: number;
  /** The clock when the call returned. */
  now: number;
  reason: RunEnd;
}

export class Simulation {
  readonly clock: VirtualClock;
  private readonly queue = new EventQueue<SimEvent>();
  private fired = 0;
  private stopRequested = false;
  private running = false;

  constructor(start = 0) {
    this.clock = new VirtualClock(start);
  }

  get now(): number {
    return this.clock.now;
  }

  /** Events fired since the simulation was made. */
  get eventsFired(): number {
    return this.fired;
  }

  /** Events waiting (cancelled wakes included until they come out). */
  get pending(): number {
    return this.queue.size;
  }

  /** The time of the next event, or Infinity when none is queued. */
  nextTime(): number {
    return this.queue.peekTime();
  }

  /** Schedules `event` at virtual time `time` (>= now). Equal times fire in scheduling order. */
  at(time: number, event: SimEvent): void {
    if (!(time >= this.clock.now) || !Number.isFinite(time)) {
      throw pastEvent(`cannot schedule an event at ${String(time)}: the clock is at ${this.clock.now}`, { now: this.clock.now, time });
    }
    this.queue.push(time, event);
  }

  /** Schedules `event` `delay` milliseconds from now (>= 0). */
  after(delay: number, event: SimEvent): void {
    if (!(delay >= 0) || !Number.isFinite(delay)) throw pastEvent(`an event delay must be a finite number >= 0, got ${String(delay)}`, { delay });
    this.at(this.clock.now + delay, event);
  }

  /** Ends the current `run()` once the event being fired returns. */
  stop(): void {
    this.stopRequested = true;
  }

  /**
   * Fires events in time order until the queue is empty, the next event is later than `until`
   * (the clock is then moved to `until`), `maxEvents` have fired, or an event called stop().
   * An event's exception propagates, leaving the clock at that event's time.
   */
  run(options: RunOptions = {}): RunResult {
    const until = options.until ?? Number.POSITIVE_INFINITY;
    const maxEvents = options.maxEvents ?? Number.POSITIVE_INFINITY;
    if (Number.isNaN(until) || until < this.clock.now) throw pastEvent(`cannot run until ${String(until)}: the clock is at ${this.clock.now}`, { until });
    if (!(maxEvents >= 0)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `maxEvents must be >= 0, got ${String(maxEvents)}`, { maxEvents });
    if (this.running) throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'run() was called from inside an event');
    this.running = true;
    this.takeStop();
    let events = 0;
    let reason: RunEnd = 'empty';
    try {
      for (;;) {
        if (events >= maxEvents) {
          reason = 'max-events';
          break;
        }
        const next = this.queue.peekTime();
        if (next === Number.POSITIVE_INFINITY) {
          reason = 'empty';
          break;
        }
        if (next > until) {
          this.clock.advanceTo(until);
          reason = 'until';
          break;
        }
        const event = this.queue.pop()!;
        this.clock.advanceTo(next);
        events++;
        this.fired++;
        event.fire(this);
        if (this.takeStop()) {
          reason = 'stopped';
          break;
        }
      }
    } finally {
      this.running = false;
    }
    if (reason === 'empty' && until !== Number.POSITIVE_INFINITY) {
      this.clock.advanceTo(until);
      reason = 'until';
    }
    return { events, now: this.clock.now, reason };
  }

  /** Whether stop() was called since the last look (and forgets it). */
  private takeStop(): boolean {
    const requested = this.stopRequested;
    this.stopRequested = false;
    return requested;
  }
}

/**
 * One pending wake-up of an actor: `schedule()` replaces the previous one, `cancel()` drops it.
 * The replaced entry stays in the queue and does nothing when it comes out (its generation is
 * old), which keeps scheduling O(log n) with no deletion from the heap.
 */
export class Wake {
  private generation = 0;
  private at: number | null = null;

  constructor(
    private readonly sim: Simulation,
    private readonly onWake: (sim: Simulation) => void,
  ) {}

  /** When the wake is due, or null when none is pending. */
  get pendingAt(): number | null {
    return this.at;
  }

  schedule(time: number): void {
    const generation = ++this.generation;
    this.sim.at(time, {
      fire: (sim) => {
        if (generation !== this.generation) return;
        this.at = null;
        this.onWake(sim);
      },
    });
    this.at = time;
  }

  cancel(): void {
    this.generation++;
    this.at = null;
  }
}

function pastEvent(message: string, details: Record<string, unknown>): InvalidInputError {
  return new InvalidInputError(ErrorCodes.SIM_PAST_EVENT, message, details);
}
