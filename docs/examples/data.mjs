// The trajectory path without any engine: a prompt is claimed from the prompt pool (Redis), its
// samples are generated into the partial-response pool and completed into the experience buffer
// (JetStream), and a trainer samples whole GRPO groups from the buffer. Runs on its own: it
// starts a nats-server and a redis-server on free ports.
//   node docs/examples/data.mjs
import { connect } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { ExperienceSampler, ExperienceWriter, PartialPool, PromptPool, wholeGroups } from 'laminar/data';
import { startNatsServer, startRedisServer } from 'laminar/testing';

const [nats, redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer()]);
const nc = await connect({ servers: nats.url });
const redis = new Redis(redisServer.port, '127.0.0.1');
const weightVersion = 3;
try {
  const prompts = await PromptPool.open({ redis, name: 'example', defaultGroupSize: 4 });
  await prompts.load([{ id: 'q1', payload: { question: 'reverse 123' } }]);

  // Rollout side: claim, generate each sample into the partial pool, complete into the buffer.
  const writer = await ExperienceWriter.open({ nc, buffer: 'example', groups: prompts, maxWeightVersion: () => weightVersion });
  const partials = await PartialPool.open({ nc, pool: 'example', writer });
  const [claim] = await prompts.claim('rollout-0', 1);
  for (let sample = 0; sample < claim.n; sample++) {
    const t = await partials.start('rollout-0', {
      trajectoryId: `${claim.groupId}/${sample}`,
      promptId: claim.id,
      groupId: claim.groupId,
      sampleIndex: sample,
      groupSize: claim.n,
      weightVersion,
    });
    t.append([3, 2, 1], [-0.1, -0.2, -0.3]); // tokens and their logprobs, as the engine decodes
    await partials.complete(t, {
      id: t.trajectoryId,
      promptId: claim.id,
      groupId: claim.groupId,
      sampleIndex: sample,
      groupSize: claim.n,
      weightVersion,
      reward: sample / claim.n,
      tokens: [1, 2, 3, 3, 2, 1], // prompt, then response
      logprobs: [0, 0, 0, -0.1, -0.2, -0.3],
      promptLength: 3,
      responseLength: 3,
    });
  }
  await prompts.complete(claim);

  // Trainer side: sample a batch of whole groups, train on it, release its memory.
  const sampler = await ExperienceSampler.open({ nc, buffer: 'example', batchSize: claim.n, strategy: wholeGroups() });
  sampler.setTrainerVersion(weightVersion + 1);
  const batch = await sampler.sample({ timeoutMs: 10_000 });
  console.log(`sampled ${batch.items.length} trajectories of group ${batch.items[0].groupId}, staleness max ${batch.staleness.max}`);
  batch.release();
  await sampler.close();
  await partials.close();
} finally {
  redis.disconnect();
  await nc.close();
  await Promise.all([nats.stop(), redisServer.stop()]);
}
