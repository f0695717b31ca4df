/**
 * The partial-response pool against a model of one trajectory, over random histories of what
 * rollouts and the manager do to it: appends by its owner, the turns of a multi-turn trajectory
 * (a turn closed, a wait at a tool call, an observation; out of order ones refused), takeovers
 * (failover, repack), and parking followed by a restart with other weights (a returned sample
 * claimed again), with the restart's clean-up sometimes cut off as by a crash. After every step,
 * what the pool reads back (`read`, `startOf`, `list`) must be the model: the tokens and logprobs
 * since the start in force, its segments and the action it waits for, its owner and its weight
 * version. Real nats-server.
 */
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import type { JetStreamManager } from '@nats-io/jetstream';
import { PartialPool, type AwaitedAction, type PartialStart, type PartialTrajectory, type TrajectorySegment } from '../../src/data/index.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { natsFixture } from './helpers.js';

const nats = natsFixture();
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closers) await close();
});

type Step =
  | { t: 'append'; tokens: number }
  | { t: 'turn'; version: number }
  | { t: 'wait' }
  | { t: 'observe'; tokens: number }
  | { t: 'takeover'; to: string }
  | { t: 'restart'; to: string; version: number; cutOff: boolean };

const rollouts = ['ro-a', 'ro-b', 'ro-c'];
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ t: fc.constant('append' as const), tokens: fc.integer({ min: 1, max: 9 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('turn' as const), version: fc.integer({ min: 0, max: 50 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('wait' as const) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('observe' as const), tokens: fc.integer({ min: 0, max: 5 }) }) },
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
        const fresh = () => ({
          tokens: [] as number[],
          logprobs: [] as number[],
          segments: [] as TrajectorySegment[],
          waiting: undefined as AwaitedAction | undefined,
        });
        const model = { owner: 'ro-a', version: 0, ...fresh() };
        const open = (): number => model.tokens.length - model.segments.reduce((n, x) => n + x.length, 0);
        let handle: PartialTrajectory = await pool.start(model.owner, start(model.version));
        let next = 0;

        for (const s of steps) {
          let waited = false;
          if (s.t === 'append') {
            const tokens = Array.from({ length: s.tokens }, () => next++);
            const logprobs = tokens.map((x) => Math.fround(-x / 100));
            handle.append(tokens, logprobs);
            await handle.flush();
            model.tokens.push(...tokens);
            model.logprobs.push(...logprobs);
          } else if (s.t === 'turn') {
            model.segments.push({ kind: 'generated', length: open(), weightVersion: s.version, finishReason: 'tool_call' });
            await handle.closeTurn({ weightVersion: s.version, finishReason: 'tool_call' });
          } else if (s.t === 'wait' || s.t === 'observe') {
            const action = { actionId: `${id}/act-${next}`, tool: 'lookup' };
            if (open() > 0) {
              // The model's turn is still open: refused at the call, nothing logged.
              const call = () => (s.t === 'wait' ? handle.waitForAction(action) : handle.appendObservation([1], { ...action, status: 'ok', latencyMs: 1 }));
              expect(call).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_SEGMENTS }));
            } else if (s.t === 'wait') {
              await handle.waitForAction(action);
              model.waiting = action;
              waited = true;
            } else {
              const tokens = Array.from({ length: s.tokens }, () => 100_000 + next++);
              const observed = { ...action, status: 'ok' as const, latencyMs: 5 };
              await handle.appendObservation(tokens, observed);
              model.tokens.push(...tokens);
              model.logprobs.push(...tokens.map(() => 0));
              model.segments.push({ kind: 'observation', length: tokens.length, action: observed });
              model.waiting = undefined;
            }
          } else if (s.t === 'takeover') {
            const taken = await pool.takeOver(id, s.to, { from: model.owner });
            if (taken.status !== 'taken') throw new Error('a trajectory never completed came back completed');
            expect(Array.from(taken.state.tokens)).toEqual(model.tokens);
            expect(taken.state.segments).toEqual(model.segments);
            expect(taken.state.waiting).toEqual(model.waiting);
            handle.release();
            handle = taken.trajectory;
            expect(handle.segments).toEqual(model.segments);
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
            Object.assign(model, { owner: s.to, version: s.version, ...fresh() });
          }

          const read = await pool.read(id);
          expect(
            read && {
              owner: read.owner,
              version: read.start.weightVersion,
              tokens: Array.from(read.tokens),
              logprobs: Array.from(read.logprobs),
              segments: read.segments,
              waiting: read.waiting,
            },
          ).toEqual(model);
          expect(await pool.startOf(id)).toEqual({ start: expect.objectContaining({ weightVersion: model.version }) as unknown, owner: model.owner });
          const listed = (await pool.list()).find((x) => x.trajectoryId === id);
          expect(listed).toMatchObject({ owner: model.owner, tokens: model.tokens.length });
          if (waited) expect(listed).toMatchObject({ state: 'waiting', waitingFor: model.waiting });
        }
        handle.release();
        await pool.remove(id);
      }),
      { numRuns: 40 },
    );
  }, 120_000);
});
