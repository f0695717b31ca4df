/**
 * `npm run bench -- lora [--updates 20] [--rank 16] [--d-model 256] [--layers 4]`
 *
 * How soon a LoRA adapter version is served (src/relay/lora/, src/rollout-agent/adapter-switch.ts):
 * lora_update_visible_ms is, per update, from the trainer's publish call to the first token the
 * engine generates with the adapter, taking the path the rollout agent takes: the relay's version
 * watch, an acquire of the version, the engine's /load_lora_adapter of its directory (through
 * the agent's EngineAdapters, which also unloads the previous adapter), a 1-token request naming
 * it. p50 over `--updates` adapters published one after another (each of the adapted weights of
 * every layer: qkv and out, rank `--rank`). On real processes: an in-process relay on /dev/shm
 * and the reference engine (python -m laminar.testing.engine) serving a random TinyLM of
 * `--d-model` and `--layers`; the relay holds a base of the same shapes, which the adapter is
 * checked against.
 *
 * The raw limits in the same run: the engine's own load of an adapter directory already written
 * (engine_load_ms) and its 1-token request on the base (engine_token_ms). Prints a table, then one
 * JSON line (the last line of stdout).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { silentLogger } from '../src/common/logger.js';
import { RelayClient } from '../src/relay/client/relay-client.js';
import { startRelay } from '../src/relay/daemon.js';
import { loraAdapterName } from '../src/relay/lora/metadata.js';
import { removeShmTree } from '../src/relay/pages/huge-mount.js';
import { EngineAdapters } from '../src/rollout-agent/adapter-switch.js';
import type { GenerateRequest } from '../src/rollout-agent/engine-client.js';
import { SglangClient } from '../src/rollout-agent/sglang-client.js';
import { spawnReferenceEngine } from '../src/services/index.js';
import { median, percentile, positiveInt, printTable, round } from './support.js';

const MODEL = 'bench/lora';

type F32Tensor = { name: string; dtype: 'F32'; shape: number[]; data: Float32Array };

function filled(n: number, seed: number, scale: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + seed * 78.233) * scale);
}

/** The adapted base weights of a TinyLM (python/src/laminar/testing/model.py): each layer's qkv and out. */
function adaptedShapes(d: number, layers: number): { module: string; out: number; in: number }[] {
  const shapes = [];
  for (let i = 0; i < layers; i++) shapes.push({ module: `layers.${i}.attn.qkv`, out: 3 * d, in: d }, { module: `layers.${i}.attn.out`, out: d, in: d });
  return shapes;
}

function adapterTensors(d: number, layers: number, rank: number, seed: number): F32Tensor[] {
  return adaptedShapes(d, layers).flatMap(({ module, out, in: inDim }) => [
    { name: `base_model.model.${module}.lora_A.weight`, dtype: 'F32' as const, shape: [rank, inDim], data: filled(rank * inDim, seed, 0.05) },
    { name: `base_model.model.${module}.lora_B.weight`, dtype: 'F32' as const, shape: [out, rank], data: filled(out * rank, seed + 1, 0.05) },
  ]);
}

function oneToken(rid: string, lora: string | null): GenerateRequest {
  return {
    rid,
    inputIds: [1, 2, 3, 4],
    maxNewTokens: 1,
    sampling: { temperature: 0, topP: 1, topK: -1, seed: null, stopTokenIds: [], ignoreEos: true },
    lora,
  };
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      updates: { type: 'string', default: '20' },
      rank: { type: 'string', default: '16' },
      'd-model': { type: 'string', default: '256' },
      layers: { type: 'string', default: '4' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write('usage: npm run bench -- lora [--updates 20] [--rank 16] [--d-model 256] [--layers 4]\n');
    return;
  }
  const updates = positiveInt(values.updates, '--updates');
  const rank = positiveInt(values.rank, '--rank');
  const d = positiveInt(values['d-model'], '--d-model');
  const layers = positiveInt(values.layers, '--layers');

  const root = mkdtempSync(join('/dev/shm', 'laminar-bench-lora-'));
  const configPath = join(root, 'engine-config.json');
  writeFileSync(configPath, JSON.stringify({ model_type: 'laminar-tinylm', vocab_size: 16, d_model: d, n_layers: layers, n_heads: 4, max_seq_len: 64 }));
  const relay = await startRelay({ shmDir: join(root, 'segments'), socketPath: join(root, 'relay.sock'), metricsPort: -1, pin: false }).catch(
    (err: unknown) => {
      removeShmTree(root);
      throw err;
    },
  );
  const engine = await spawnReferenceEngine('bench engine', { args: ['--config', configPath, '--random-init'], seed: 1 }).catch(async (err: unknown) => {
    // Nothing else is up yet: the relay and its directory go with the failed start.
    await relay.close();
    removeShmTree(root);
    throw err;
  });
  const client = await RelayClient.connect({ socketPath: relay.options.socketPath, name: 'lora bench' });
  const watcher = await RelayClient.connect({ socketPath: relay.options.socketPath, name: 'lora bench (agent)' });
  const sglang = new SglangClient(engine.url);
  const adapters = new EngineAdapters(sglang, silentLogger);
  const stop = new AbortController();
  const events = watcher.watch({ model: MODEL, replay: true, signal: stop.signal })[Symbol.asyncIterator]();
  try {
    // The base, as the relay checks adapters against it (the engine serves its own random one of the same shapes).
    const base = adaptedShapes(d, layers).map(({ module, out, in: inDim }) => ({
      name: `${module}.weight`,
      dtype: 'F32' as const,
      shape: [out, inDim],
      data: new Float32Array(out * inDim),
    }));
    await (
      await client.publish({ model: MODEL, version: 0, tensors: base })
    ).visible;
    await events.next();
    const config = JSON.stringify({
      peft_type: 'LORA',
      r: rank,
      lora_alpha: 2 * rank,
      target_modules: ['qkv', 'out'],
      base_model_name_or_path: MODEL,
      bias: 'none',
    });
    const generate = async (rid: string, lora: string | null): Promise<void> => {
      await sglang.generate(oneToken(rid, lora), { signal: stop.signal, onTokens: () => undefined });
    };
    await generate('warm-up', null);

    const rows = { total: [] as number[], visible: [] as number[], watch: [] as number[], load: [] as number[], token: [] as number[] };
    const rawLoad: number[] = [];
    const rawToken: number[] = [];
    let adapterBytes = 0;
    for (let v = 1; v <= updates; v++) {
      const tensors = adapterTensors(d, layers, rank, v);
      adapterBytes = tensors.reduce((s, t) => s + t.data.byteLength, 0);
      const started = performance.now();
      const published = await client.publish({ model: MODEL, version: v, tensors, lora: { baseModel: MODEL, baseVersion: 0, config } });
      const visibleAt = published.visible.then(() => performance.now());
      const event = await events.next();
      if (event.done || event.value.version !== v) throw new Error(`the watch gave ${JSON.stringify(event.value)}, not version ${v}`);
      const watched = performance.now();
      await using lease = await watcher.acquire({ model: MODEL, version: v });
      await adapters.switchTo(lease);
      const loaded = performance.now();
      await generate(`v${v}`, loraAdapterName(MODEL, v));
      const served = performance.now();
      rows.total.push(served - started);
      rows.visible.push((await visibleAt) - started);
      rows.watch.push(watched - started);
      rows.load.push(loaded - watched);
      rows.token.push(served - loaded);
      // The raw limits: the engine loading this very directory again under another name, and a base token.
      const rawName = `raw-${v}`;
      const t0 = performance.now();
      await sglang.loadLoraAdapter(rawName, lease.dir!);
      rawLoad.push(performance.now() - t0);
      await sglang.unloadLoraAdapter(rawName);
      const t1 = performance.now();
      await generate(`base-${v}`, null);
      rawToken.push(performance.now() - t1);
    }
    const figures = {
      bench: 'lora',
      updates,
      rank,
      d_model: d,
      layers,
      adapter_bytes: adapterBytes,
      lora_update_visible_ms: round(median(rows.total), 2),
      lora_update_visible_p90_ms: round(percentile(rows.total, 0.9), 2),
      publish_to_verified_ms: round(median(rows.visible), 2),
      publish_to_watch_ms: round(median(rows.watch), 2),
      acquire_and_load_ms: round(median(rows.load), 2),
      first_token_ms: round(median(rows.token), 2),
      engine_load_ms: round(median(rawLoad), 2),
      engine_token_ms: round(median(rawToken), 2),
      visible_over_raw: round(median(rows.total) / (median(rawLoad) + median(rawToken)), 3),
    };
    printTable(`LoRA adapter updates (${updates}, rank ${rank}, ${layers} layers of d_model ${d}: ${(adapterBytes / 1024).toFixed(0)} KiB each)`, [
      ['figure', 'p50 ms'],
      ['publish call -> first token with the adapter (lora_update_visible_ms)', String(figures.lora_update_visible_ms)],
      ['  publish call -> verified, served by the relay', String(figures.publish_to_verified_ms)],
      ['  publish call -> watch event', String(figures.publish_to_watch_ms)],
      ['  acquire + /load_lora_adapter (+ unload of the previous)', String(figures.acquire_and_load_ms)],
      ['  1-token request with the adapter', String(figures.first_token_ms)],
      ['raw: the engine loading the same directory', String(figures.engine_load_ms)],
      ['raw: a 1-token request on the base', String(figures.engine_token_ms)],
    ]);
    process.stdout.write(`${JSON.stringify(figures)}\n`);
  } finally {
    stop.abort();
    watcher.close();
    client.close();
    await engine.kill('SIGTERM');
    await relay.close();
    removeShmTree(root);
  }
}
