/**
 * `laminar rollout-agent` on real processes: relays, nats-server, redis-server, the manager and
 * reference engines (python -m laminar.testing.engine, SGLang's HTTP subset over a real PyTorch
 * model). The agent speaks SGLang's API and does not know it talks to the reference engine.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ExperienceSampler, PartialPool, PromptPool, groupIdOf } from '../../src/data/index.js';
import { SCHEMA_VERSION, commandReplySchema, decode, encode } from '../../src/control/schema.js';
import { controlNames } from '../../src/control/subjects.js';
import { Manager } from '../../src/manager/manager.js';
import { RelayClient } from '../../src/relay/client/index.js';
import { trajectoryIdOf } from '../../src/rollout/ids.js';
import { SglangClient, seedOf, type EngineClient } from '../../src/rollout-agent/index.js';
import { spawnDaemon, spawnReferenceEngine, type ReferenceEngine } from '../../src/services/index.js';
import { metricValue, natsClient, servicesFixture } from '../data/helpers.js';
import { jobManager, jobPools, publishTiny, startTestAgent, writeTinyConfig, type TestAgent } from '../helpers/agents.js';
import { spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const fx = servicesFixture();
let tmp: ReturnType<typeof tempShmDir>;
let relay: RelayProcess;
let engines: ReferenceEngine[] = [];
const closers: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  tmp = tempShmDir('laminar-agent-');
  const configDir = join(tmp.dir, 'engine-files');
  mkdirSync(configDir);
  await writeTinyConfig(configDir);
  relay = await spawnRelay(tmp.dir, ['--no-pin', '--engine-files', configDir]);
  engines = await Promise.all([
    spawnReferenceEngine('engine a', { kvCapacityTokens: 16_384, seed: 1 }),
    spawnReferenceEngine('engine b', { kvCapacityTokens: 16_384, seed: 2 }),
  ]);
}, 120_000);
afterAll(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
  await Promise.all(engines.map((e) => e.kill('SIGTERM')));
  // Unset when beforeAll failed before starting them.
  await (relay as RelayProcess | undefined)?.stop('SIGKILL');
  (tmp as typeof tmp | undefined)?.cleanup();
});

function agent(job: string, id: string, engineUrl: string, model: string, extra: Partial<Parameters<typeof startTestAgent>[0]> = {}): Promise<TestAgent> {
  return startTestAgent({
    natsUrl: fx.nats.url,
    connect: natsClient,
    redis: fx.redis,
    job,
    id,
    engineUrl,
    relaySocket: relay.socketPath,
    model,
    ...extra,
  }).then((a) => {
    closers.push(() => a.close());
    return a;
  });
}

function pools(job: string, prompts: { id: string; payload: unknown; n: number }[]): ReturnType<typeof jobPools> {
  return jobPools(fx, job, prompts, closers);
}

async function command(job: string, id: string, body: Record<string, unknown>): Promise<ReturnType<typeof decode<typeof commandReplySchema>>> {
  const reply = await fx.nc.request(controlNames(job).member(id), encode({ v: SCHEMA_VERSION, ...body }), { timeout: 20_000 });
  return decode(commandReplySchema, reply.data, 'reply');
}

/** A digits-style prompt whose response runs to `tokens` (the agents here ignore EOS). */
function prompt(id: string, tokens: number, n = 1): { id: string; payload: unknown; n: number } {
  return { id, payload: { input_ids: [1, 14, 5, 6, 7, 3], target: [7, 6, 5], max_new_tokens: tokens }, n };
}

function manager(job: string, p: { prompts: PromptPool; partials: PartialPool }): Promise<Manager> {
  return jobManager(fx.nats.url, job, p, closers);
}

async function engineVersion(url: string): Promise<string | null> {
  return new SglangClient(url).weightVersion();
}

/** Leases the relay holds on `version` of `model`. */
async function leasesOn(model: string, version: number): Promise<number> {
  const client = await RelayClient.connect({ socketPath: relay.socketPath, name: 'test' });
  try {
    return (await client.status()).versions.find((v) => v.model === model && v.version === version)?.leases ?? 0;
  } finally {
    client.close();
  }
}

describe('rollout agent on reference engines', () => {
  it('a repack move continues token for token: the moved trajectory equals the one generated without a move', async () => {
    const job = 'move';
    const model = 'move/tiny';
    await publishTiny(relay.socketPath, model, [0]);
    const budget = 400;
    await pools(job, [prompt('p0', budget)]);
    const a = await agent(job, 'ag-a', engines[0]!.url, model, { batchPrompts: 1 });
    const id = trajectoryIdOf(groupIdOf('p0', 0), 0);
    // a claims the one prompt and generates; once it has 20 tokens its engine is held (paused in
    // place) so that the trajectory is still half done when b, started only now so that it could
    // not claim the prompt first, has loaded its weights.
    await expect.poll(() => a.agent.client?.owned.get(id)?.generated ?? 0, { timeout: 30_000, interval: 5 }).toBeGreaterThanOrEqual(20);
    const engineA = new SglangClient(engines[0]!.url);
    await engineA.pause('in_place');
    closers.push(() => engineA.resume());
    const b = await agent(job, 'ag-b', engines[1]!.url, model, { batchPrompts: 1 });
    await expect.poll(() => b.agent.client?.version, { timeout: 30_000 }).toBe(0);

    const out = await command(job, 'ag-a', { t: 'repack-out', repack: 'm1', to: 'ag-b', version: 0 });
    expect(out).toMatchObject({ t: 'done', moved: [id] });
    await engineA.resume();
    const inn = await command(job, 'ag-b', { t: 'repack-in', repack: 'm1', from: 'ag-a', version: 0, trajectories: [id] });
    expect(inn).toMatchObject({ t: 'done', taken: 1 });
    const movedAt = b.agent.client?.owned.get(id)?.resumedFrom ?? -1;

    const sampler = await ExperienceSampler.open({ nc: fx.nc, buffer: job, batchSize: 1, prefetch: false, registry: new Registry() });
    closers.push(() => sampler.close());
    const [record] = (await sampler.sample({ timeoutMs: 60_000 })).items;
    expect(record!.id).toBe(id);
    expect(record!.rolloutId).toBe('ag-b');
    expect(record!.weightVersion).toBe(0);
    // Moved halfway: some tokens came from a, the rest from b.
    expect(movedAt).toBeGreaterThanOrEqual(20);
    expect(movedAt).toBeLessThan(budget);
    expect(await metricValue(b.registry, 'laminar_rollout_tasks_total', { outcome: 'resumed' })).toBe(1);

    // The same trajectory without a move: one request, same seed, same weights.
    const baseline = (await (
      await fetch(`${engines[1]!.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          input_ids: [1, 14, 5, 6, 7, 3],
          sampling_params: { max_new_tokens: budget, temperature: 1, top_p: 1, top_k: -1, ignore_eos: true, sampling_seed: seedOf(id) },
          return_logprob: true,
        }),
      })
    ).json()) as { output_ids: number[]; meta_info: { output_token_logprobs: [number, number, unknown][] } };
    const response = Array.from(record!.tokens.subarray(record!.promptLength));
    expect(response).toHaveLength(budget);
    expect(response).toEqual(baseline.output_ids);
    const logprobs = Array.from(record!.logprobs.subarray(record!.promptLength));
    baseline.meta_info.output_token_logprobs.forEach(([lp], i) => expect(logprobs[i]).toBeCloseTo(lp, 3));
  }, 120_000);

  it('update-weights with trajectories in flight: none mixes versions, the old lease goes only after the reload returned', async () => {
    const job = 'upd';
    const model = 'upd/tiny';
    await publishTiny(relay.socketPath, model, [0]);
    await pools(job, [prompt('p0', 300, 2), prompt('p1', 300, 2), prompt('p2', 300, 2)]);
    // The real client, with what the relay holds seen at the moment of each reload and after it.
    const real = new SglangClient(engines[0]!.url);
    const reloads: { version: number; oldLeasesBefore: number; oldLeasesAfter: number }[] = [];
    const watched: EngineClient = Object.assign(Object.create(real) as EngineClient, {
      loadWeights: async (dir: string, version: number) => {
        const oldLeasesBefore = version > 0 ? await leasesOn(model, version - 1) : 0;
        await real.loadWeights(dir, version);
        reloads.push({ version, oldLeasesBefore, oldLeasesAfter: version > 0 ? await leasesOn(model, version - 1) : 0 });
      },
    });
    const a = await agent(job, 'ag-u', engines[0]!.url, model, { batchPrompts: 3, engine: watched });
    const ids = ['p0', 'p1', 'p2'].flatMap((pid) => [0, 1].map((s) => trajectoryIdOf(groupIdOf(pid, 0), s)));
    await expect.poll(() => ids.every((id) => (a.agent.client?.owned.get(id)?.generated ?? 0) >= 10), { timeout: 30_000, interval: 5 }).toBe(true);

    await publishTiny(relay.socketPath, model, [1]);
    expect(await command(job, 'ag-u', { t: 'update-weights', model, version: null })).toMatchObject({ t: 'done' });
    await expect.poll(() => engineVersion(engines[0]!.url), { timeout: 60_000 }).toBe('1');

    const sampler = await ExperienceSampler.open({ nc: fx.nc, buffer: job, batchSize: 6, prefetch: false, registry: new Registry() });
    closers.push(() => sampler.close());
    const batch = await sampler.sample({ timeoutMs: 60_000 });
    expect(batch.items.map((i) => i.id).sort()).toEqual([...ids].sort());
    // Generated with version 0 from first token to last: the engine reported 0 for every token.
    for (const item of batch.items) expect(item.weightVersion).toBe(0);
    expect(await metricValue(a.registry, 'laminar_agent_version_mismatches_total')).toBe(0);
    // The reload of 1 happened with the lease on 0 held, before and after it; 0 was let go only then.
    const toOne = reloads.find((r) => r.version === 1)!;
    expect(toOne.oldLeasesBefore).toBeGreaterThanOrEqual(1);
    expect(toOne.oldLeasesAfter).toBeGreaterThanOrEqual(1);
    await expect.poll(() => leasesOn(model, 0), { timeout: 10_000 }).toBe(0);
    expect(a.agent.heldVersion).toBe(1);
  }, 120_000);

  it('--partial-rollout: a newer version is swapped in under running trajectories, which record the versions they span', async () => {
    const job = 'partial';
    const model = 'partial/tiny';
    await publishTiny(relay.socketPath, model, [0]);
    await pools(job, [prompt('p0', 400, 2)]);
    const a = await agent(job, 'ag-p', engines[0]!.url, model, { batchPrompts: 1, partialRollout: true });
    const ids = [0, 1].map((s) => trajectoryIdOf(groupIdOf('p0', 0), s));
    await expect.poll(() => ids.every((id) => (a.agent.client?.owned.get(id)?.generated ?? 0) >= 10), { timeout: 30_000, interval: 5 }).toBe(true);
    // Held mid-way while the next version is published (a publish takes longer than these
    // trajectories): the agent's own pause, load and continue release them on version 1.
    await new SglangClient(engines[0]!.url).pause('in_place');

    await publishTiny(relay.socketPath, model, [1]);
    await expect.poll(() => engineVersion(engines[0]!.url), { timeout: 30_000 }).toBe('1');
    const sampler = await ExperienceSampler.open({ nc: fx.nc, buffer: job, batchSize: 2, prefetch: false, registry: new Registry() });
    closers.push(() => sampler.close());
    const items = (await sampler.sample({ timeoutMs: 60_000 })).items;
    for (const item of items) {
      expect(item.weightVersion).toBe(0);
      expect(item.info).toMatchObject({ versions: '0,1' });
    }
    const paused = await a.registry.getSingleMetric('laminar_agent_engine_paused_seconds')!.get();
    expect(paused.values.find((v) => (v as { metricName?: string }).metricName === 'laminar_agent_engine_paused_seconds_count')?.value).toBeGreaterThanOrEqual(
      1,
    );
    expect(await metricValue(a.registry, 'laminar_agent_version_mismatches_total')).toBeGreaterThan(0);
  }, 120_000);

  it('the engine refuses a broken version: a typed error, the previous version served, the manager sees it', async () => {
    const job = 'refuse';
    const model = 'refuse/tiny';
    await publishTiny(relay.socketPath, model, [0]);
    const p = await pools(job, [prompt('p0', 50)]);
    const m = await manager(job, p);
    const a = await agent(job, 'ag-r', engines[1]!.url, model, { batchPrompts: 1 });
    await expect.poll(() => a.agent.client?.version, { timeout: 30_000 }).toBe(0);

    await publishTiny(relay.socketPath, model, [1], { broken: 'missing:lm_head.weight' });
    await expect.poll(async () => metricValue(a.registry, 'laminar_agent_weight_reloads_total', { result: 'refused' }), { timeout: 30_000 }).toBe(1);
    await expect
      .poll(() => m.status().rollouts.find((r) => r.id === 'ag-r')?.weightError, { timeout: 10_000 })
      .toMatchObject({ version: 1, code: 'ERR_ENGINE_RELOAD' });
    const refusal = m.status().rollouts.find((r) => r.id === 'ag-r')!.weightError!;
    expect(refusal.message).toContain('lm_head.weight');
    // Refused by the client before the engine was asked: SGLang 0.5.23 itself would load the
    // other tensors and answer success (weights-manifest.ts).
    expect(refusal.message).toContain('refused before loading: 1 tensor(s) missing (lm_head.weight)');
    expect(await engineVersion(engines[1]!.url)).toBe('0');
    expect(a.agent.client?.version).toBe(0);

    // It goes on generating with version 0, and does not offer version 1 to the engine again.
    const sampler = await ExperienceSampler.open({ nc: fx.nc, buffer: job, batchSize: 1, prefetch: false, registry: new Registry() });
    closers.push(() => sampler.close());
    expect((await sampler.sample({ timeoutMs: 60_000 })).items[0]!.weightVersion).toBe(0);
    expect(await metricValue(a.registry, 'laminar_agent_weight_reloads_total', { result: 'refused' })).toBe(1);

    // A good version after it is loaded, and the manager stops showing the refusal.
    await publishTiny(relay.socketPath, model, [2]);
    await expect.poll(() => engineVersion(engines[1]!.url), { timeout: 30_000 }).toBe('2');
    await expect.poll(() => m.status().rollouts.find((r) => r.id === 'ag-r')?.weightError ?? null, { timeout: 10_000 }).toBeNull();
  }, 120_000);

  it('an engine that dies while its agent is idle is noticed by the load poll; the agent serves it again when it is back', async () => {
    const job = 'idle';
    const model = 'idle/tiny';
    await publishTiny(relay.socketPath, model, [0]);
    await pools(job, []);
    const engine = await spawnReferenceEngine('engine idle', { kvCapacityTokens: 4096, seed: 4 });
    closers.push(() => engine.kill('SIGKILL'));
    const a = await agent(job, 'ag-i', engine.url, model);
    await expect.poll(() => a.agent.client?.version, { timeout: 30_000 }).toBe(0);

    await engine.kill('SIGKILL');
    await expect.poll(async () => metricValue(a.registry, 'laminar_agent_engine_down_total'), { timeout: 10_000 }).toBe(1);
    expect(await metricValue(a.registry, 'laminar_agent_engine_up')).toBe(0);

    const back = await spawnReferenceEngine('engine idle again', { port: engine.port, kvCapacityTokens: 4096, seed: 4 });
    closers.push(() => back.kill('SIGKILL'));
    await expect.poll(() => a.agent.sessionCount, { timeout: 30_000 }).toBe(2);
    await expect.poll(() => engineVersion(back.url), { timeout: 30_000 }).toBe('0');
  }, 120_000);

  it('a killed engine and a killed agent: their trajectories resume elsewhere on their version, none lost or written twice; the agent serves the restarted engine', async () => {
    const job = 'kill';
    const model = 'kill/tiny';
    await publishTiny(relay.socketPath, model, [0]);
    const p = await pools(job, [prompt('p0', 400, 2), prompt('p1', 400, 2)]);
    await manager(job, p);
    const victimEngine = await spawnReferenceEngine('engine c', { kvCapacityTokens: 16_384, seed: 3 });
    closers.push(() => victimEngine.kill('SIGKILL'));
    const a = await agent(job, 'ag-k', victimEngine.url, model, { batchPrompts: 2 });
    const first = ['p0', 'p1'].flatMap((pid) => [0, 1].map((s) => trajectoryIdOf(groupIdOf(pid, 0), s)));
    await expect.poll(() => first.every((id) => (a.agent.client?.owned.get(id)?.generated ?? 0) >= 10), { timeout: 30_000, interval: 5 }).toBe(true);
    const b = await agent(job, 'ag-s', engines[1]!.url, model, { batchPrompts: 2 });
    await expect.poll(() => b.agent.client?.version, { timeout: 30_000 }).toBe(0);

    // The engine dies mid-generation: the agent leaves the job, the manager moves its work to b.
    await victimEngine.kill('SIGKILL');
    await expect.poll(async () => (await Promise.all(first.map((id) => p.writer.has(id)))).every(Boolean), { timeout: 90_000, interval: 250 }).toBe(true);
    expect(await metricValue(a.registry, 'laminar_agent_engine_down_total')).toBe(1);
    expect(await metricValue(b.registry, 'laminar_rollout_tasks_total', { outcome: 'resumed' })).toBeGreaterThanOrEqual(1);

    // The engine comes back on its port: the agent serves it again (a new session, weights reloaded).
    const back = await spawnReferenceEngine('engine c again', { port: victimEngine.port, kvCapacityTokens: 16_384, seed: 3 });
    closers.push(() => back.kill('SIGKILL'));
    await expect.poll(() => a.agent.sessionCount, { timeout: 30_000 }).toBe(2);
    await expect.poll(() => engineVersion(back.url), { timeout: 30_000 }).toBe('0');
    await a.close();
    // b would claim the next prompts first: it steps aside until the agent to kill owns them.
    await b.close();

    // A killed agent (a process, SIGKILL): its trajectories resume on another rollout.
    const cli = await spawnDaemon(
      'agent d',
      [
        'rollout-agent',
        ...['--nats', fx.nats.url, '--job', job, '--id', 'ag-d', '--engine-url', back.url, '--relay-socket', relay.socketPath, '--model', model],
        ...['--redis', fx.redisServer.url, '--prompt-pool', job, '--partial-pool', job, '--buffer', job, '--heartbeat', '200ms', '--metrics-port', '0'],
        ...['--batch-prompts', '2', '--ignore-eos', '--log-level', 'info'],
      ],
      'rollout agent started',
    );
    closers.push(() => cli.kill('SIGKILL'));
    await p.prompts.load([prompt('p2', 400, 2), prompt('p3', 400, 2)]);
    const second = ['p2', 'p3'].flatMap((pid) => [0, 1].map((s) => trajectoryIdOf(groupIdOf(pid, 0), s)));
    await expect.poll(async () => (await p.partials.list('ag-d')).length, { timeout: 30_000, interval: 20 }).toBe(4);
    const c = await agent(job, 'ag-s2', engines[1]!.url, model, { batchPrompts: 2 });
    await expect.poll(() => c.agent.client?.version, { timeout: 30_000 }).toBe(0);
    await cli.kill('SIGKILL');
    await expect.poll(async () => (await Promise.all(second.map((id) => p.writer.has(id)))).every(Boolean), { timeout: 90_000, interval: 250 }).toBe(true);
    await expect.poll(async () => (await p.partials.list()).length, { timeout: 10_000 }).toBe(0);
    for (const r of [a, b, c]) expect(await metricValue(r.registry, 'laminar_buffer_writes_total', { result: 'duplicate' })).toBe(0);
    expect(await metricValue(c.registry, 'laminar_rollout_tasks_total', { outcome: 'resumed' })).toBeGreaterThanOrEqual(1);
    // Every record once: the buffer's stream holds exactly one message per trajectory.
    const sampler = await ExperienceSampler.open({ nc: fx.nc, buffer: job, batchSize: 8, prefetch: false, registry: new Registry() });
    closers.push(() => sampler.close());
    const items = (await sampler.sample({ timeoutMs: 30_000 })).items;
    expect(items.map((i) => i.id).sort()).toEqual([...first, ...second].sort());
    for (const item of items) expect(item.weightVersion).toBe(0);
  }, 240_000);
});
