/**
 * `laminar rollout-agent --weights fp8` on real processes: a relay with the model's engine
 * files, nats-server, redis-server and the reference engine. The agent asks the relay for each
 * version's FP8 variant, and the engine loads that variant's directory (FP8 weights, config.json
 * with quantization_config), dequantising it, and generates with it. How close its outputs are to
 * the bf16/f32 model's: python/tests/test_fp8_convert.py.
 */
import { describe, expect, it } from 'vitest';
import { RelayClient } from '../../src/relay/client/index.js';
import { SglangClient } from '../../src/rollout-agent/index.js';
import { natsClient, servicesFixture } from '../data/helpers.js';
import { oneEngineFixture, publishTiny, startTestAgent } from '../helpers/agents.js';

const fx = servicesFixture();
const world = oneEngineFixture('laminar-fp8-agent-');

async function modelPath(url: string): Promise<string | null> {
  const info = (await (await fetch(`${url}/get_model_info`)).json()) as { model_path: string | null };
  return info.model_path;
}

describe('rollout agent: --weights fp8', () => {
  it('loads the FP8 variant of each version into the engine, which generates with it', async () => {
    const model = 'fp8/tiny';
    await publishTiny(world.relay.socketPath, model, [0]);
    const a = await startTestAgent({
      natsUrl: fx.nats.url,
      connect: natsClient,
      redis: fx.redis,
      job: 'fp8',
      id: 'ag-fp8',
      engineUrl: world.engine.url,
      relaySocket: world.relay.socketPath,
      model,
      weights: 'fp8',
    });
    world.closers.push(() => a.close());
    await expect.poll(() => a.agent.client?.version, { timeout: 30_000 }).toBe(0);
    expect(await modelPath(world.engine.url)).toMatch(/\/models\/fp8~2ftiny~40fp8\/v0$/);
    expect(await new SglangClient(world.engine.url).weightVersion()).toBe('0');
    // The agent holds its lease on the variant; the bf16 version is there beside it.
    const client = await RelayClient.connect({ socketPath: world.relay.socketPath, name: 'test' });
    world.closers.push(() => {
      client.close();
      return Promise.resolve();
    });
    const versions = (await client.status()).versions;
    expect(versions.find((v) => v.model === `${model}@fp8` && v.version === 0)?.leases).toBe(1);
    expect(versions.find((v) => v.model === model && v.version === 0)).toBeDefined();
    // The engine generates with the dequantised weights.
    const answer = (await (
      await fetch(`${world.engine.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 8, temperature: 0, ignore_eos: true } }),
      })
    ).json()) as { output_ids: number[]; meta_info: { weight_version: string } };
    expect(answer.output_ids).toHaveLength(8);
    expect(answer.meta_info.weight_version).toBe('0');
  }, 90_000);
});
