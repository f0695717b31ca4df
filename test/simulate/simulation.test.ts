/** The simulator's discrete-event loop: virtual clock, scheduling, run limits, wakes. */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { Simulation, VirtualClock, Wake, type SimEvent } from '../../src/simulate/core/simulation.js';

/** An event that records the clock when it fires. */
function recorder(log: string[], name: string, then?: (sim: Simulation) => void): SimEvent {
  return {
    fire(sim) {
      log.push(`${name}@${sim.now}`);
      then?.(sim);
    },
  };
}

describe('VirtualClock', () => {
  it('moves forward only', () => {
    const clock = new VirtualClock(10);
    clock.advanceTo(10);
    clock.advanceTo(25.5);
    expect(clock.now).toBe(25.5);
    expect(() => clock.advanceTo(25)).toThrow(expect.objectContaining({ code: ErrorCodes.SIM_PAST_EVENT }));
    expect(() => clock.advanceTo(Number.NaN)).toThrow(expect.objectContaining({ code: ErrorCodes.SIM_PAST_EVENT }));
    expect(() => new VirtualClock(Number.POSITIVE_INFINITY)).toThrow(expect.objectContaining({ code: ErrorCodes.SIM_PAST_EVENT }));
    expect(clock.now).toBe(25.5);
  });
});

describe('Simulation', () => {
  it('fires events in time order, then scheduling order, with the clock at each event', () => {
    const sim = new Simulation();
    const log: string[] = [];
    sim.at(20, recorder(log, 'b'));
    sim.at(10, recorder(log, 'a'));
    sim.at(20, recorder(log, 'c'));
    const result = sim.run();
    expect(log).toEqual(['a@10', 'b@20', 'c@20']);
    expect(result).toEqual({ events: 3, now: 20, reason: 'empty' });
    expect(sim.eventsFired).toBe(3);
  });

  it('lets events schedule more events, at the same time or later', () => {
    const sim = new Simulation();
    const log: string[] = [];
    sim.at(
      5,
      recorder(log, 'first', (s) => {
        s.after(0, recorder(log, 'same-time'));
        s.after(10, recorder(log, 'later'));
      }),
    );
    sim.at(5, recorder(log, 'queued-before'));
    sim.run();
    // 'queued-before' was scheduled before 'same-time', so it fires first at t = 5.
    expect(log).toEqual(['first@5', 'queued-before@5', 'same-time@5', 'later@15']);
  });

  it('refuses events in the past or at a non-finite time, and negative delays', () => {
    const sim = new Simulation();
    sim.at(100, { fire: () => undefined });
    sim.run();
    const attempts = [
      () => sim.at(99, { fire: () => undefined }),
      () => sim.at(Number.NaN, { fire: () => undefined }),
      () => sim.after(-1, { fire: () => undefined }),
      () => sim.after(Number.POSITIVE_INFINITY, { fire: () => undefined }),
    ];
    for (const attempt of attempts) expect(attempt).toThrow(expect.objectContaining({ code: ErrorCodes.SIM_PAST_EVENT }));
    expect(sim.pending).toBe(0);
  });

  it('run({ until }) fires up to and including that time, then leaves the clock there', () => {
    const sim = new Simulation();
    const log: string[] = [];
    for (const t of [10, 20, 30]) sim.at(t, recorder(log, `e${t}`));
    expect(sim.run({ until: 20 })).toEqual({ events: 2, now: 20, reason: 'until' });
    expect(sim.run({ until: 25 })).toEqual({ events: 0, now: 25, reason: 'until' });
    expect(log).toEqual(['e10@10', 'e20@20']);
    expect(sim.nextTime()).toBe(30);
    // Once the queue is empty, the clock still moves on to `until`.
    expect(sim.run({ until: 100 })).toEqual({ events: 1, now: 100, reason: 'until' });
    expect(() => sim.run({ until: 50 })).toThrow(expect.objectContaining({ code: ErrorCodes.SIM_PAST_EVENT }));
  });

  it('run({ maxEvents }) stops after that many', () => {
    const sim = new Simulation();
    const forever: SimEvent = { fire: (s) => s.after(1, forever) };
    sim.at(0, forever);
    expect(sim.run({ maxEvents: 1000 })).toEqual({ events: 1000, now: 999, reason: 'max-events' });
  });

  it('stop() from an event ends the run after that event', () => {
    const sim = new Simulation();
    const log: string[] = [];
    sim.at(1, recorder(log, 'a'));
    sim.at(
      2,
      recorder(log, 'b', (s) => s.stop()),
    );
    sim.at(3, recorder(log, 'c'));
    expect(sim.run()).toEqual({ events: 2, now: 2, reason: 'stopped' });
    expect(sim.run()).toEqual({ events: 1, now: 3, reason: 'empty' });
    expect(log).toEqual(['a@1', 'b@2', 'c@3']);
  });

  it('refuses run() from inside an event', () => {
    const sim = new Simulation();
    let inner: unknown;
    sim.at(1, {
      fire: (s) => {
        try {
          s.run();
        } catch (err) {
          inner = err;
        }
      },
    });
    sim.run();
    expect(inner).toMatchObject({ code: ErrorCodes.INVALID_ARG });
  });
});

describe('Wake', () => {
  it('fires once at the last time it was scheduled for; cancel() drops it', () => {
    const sim = new Simulation();
    const woke: number[] = [];
    const wake = new Wake(sim, (s) => woke.push(s.now));
    wake.schedule(50);
    wake.schedule(20);
    expect(wake.pendingAt).toBe(20);
    sim.run({ until: 100 });
    expect(woke).toEqual([20]);
    expect(wake.pendingAt).toBeNull();

    wake.schedule(150);
    wake.cancel();
    expect(wake.pendingAt).toBeNull();
    sim.run();
    expect(woke).toEqual([20]);
  });

  it('can reschedule itself from its own handler', () => {
    const sim = new Simulation();
    const woke: number[] = [];
    const wake: Wake = new Wake(sim, (s) => {
      woke.push(s.now);
      if (woke.length < 3) wake.schedule(s.now + 10);
    });
    wake.schedule(0);
    sim.run();
    expect(woke).toEqual([0, 10, 20]);
  });
});
