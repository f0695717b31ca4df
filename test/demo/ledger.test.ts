/**
 * The demo's ledger (src/demo/books.ts) on a real nats-server: it counts what each rollout owns
 * from the partial logs' owner headers as they are written, so that `--kill-a-rollout` picks a
 * rollout that holds trajectories now (the heartbeat's count is up to a beat old: a clean-clone run
 * killed a rollout that had finished its batch since, and its failover had nothing to show).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, TrajectoryBuilder, type PartialStart } from '../../src/data/index.js';
import { watchLedger } from '../../src/demo/books.js';
import { natsFixture } from '../data/helpers.js';

const nats = natsFixture();
const closers: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const close of closers.reverse()) await close();
});

const start = (id: string): PartialStart => ({ trajectoryId: id, promptId: `p-${id}`, groupId: `g-${id}`, sampleIndex: 0, groupSize: 1, weightVersion: 1 });

describe('the demo ledger', () => {
  it('counts what each rollout owns now: starts, takeovers and records as they are written', async () => {
    const ledger = watchLedger(nats.nc, { buffer: 'ledger', partialPool: 'ledger' });
    closers.push(() => ledger.stop());
    const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: 'ledger', registry: new Registry() });
    const pool = await PartialPool.open({ nc: nats.nc, pool: 'ledger', writer, registry: new Registry() });
    closers.push(() => pool.close());
    const a = await pool.start('r1', start('a'));
    await pool.start('r1', start('b'));
    await pool.start('r2', start('c'));
    // The subscription sees each message a moment after its publish is acknowledged.
    await expect.poll(() => [ledger.inFlightOf('r1'), ledger.inFlightOf('r2')]).toEqual([2, 1]);
    expect(ledger.started.size).toBe(3);

    // r2 takes b over (a failover or a repack): the takeover marker names the new owner.
    const taken = await pool.takeOver('b', 'r2', { from: 'r1' });
    expect(taken.status).toBe('taken');
    await expect.poll(() => [ledger.inFlightOf('r1'), ledger.inFlightOf('r2')]).toEqual([1, 2]);

    // a completes: its record is written (and its log purged): r1 owns nothing any more.
    a.append([7], [-0.5]);
    const built = TrajectoryBuilder.resume(Int32Array.from([1, 2]), (await pool.read('a'))!);
    built.addGenerated([7], [-0.5], { weightVersion: 1, finishReason: 'stop' });
    await pool.complete(a, built.build({ id: 'a', promptId: 'p-a', groupId: 'g-a', sampleIndex: 0, groupSize: 1, reward: 1 }));
    await expect.poll(() => [ledger.inFlightOf('r1'), ledger.inFlightOf('r2'), ledger.completed.size]).toEqual([0, 2, 1]);
    expect(ledger.inFlightOf('nobody')).toBe(0);
  });
});
