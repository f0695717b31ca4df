/**
 * The partial-response pool against a model of one trajectory, over random histories of what
 * rollouts and the manager do to it: appends by its owner, takeovers (failover, repack), and
 * parking followed by a restart with other weights (a returned sample claimed again), with the
 * restart's clean-up sometimes cut off as by a crash. After every step, what the pool reads back
 * (`read`, `startOf`, `list`) must be the model: the tokens since the start in force, its owner
 * and its weight version. Real nats-server.
 */
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import type { JetStreamManager } from '@nats-io/jetstream';
import { PartialPool, type PartialStart, type PartialTrajectory } from '../../src/data/index.js';
import { natsFixture } from './helpers.js';

const nats = natsFixture();
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closers) await close();
});

type Step = { t: 'append'; tokens: number } | { t: 'takeover'; to: string } | { t: 'restart'; to: string; version: number; cutOff: boolean };

const rollouts = ['ro-a', 'ro-b', 'ro-c'];
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ t: fc.constant('append' as const), tokens: fc.integer({ min: 1, max: 9 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('takeover' as const), to: fc.constantFrom(...rollouts) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('restart' as const),
      to: fc.constantFrom(...rollouts),
      version: fc.integer({ min: 1, max: 50 }),
      cutOff: fc.boolean(),
    }),
  },
);

let runs = 0;

describe('partial pool: one trajectory through random takeovers and restarts', () => {
  it('always reads back the tokens, owner and weight version of the start in force', async () => {
    const pool = await PartialPool.open({ nc: nats.nc, pool: 'model', flushTokens: 1_000_000, flushMs: 60_000 });
    closers.push(() => pool.close());
    const jsm = (pool as unknown as { jsm: JetStreamManager }).jsm;
    const purge = jsm.streams.purge.bind(jsm.streams);

    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
        const id = `traj-${runs++}`;
        const start = (version: number): PartialStart => ({
          trajectoryId: id,
          promptId: 'p',
          groupId: 'g',
          sampleIndex: 0,
          groupSize: 1,
          weightVersion: version,
        });
        const model = { owner: 'ro-a', version: 0, tokens: [] as number[] };
        let handle: PartialTrajectory = await pool.start(model.owner, start(model.version));
        let next = 0;

        for (const s of steps) {
          if (s.t === 'append') {
            const tokens = Array.from({ length: s.tokens }, () => next++);
            handle.append(
              tokens,
              tokens.map((x) => -x / 100),
            );
            await handle.flush();
            model.tokens.push(...tokens);
          } else if (s.t === 'takeover') {
            const taken = await pool.takeOver(id, s.to, { from: model.owner });
            if (taken.status !== 'taken') throw new Error('a trajectory never completed came back completed');
            expect(Array.from(taken.state.tokens)).toEqual(model.tokens);
            handle.release();
            handle = taken.trajectory;
            model.owner = s.to;
          } else {
            const parked = await pool.takeOver(id, 'laminar:parked', { from: model.owner });
            if (parked.status === 'taken') parked.trajectory.release();
            handle.release();
            if (s.cutOff) jsm.streams.purge = () => Promise.reject(new Error('killed before the purge'));
            try {
              handle = await pool.restart(s.to, start(s.version), { from: 'laminar:parked' });
            } finally {
              jsm.streams.purge = purge;
            }
            Object.assign(model, { owner: s.to, version: s.version, tokens: [] });
          }

          const read = await pool.read(id);
          expect(read && { owner: read.owner, version: read.start.weightVersion, tokens: Array.from(read.tokens) }).toEqual(model);
          expect(Array.from(read!.logprobs, (x) => Math.round(-x * 100))).toEqual(model.tokens);
          expect(await pool.startOf(id)).toEqual({ start: expect.objectContaining({ weightVersion: model.version }) as unknown, owner: model.owner });
          const listed = (await pool.list()).find((x) => x.trajectoryId === id);
          expect(listed).toMatchObject({ owner: model.owner, tokens: model.tokens.length });
        }
        handle.release();
        await pool.remove(id);
      }),
      { numRuns: 40 },
    );
  }, 120_000);
});
