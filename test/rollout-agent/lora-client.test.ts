/**
 * The SGLang client's LoRA methods against the real reference engine (python -m
 * laminar.testing.engine): load an adapter, generate with `lora`, unload, and the refusals as
 * ERR_ENGINE_RELOAD / ERR_ENGINE_REQUEST. The adapter and the expected tokens come from
 * laminar.testing.lora in a Python process: the greedy output of the base model with the adapter
 * merged into its weights. The engine side in depth: python/tests/test_reference_engine_lora.py.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { SglangClient, type GenerateRequest } from '../../src/rollout-agent/index.js';
import { projectPython, REPO_ROOT, spawnReferenceEngine, TORCH_ENV, type ReferenceEngine } from '../../src/services/index.js';

const run = promisify(execFile);
const PROMPT = [1, 14, 7, 5, 8, 5, 3];
const NEW_TOKENS = 12;

/** Writes base/ (a TinyLM), adapter/ (PEFT layout) and prints the greedy references as JSON. */
const WRITE_MODEL_AND_ADAPTER = `
import json, sys, torch
from laminar.testing import TinyLM, TinyLMConfig, save_model
from laminar.testing.lora import LoraAdapter, LoraConfig, merged_state_dict, read_lora_adapter
root, prompt, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(1)
base = TinyLM(TinyLMConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2, max_seq_len=64)).eval()
save_model(base, root + "/base")
torch.manual_seed(2)
adapter = LoraAdapter(base, LoraConfig(r=4, lora_alpha=8, base_model_name_or_path="lora/tiny"))
with torch.no_grad():
    for b in adapter.lora_b:
        b.normal_(0.0, 0.3)
adapter.save(root + "/adapter")
merged = TinyLM(base.config)
merged.load_state_dict(merged_state_dict(base, read_lora_adapter(root + "/adapter", base)))
def greedy(model):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt):]
print(json.dumps({"base": greedy(base), "adapter": greedy(merged.eval())}))
`;

let root: string;
let engine: ReferenceEngine;
let expected: { base: number[]; adapter: number[] };

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'laminar-lora-client-'));
  const { stdout } = await run(projectPython(), ['-c', WRITE_MODEL_AND_ADAPTER, root, JSON.stringify(PROMPT), String(NEW_TOKENS)], {
    cwd: REPO_ROOT,
    env: { ...process.env, ...TORCH_ENV },
  });
  expected = JSON.parse(stdout) as typeof expected;
  engine = await spawnReferenceEngine('lora engine', { modelPath: join(root, 'base'), kvCapacityTokens: 1024, args: ['--max-loras', '1'] });
}, 120_000);
afterAll(async () => {
  await (engine as ReferenceEngine | undefined)?.kill('SIGTERM');
  if (root) rmSync(root, { recursive: true, force: true });
});

function greedy(rid: string, lora?: string | null): GenerateRequest {
  return {
    rid,
    inputIds: PROMPT,
    maxNewTokens: NEW_TOKENS,
    sampling: { temperature: 0, topP: 1, topK: -1, seed: null, stopTokenIds: [], ignoreEos: true },
    ...(lora === undefined ? {} : { lora }),
  };
}

async function tokensOf(client: SglangClient, request: GenerateRequest): Promise<number[]> {
  const tokens: number[] = [];
  const result = await client.generate(request, { signal: new AbortController().signal, onTokens: (t) => tokens.push(...t) });
  expect(result.finishReason).toBe('length');
  return tokens;
}

describe('SGLang client: LoRA adapters on the reference engine', () => {
  it('loads an adapter, generates with it beside the base, and unloads it', async () => {
    expect(expected.adapter).not.toEqual(expected.base); // the adapter changes the output
    const client = new SglangClient(engine.url);
    await client.loadLoraAdapter('tiny-v1', join(root, 'adapter'));
    const [withAdapter, base, explicitBase] = await Promise.all([
      tokensOf(client, greedy('with-adapter', 'tiny-v1')),
      tokensOf(client, greedy('base')),
      tokensOf(client, greedy('base-null', null)),
    ]);
    expect(withAdapter).toEqual(expected.adapter);
    expect(base).toEqual(expected.base);
    expect(explicitBase).toEqual(expected.base);
    await client.unloadLoraAdapter('tiny-v1');
    // Unloaded: the engine refuses the name (400), the client says so; the base still serves.
    await expect(tokensOf(client, greedy('after-unload', 'tiny-v1'))).rejects.toMatchObject({
      code: ErrorCodes.ENGINE_REQUEST,
      message: expect.stringContaining('not loaded: tiny-v1') as string,
    });
    expect(await tokensOf(client, greedy('base-after'))).toEqual(expected.base);
  }, 60_000);

  it('turns every refusal into ERR_ENGINE_RELOAD with the engine’s reason', async () => {
    const client = new SglangClient(engine.url);
    await expect(client.loadLoraAdapter('nowhere', join(root, 'nowhere'))).rejects.toMatchObject({
      code: ErrorCodes.ENGINE_RELOAD,
      message: expect.stringMatching(/LoRA adapter nowhere from .*: HTTP 400: .*is not a directory/) as string,
    });
    // A full model directory is not an adapter.
    await expect(client.loadLoraAdapter('base', join(root, 'base'))).rejects.toMatchObject({
      code: ErrorCodes.ENGINE_RELOAD,
      message: expect.stringContaining('adapter_config.json does not exist') as string,
    });
    await client.loadLoraAdapter('one', join(root, 'adapter'));
    try {
      await expect(client.loadLoraAdapter('two', join(root, 'adapter'))).rejects.toMatchObject({
        code: ErrorCodes.ENGINE_RELOAD,
        message: expect.stringContaining('Maximum number of loaded LoRA adapters is 1') as string,
      });
    } finally {
      await client.unloadLoraAdapter('one');
    }
    await expect(client.unloadLoraAdapter('one')).rejects.toMatchObject({
      code: ErrorCodes.ENGINE_RELOAD,
      message: expect.stringContaining('LoRA with name one does not exist') as string,
    });
  }, 60_000);
});
