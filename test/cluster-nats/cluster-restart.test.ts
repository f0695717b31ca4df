/**
 * The whole 3-node cluster SIGKILLed and started again on its store dirs (file storage): the
 * experience buffer, the partial pool and the control bucket, all R3, come back with everything
 * that was acknowledged, and the clients that lived through it carry on where they were.
 */
import { describe, expect, it } from 'vitest';
import { openControlBucket } from '../../src/control/bucket.js';
import { ExperienceSampler, ExperienceWriter, PartialPool } from '../../src/data/index.js';
import { retryTransient } from '../../src/data/retry.js';
import { trajectory } from '../data/helpers.js';
import { clusterFixture, reconnected, until } from './helpers.js';

const fx = clusterFixture();

describe('whole-cluster restart (file storage, R3)', () => {
  it('buffer, partial pool and control bucket survive; clients carry on', async () => {
    const { cluster } = fx;
    const nc = await fx.client();
    const writer = await ExperienceWriter.open({ nc, buffer: 'cr', replicas: 3 });
    const partials = await PartialPool.open({ nc, pool: 'cr', replicas: 3, writer, flushTokens: 2 });
    const kv = await openControlBucket(nc, 'cr-control', { replicas: 3 });
    for (let i = 0; i < 30; i++) await writer.write(trajectory({ id: `c${i}` }));
    const partial = await partials.start('r1', { trajectoryId: 'open-1', promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, weightVersion: 3 });
    partial.append([1, 2, 3], [0, 0, 0]);
    await partial.flush();
    await kv.put('lease', 'm0');

    const back = reconnected(nc);
    await cluster.restart({ kill: true });
    await back;

    // What was acknowledged before the crash is all there.
    const sampler = await ExperienceSampler.open({ nc, buffer: 'cr', batchSize: 30, prefetch: false });
    const batch = await sampler.sample({ timeoutMs: 20_000 });
    expect(batch.items.map((t) => t.id)).toEqual(Array.from({ length: 30 }, (_, i) => `c${i}`));
    batch.release();
    expect(Array.from((await partials.read('open-1'))!.tokens)).toEqual([1, 2, 3]);
    // The bucket's direct gets: after a whole-cluster restart its stream answers them only once
    // a replica serves direct gets again, which can come after the leader reads above succeed
    // ("no responders" until then). Its readers (manager, members) retry on their next tick.
    expect((await retryTransient(() => kv.get('lease')))?.string()).toBe('m0');

    // And the same clients write on: the writer, the open partial, the bucket.
    await writer.write(trajectory({ id: 'c30' }));
    partial.append([4], [0]);
    await partial.flush();
    expect(Array.from((await partials.read('open-1'))!.tokens)).toEqual([1, 2, 3, 4]);
    await kv.put('lease', 'm1');
    await until('the sampler indexed the write after the restart', () => sampler.stats().items === 1);
    await sampler.close();
    await partials.close();
  });
});
