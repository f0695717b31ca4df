/**
 * The rollout agent with LoRA adapter versions (adapter-switch.ts) on real processes: a relay,
 * nats-server, redis-server and the reference engine. The job publishes a TinyLM as version 0
 * and then adapters of it as versions 1 and 2 of the same model. With trajectories running on
 * the base, the agent loads adapter 1 beside it (partial rollout: no wait for them); those
 * trajectories end on the base, the ones that start after the switch run with the adapter (their
 * tokens are what the engine gives with the adapter, not without), and once version 2 is served
 * and nothing uses adapter 1 any more, the engine unloads it. An agent that starts when the
 * newest version is an adapter has the engine load the adapter's base version first.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExperienceSampler, groupIdOf } from '../../src/data/index.js';
import { RelayClient, loraAdapterName } from '../../src/relay/client/index.js';
import { trajectoryIdOf } from '../../src/rollout/ids.js';
import { SglangClient, seedOf, type GenerateRequest } from '../../src/rollout-agent/index.js';
import { spawnReferenceEngine, type ReferenceEngine } from '../../src/services/index.js';
import { natsClient, servicesFixture } from '../data/helpers.js';
import { jobPools, publishTiny, startTestAgent, writeTinyConfig } from '../helpers/agents.js';
import { spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const fx = servicesFixture();
let tmp: ReturnType<typeof tempShmDir>;
let relay: RelayProcess;
let engine: ReferenceEngine;
let relayClient: RelayClient;
const closers: Array<() => Promise<unknown>> = [];

const MODEL = 'lora/tiny';
const RANK = 4;
const PROMPT = [1, 14, 5, 6, 7, 3];

beforeAll(async () => {
  tmp = tempShmDir('laminar-lora-agent-');
  const configDir = join(tmp.dir, 'engine-files');
  mkdirSync(configDir);
  await writeTinyConfig(configDir);
  [relay, engine] = await Promise.all([
    spawnRelay(tmp.dir, ['--no-pin', '--engine-files', configDir]),
    spawnReferenceEngine('engine', { kvCapacityTokens: 16_384, seed: 1 }),
  ]);
  relayClient = await RelayClient.connect({ socketPath: relay.socketPath, name: 'lora test' });
}, 120_000);
afterAll(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
  (relayClient as RelayClient | undefined)?.close();
  await (engine as ReferenceEngine | undefined)?.kill('SIGTERM');
  await (relay as RelayProcess | undefined)?.stop('SIGKILL');
  (tmp as typeof tmp | undefined)?.cleanup();
});

/** A rank-4 adapter of every attention projection of base version 0, strong enough to change the tokens. */
async function publishAdapter(version: number, model = MODEL): Promise<void> {
  await using base = await relayClient.acquire({ model, version: 0 });
  const tensors: { name: string; dtype: 'F32'; shape: number[]; data: Float32Array }[] = [];
  const values = (n: number, seed: number, scale: number): Float32Array =>
    Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + seed * 78.233) * scale);
  for (const t of base.tensors) {
    const m = /^(layers\.\d+\.attn\.(qkv|out))\.weight$/.exec(t.name);
    if (!m) continue;
    const [out, inDim] = t.shape as [number, number];
    tensors.push({ name: `base_model.model.${m[1]}.lora_A.weight`, dtype: 'F32', shape: [RANK, inDim], data: values(RANK * inDim, version, 0.5) });
    tensors.push({ name: `base_model.model.${m[1]}.lora_B.weight`, dtype: 'F32', shape: [out, RANK], data: values(out * RANK, version + 100, 0.5) });
  }
  const config = JSON.stringify({
    peft_type: 'LORA',
    r: RANK,
    lora_alpha: 2 * RANK,
    target_modules: ['qkv', 'out'],
    base_model_name_or_path: model,
    bias: 'none',
  });
  await (
    await relayClient.publish({ model, version, tensors, lora: { baseModel: model, baseVersion: 0, config } })
  ).visible;
}

/** A prompt whose response runs to `tokens` (the agent ignores EOS). */
function prompt(id: string, tokens: number, n = 1): { id: string; payload: unknown; n: number } {
  return { id, payload: { input_ids: PROMPT, target: [7, 6, 5], max_new_tokens: tokens }, n };
}

/** What the engine answers the agent's request for trajectory `id`, sent again with `lora` or without. */
async function replay(id: string, tokens: number, lora: string | null): Promise<number[]> {
  const request: GenerateRequest = {
    rid: `replay-${id}-${lora ?? 'base'}`,
    inputIds: PROMPT,
    maxNewTokens: tokens,
    sampling: { temperature: 1, topP: 1, topK: -1, seed: seedOf(id), stopTokenIds: [], ignoreEos: true },
    lora,
  };
  const out: number[] = [];
  await new SglangClient(engine.url).generate(request, { signal: new AbortController().signal, onTokens: (t) => out.push(...t) });
  return out;
}

describe('rollout agent: LoRA adapter versions', () => {
  it('loads an adapter while trajectories run on the base, runs new ones with it, unloads it once unused', async () => {
    const job = 'lora';
    await publishTiny(relay.socketPath, MODEL, [0]);
    const pools = await jobPools(fx, job, [prompt('p0', 300, 2)], closers);
    const a = await startTestAgent({
      natsUrl: fx.nats.url,
      connect: natsClient,
      redis: fx.redis,
      job,
      id: 'ag-lora',
      engineUrl: engine.url,
      relaySocket: relay.socketPath,
      model: MODEL,
      batchPrompts: 1,
      maxInFlight: 4,
      partialRollout: true,
    });
    closers.push(() => a.close());
    const onBase = [0, 1].map((s) => trajectoryIdOf(groupIdOf('p0', 0), s));
    await expect.poll(() => onBase.every((id) => (a.agent.client?.owned.get(id)?.generated ?? 0) >= 10), { timeout: 30_000, interval: 5 }).toBe(true);
    // Held mid-way while the adapter is published: the agent's own pause, load and continue release them.
    await new SglangClient(engine.url).pause('in_place');

    const v1 = loraAdapterName(MODEL, 1);
    await publishAdapter(1);
    await expect.poll(() => a.agent.client?.version, { timeout: 30_000 }).toBe(1);
    expect(a.agent.status().adapters).toEqual([v1]);
    // The base trajectories are still running: the adapter came in under them.
    expect(onBase.some((id) => a.agent.client?.owned.has(id))).toBe(true);

    await pools.prompts.load([prompt('p1', 24)]);
    const sampler = await ExperienceSampler.open({ nc: fx.nc, buffer: job, batchSize: 3, prefetch: false, registry: new Registry() });
    closers.push(() => sampler.close());
    const items = (await sampler.sample({ timeoutMs: 90_000 })).items;
    const byId = new Map(items.map((item) => [item.id, item]));
    for (const id of onBase) {
      // Ended on the base, with no tokens of another version (the engine reported 0 throughout).
      expect(byId.get(id)).toMatchObject({ weightVersion: 0 });
      expect(byId.get(id)!.info?.versions).toBeUndefined();
    }
    const withAdapter = trajectoryIdOf(groupIdOf('p1', 0), 0);
    const item = byId.get(withAdapter)!;
    expect(item.weightVersion).toBe(1);
    const response = Array.from(item.tokens.subarray(item.promptLength, item.promptLength + item.responseLength));
    // Its tokens are the engine's with the adapter: sent again with it, the same; without it, others.
    expect(await replay(withAdapter, 24, v1)).toEqual(response);
    expect(await replay(withAdapter, 24, null)).not.toEqual(response);

    // Version 2: adapter 1 is used by nobody now, so it goes as version 2 comes in.
    const v2 = loraAdapterName(MODEL, 2);
    await publishAdapter(2);
    await expect.poll(() => a.agent.client?.version, { timeout: 30_000 }).toBe(2);
    expect(a.agent.status().adapters).toEqual([v2]);
    const engineClient = new SglangClient(engine.url);
    const dir = (await relayClient.status()).versions.find((v) => v.model === MODEL && v.version === 2)!.dir!;
    // Unloaded at the engine: its name loads again (the agent's unload may still be on its way).
    await expect
      .poll(
        async () =>
          engineClient.loadLoraAdapter(v1, dir).then(
            () => true,
            () => false,
          ),
        { timeout: 10_000 },
      )
      .toBe(true);
    await engineClient.unloadLoraAdapter(v1);
    // Adapter 2 is loaded: the engine refuses its name a second time.
    await expect(engineClient.loadLoraAdapter(v2, dir)).rejects.toMatchObject({ code: 'ERR_ENGINE_RELOAD' });
    // The relay keeps the base for the adapters (leased once per adapter held).
    const base = (await relayClient.status()).versions.find((v) => v.model === MODEL && v.version === 0)!;
    expect(base.leases).toBeGreaterThanOrEqual(1);
    await a.close();
  }, 180_000);

  it('an agent that starts on an adapter version has the engine load its base first', async () => {
    const job = 'lora-late';
    const model = 'lora/late';
    await publishTiny(relay.socketPath, model, [0]);
    await publishAdapter(1, model);
    await jobPools(fx, job, [], closers);
    const a = await startTestAgent({
      natsUrl: fx.nats.url,
      connect: natsClient,
      redis: fx.redis,
      job,
      id: 'ag-late',
      engineUrl: engine.url,
      relaySocket: relay.socketPath,
      model,
    });
    closers.push(() => a.close());
    await expect.poll(() => a.agent.client?.version, { timeout: 30_000 }).toBe(1);
    expect(a.agent.status().adapters).toEqual([loraAdapterName(model, 1)]);
    // The engine serves this model's version 0 (it had another model's weights before).
    const info = (await (await fetch(`${engine.url}/get_model_info`)).json()) as { model_path: string | null };
    expect(info.model_path).toMatch(/\/models\/lora~2flate\/v0$/);
    expect(await new SglangClient(engine.url).weightVersion()).toBe('0');
  }, 120_000);
});
