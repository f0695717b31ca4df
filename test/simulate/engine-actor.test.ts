/**
 * LeapEngines inside a Simulation (EngineActor): one pending wake per engine, finishes handed
 * over at the virtual time they happen, owners that react to a finish by submitting more work,
 * and a repack-style move (take out of one engine, resume in another later) that loses and
 * duplicates nothing.
 */
import { describe, expect, it } from 'vitest';
import type { EngineProfile } from '../../src/stand-ins/engine-core.js';
import { Simulation } from '../../src/simulate/core/simulation.js';
import { EngineActor } from '../../src/simulate/engine/engine-actor.js';
import { LeapEngine, type LeapRequest } from '../../src/simulate/engine/leap-engine.js';

const profile: EngineProfile = {
  kvCapacityTokens: 20_000,
  rooflineBatch: 32,
  maxRunning: 64,
  decodeStepMs: 12,
  prefillMsPerToken: 0.01,
  slopeBeyondRoofline: 1,
  kvReadMsPerMToken: 20,
};

/** Seeded requests with a long tail of lengths. */
function requests(first: number, count: number): LeapRequest[] {
  return Array.from({ length: count }, (_, i) => {
    const id = first + i;
    const targetTokens = 50 + ((id * 7919) % 97) * ((id % 5) + 1) * 3;
    return { id, promptTokens: 100 + (id % 13) * 10, targetTokens, generated: 0 };
  });
}

/** The same requests on a LeapEngine driven by hand: finish time per id. */
function alone(reqs: LeapRequest[]): Map<number, number> {
  const out = new Map<number, number>();
  const engine = new LeapEngine(profile, { finished: (id, at) => out.set(id, at) });
  engine.submit(reqs, 0);
  for (let next = engine.nextEventAt(); next < Infinity; next = engine.nextEventAt()) engine.wake(next);
  return out;
}

describe('EngineActor', () => {
  it('hands every finish over once, at its virtual time, with about one event per engine event', () => {
    const sim = new Simulation();
    const work = [requests(0, 150), requests(1000, 150)];
    const seen = new Map<number, number>();
    const actors = work.map(
      () =>
        new EngineActor(sim, profile, {
          finished: (id, at) => {
            expect(at).toBe(sim.now);
            expect(seen.has(id)).toBe(false);
            seen.set(id, at);
          },
        }),
    );
    actors.forEach((a, i) => a.submit(work[i]!));
    const { events } = sim.run();
    expect(seen.size).toBe(300);
    for (const reqs of work) for (const [id, at] of alone(reqs)) expect(seen.get(id)).toBe(at);
    // Each engine event step is a wake, and so is each step end that reports finishes; nothing else.
    const eventSteps = actors.reduce((n, a) => n + a.engine.stats.eventSteps, 0);
    expect(events).toBeLessThanOrEqual(2 * eventSteps);
    expect(events).toBeGreaterThanOrEqual(eventSteps);
    const steps = actors.reduce((n, a) => n + a.engine.stats.steps, 0);
    expect(eventSteps / steps).toBeLessThan(0.25);
  });

  it('lets an owner submit from its finish handler: a rollout that claims again when its engine empties', () => {
    const sim = new Simulation();
    let claimed = 0;
    const done: number[] = [];
    const actor: EngineActor = new EngineActor(sim, profile, {
      finished: (id) => {
        done.push(id);
        if (actor.engine.idle && claimed < 3) actor.submit(requests(100 * ++claimed, 20));
      },
    });
    actor.submit(requests(0, 20));
    sim.run();
    expect(done.sort((a, b) => a - b)).toEqual([0, 100, 200, 300].flatMap((first) => requests(first, 20).map((r) => r.id)));
  });

  it('moves trajectories between engines as repack does, losing and duplicating none, keeping their tokens', () => {
    const sim = new Simulation();
    const finishedBy = new Map<number, number>();
    const actors = [0, 1].map(
      (e) =>
        new EngineActor(sim, profile, {
          finished: (id) => {
            expect(finishedBy.has(id)).toBe(false);
            finishedBy.set(id, e);
          },
        }),
    );
    const reqs = requests(0, 120);
    actors[0]!.submit(reqs);
    let moved: LeapRequest[] = [];
    // At 3 s, half of what engine 0 still holds leaves it; 0.69 s later it resumes on engine 1.
    sim.at(3000, {
      fire: () => {
        const ids = reqs.map((r) => r.id).filter((id) => id % 2 === 0);
        moved = actors[0]!.remove(ids);
        sim.after(690, { fire: () => actors[1]!.submit(moved) });
      },
    });
    sim.run();
    expect(moved.length).toBeGreaterThan(10);
    // Running ones carry their tokens so far; any still waiting carry none (or those from before a preemption).
    expect(moved.filter((r) => r.generated > 0).length).toBeGreaterThan(10);
    expect(moved.every((r) => r.generated < r.targetTokens)).toBe(true);
    expect([...finishedBy.keys()].sort((a, b) => a - b)).toEqual(reqs.map((r) => r.id));
    for (const r of moved) expect(finishedBy.get(r.id)).toBe(1);
    // Engine 1 re-prefilled exactly the moved requests' prompts and tokens.
    expect(actors[1]!.engine.stats.prefillTokens).toBeGreaterThanOrEqual(moved.reduce((n, r) => n + r.promptTokens + r.generated, 0));
    // Every token of every trajectory was decoded once, wherever it was.
    const tokens = actors.reduce((n, a) => n + a.engine.stats.tokens, 0);
    expect(tokens).toBe(reqs.reduce((n, r) => n + r.targetTokens, 0));
  });
});
