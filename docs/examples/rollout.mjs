// An inference engine joins the job through the rollout SDK: it registers with the manager,
// claims prompts, streams each trajectory's tokens into the partial-response pool and completes
// it into the experience buffer. The engine here is a stand-in whose response is its prompt
// reversed; a real one (vLLM, SGLang) implements the same five hooks. Runs on its own: it starts
// a nats-server, a redis-server and a manager in this process.
//   node docs/examples/rollout.mjs
import { connect } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { ExperienceWriter, PartialPool, PromptPool } from 'laminar/data';
import { Manager } from 'laminar/manager';
import { RolloutClient } from 'laminar/rollout';
import { startNatsServer, startRedisServer } from 'laminar/testing';

/** The RolloutEngine contract: load, tokenize, stop, resume, updateWeights, reinitialise. */
class ReversingEngine {
  running = new Set();
  load() {
    return { kvUsed: this.running.size / 64, running: this.running.size, waiting: 0, tokensPerSecond: 0 };
  }
  tokenize(payload) {
    return Int32Array.from(payload.digits);
  }
  async stop(tasks) {
    for (const task of tasks) this.running.delete(task); // every token produced was appended
  }
  async resume(tasks) {
    for (const task of tasks) void this.generate(task);
  }
  async updateWeights() {} // a real engine reloads weights here (RolloutClient.acquireWeights)
  async reinitialise() {}

  /** Decodes one token at a time (a resumed task continues after the tokens it already has). */
  async generate(task) {
    this.running.add(task);
    const response = [...task.promptTokens].reverse();
    for (const token of response.slice(task.generated)) {
      await new Promise((resolve) => setTimeout(resolve, 1));
      if (!this.running.has(task) || !task.append([token], [-0.25])) return; // taken from us
    }
    this.running.delete(task);
    await task.complete({ reward: 1 });
  }
}

const job = 'example';
const [nats, redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer()]);
const nc = await connect({ servers: nats.url });
const redis = new Redis(redisServer.port, '127.0.0.1');
const manager = new Manager({ nc, job });
await manager.start();
const prompts = await PromptPool.open({ redis, name: job, defaultGroupSize: 2 });
await prompts.load([
  { id: 'p1', payload: { digits: [1, 2, 3] } },
  { id: 'p2', payload: { digits: [4, 5, 6, 7] } },
]);
const writer = await ExperienceWriter.open({ nc, buffer: job, groups: prompts });
const partials = await PartialPool.open({ nc, pool: job, writer });
const engine = new ReversingEngine();
const rollout = await RolloutClient.connect({ nc, job, id: 'rollout-0', model: 'example/policy', engine, prompts, partials, writer, relaySocket: null });
try {
  rollout.setWeightVersion(1); // with a relay (relaySocket), acquireWeights() leases the newest version instead
  const tasks = await rollout.claim(2); // 2 prompts x 2 samples
  await Promise.all(tasks.map((task) => engine.generate(task)));
  console.log(`completed ${tasks.length} trajectories: ${tasks.map((t) => t.trajectoryId).join(', ')}`);
} finally {
  await rollout.close();
  await partials.close();
  await manager.close();
  redis.disconnect();
  await nc.close();
  await Promise.all([nats.stop(), redisServer.stop()]);
}
