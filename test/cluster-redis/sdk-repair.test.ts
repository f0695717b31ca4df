/**
 * What repairs a prompt-pool write a Sentinel failover lost (docs/components/data.md, "Failover:
 * Sentinel and Cluster"): without WAIT, a rollout's claim and completion of a prompt whose
 * trajectories are already in the experience buffer vanish with the master; the prompt is
 * handed out again, and the rollout SDK that gets it generates nothing: it finds every sample in
 * the buffer by its id and completes the claim. The buffer keeps one copy. Real nats-server,
 * Redis master, replica and sentinels, and a relay process.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, PromptPool } from '../../src/data/index.js';
import { RolloutClient } from '../../src/rollout/rollout-client.js';
import { startRedisSentinelGroup, type RedisSentinelGroup } from '../../src/services/redis-sentinel.js';
import { createPoolRedis, type PoolRedis } from '../../src/data/prompts/redis-address.js';
import { metricValue, natsFixture } from '../data/helpers.js';
import { inertEngine } from '../helpers/engine.js';
import { relayEachTest } from '../helpers/relay.js';

const MODEL = 'org/sdk-repair';
const nats = natsFixture();
const fx = relayEachTest();
let group: RedisSentinelGroup;
let redis: PoolRedis;

beforeAll(async () => {
  group = await startRedisSentinelGroup({ replicas: 1, downAfterMs: 500 });
  redis = createPoolRedis(group.url, { maxRetriesPerRequest: null, retryStrategy: () => 50 });
  redis.on('error', () => undefined); // refused while the master is down
});

afterAll(async () => {
  (redis as PoolRedis | undefined)?.disconnect();
  await (group as RedisSentinelGroup | undefined)?.stop();
});

describe('a failover loses a claim and its completion', () => {
  it('the prompt comes back, and the SDK that claims it again skips every sample already in the buffer', async () => {
    const job = 'repair';
    await fx.publish(MODEL, 3);
    const { closers } = fx;
    // Loaded with WAIT: the replica has the prompts before anything is lost.
    const prompts = await PromptPool.open({ redis, name: job, replicas: 1 });
    await prompts.load([{ id: 'q0', payload: { text: 'q' }, n: 2 }]);
    const fast = PromptPool.attach({ redis, name: job }); // no WAIT: what the rollouts use here
    const writer = await ExperienceWriter.open({ nc: nats.nc, buffer: job, groups: fast });
    const partials = await PartialPool.open({ nc: nats.nc, pool: job, writer });
    closers.push(() => partials.close());
    const connect = async (id: string, registry: Registry): Promise<RolloutClient> => {
      const rollout = await RolloutClient.connect({
        nc: nats.nc,
        job,
        id,
        model: MODEL,
        engine: inertEngine(),
        prompts: fast,
        partials,
        writer,
        relaySocket: fx.relay.socketPath,
        registry,
      });
      closers.push(() => rollout.close());
      const weights = await rollout.acquireWeights();
      await weights.lease.release();
      return rollout;
    };

    // Cut the replica off (stopped, its link closed by the master): what the master takes from
    // now on exists nowhere else.
    const master = await group.master();
    const replica = group.servers.find((s) => s !== master)!;
    process.kill(replica.pid!, 'SIGSTOP');
    try {
      const direct = createPoolRedis(master.url);
      direct.on('error', () => undefined);
      closers.push(() => {
        direct.disconnect();
        return Promise.resolve();
      });
      await direct.call('CLIENT', 'KILL', 'TYPE', 'replica');
      const first = await connect('ro-a', new Registry());
      const tasks = await first.claim(1);
      expect(tasks.map((t) => t.trajectoryId).sort()).toEqual(['q0#0/0', 'q0#0/1']);
      for (const t of tasks) {
        t.append(Int32Array.of(1, 2), Float32Array.of(-1, -1));
        await t.complete({ reward: 1 });
      }
      expect(await fast.progress()).toMatchObject({ completions: 1, doneThisEpoch: 1 });
      const oldPort = await group.killMaster();
      process.kill(replica.pid!, 'SIGCONT');
      await group.waitForNewMaster(oldPort);
    } finally {
      process.kill(replica.pid!, 'SIGCONT');
    }

    // The promoted replica never saw the claim nor its completion: q0 is pending again.
    expect(await fast.progress()).toMatchObject({ completions: 0, pending: 1 });
    const registry = new Registry();
    const second = await connect('ro-b', registry);
    // Handed out a second time, and nothing to generate: both samples are in the buffer.
    expect(await second.claim(1)).toEqual([]);
    expect(await metricValue(registry, 'laminar_rollout_tasks_total', { outcome: 'skipped' })).toBe(2);
    // The claim is completed: the pool is finished, the buffer holds one copy of each sample.
    expect(await fast.progress()).toMatchObject({ completions: 1, doneThisEpoch: 1, finished: true });
    expect(await writer.has('q0#0/0')).toBe(true);
    expect(await writer.has('q0#0/1')).toBe(true);
  });
});
