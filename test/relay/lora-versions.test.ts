/**
 * LoRA adapter versions (src/relay/lora/): a version whose tensors are PEFT's lora_A/lora_B
 * pairs, published naming its base; written into its version directory as PEFT's layout
 * (adapter_model.safetensors, adapter_config.json, no engine files), listed with its kind and
 * base, its base kept leased while it is held, broadcast down a chain and kept across a restart
 * like any version. Bad input (an adapter for another base, tensors that are not pairs of the
 * config's rank, an adapter_config.json that does not parse): typed errors before anything is
 * allocated, and nothing left behind.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { loraMetadata, type LoraRequest } from '../../src/relay/lora/metadata.js';
import { modelDirName } from '../../src/relay/segments.js';
import { SECRET, segmentDigest } from '../helpers/broadcast.js';
import { CLI, inProcessRelay, loopbackChain, publishVisible, relaysPerTest, tempShmDir, until } from '../helpers/relay.js';
import { engineFilesDir, readSafetensors } from '../helpers/version-dirs.js';

process.env.UCX_TLS ??= 'tcp';

const BASE = 'org/tiny';
const ADAPTER = 'org/tiny-lora';
const D = 8;
const RANK = 2;

type Tensor = { name: string; dtype: 'F32'; shape: number[]; data: Float32Array };

function tensor(name: string, shape: number[], seed: number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { name, dtype: 'F32', shape, data: Float32Array.from({ length: n }, (_, i) => Math.sin(i + seed) / 10) };
}

/** A TinyLM-shaped base (python/src/laminar/testing/model.py's names): one layer, its projections. */
function baseTensors(seed = 0): Tensor[] {
  return [
    tensor('tok_emb.weight', [16, D], seed),
    tensor('layers.0.attn.qkv.weight', [3 * D, D], seed + 1),
    tensor('layers.0.attn.out.weight', [D, D], seed + 2),
    tensor('lm_head.weight', [16, D], seed + 3),
  ];
}

/** An adapter of qkv and out at rank RANK, with PEFT's keys (get_peft_model_state_dict). */
function adapterTensors(seed = 0, rank = RANK): Tensor[] {
  const p = 'base_model.model.layers.0.attn';
  return [
    tensor(`${p}.qkv.lora_A.weight`, [rank, D], seed),
    tensor(`${p}.qkv.lora_B.weight`, [3 * D, rank], seed + 1),
    tensor(`${p}.out.lora_A.weight`, [rank, D], seed + 2),
    tensor(`${p}.out.lora_B.weight`, [D, rank], seed + 3),
  ];
}

function adapterConfig(overrides: Record<string, unknown> = {}): string {
  return JSON.stringify({
    peft_type: 'LORA',
    r: RANK,
    lora_alpha: 4,
    target_modules: ['qkv', 'out'],
    base_model_name_or_path: BASE,
    bias: 'none',
    ...overrides,
  });
}

function lora(overrides: Partial<LoraRequest> = {}): LoraRequest {
  return { baseModel: BASE, baseVersion: 1, config: adapterConfig(), ...overrides };
}

/** Segment files and version directories of `model` in a relay's shm directory. */
function leftovers(relay: Relay, model: string): string[] {
  const shm = relay.store.options.shmDir;
  const prefix = modelDirName(model);
  const segments = readdirSync(shm).filter((f) => f.startsWith(prefix + '.'));
  const dirs = existsSync(join(shm, 'models', prefix)) ? readdirSync(join(shm, 'models', prefix)) : [];
  return [...segments, ...dirs];
}

describe('relay: LoRA adapter versions', () => {
  const { cleanups, start, scratch } = relaysPerTest();

  it('writes the PEFT layout into the version directory and lists the kind and the base', async () => {
    const engine = engineFilesDir();
    cleanups.push(() => engine.cleanup());
    const { relay, client } = await start(scratch(), { engineFiles: engine.dir });
    await publishVisible(client, { model: BASE, version: 1, tensors: baseTensors() });
    const config = adapterConfig();
    const described = await publishVisible(client, { model: ADAPTER, version: 1, tensors: adapterTensors(), lora: lora({ config }) });

    const dir = described.dir!;
    expect(dir).toBe(join(relay.store.options.shmDir, 'models', 'org~2ftiny-lora', 'v1'));
    // PEFT's layout and nothing else: an adapter directory is loaded into an engine serving the base.
    expect(readdirSync(dir).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    expect(readFileSync(join(dir, 'adapter_config.json'), 'utf8')).toBe(config);
    const file = readSafetensors(join(dir, 'adapter_model.safetensors'));
    for (const t of adapterTensors()) {
      const got = file.tensors.get(t.name)!;
      expect([got.dtype, got.shape]).toEqual(['F32', t.shape]);
      expect(got.bytes.equals(Buffer.from(t.data.buffer))).toBe(true);
    }
    // The base's directory is a full one, with the engine files.
    expect(readdirSync(join(relay.store.options.shmDir, 'models', 'org~2ftiny', 'v1'))).toContain('config.json');

    const versions = (await client.status()).versions;
    expect(versions.find((v) => v.model === ADAPTER)).toMatchObject({ kind: 'lora', base: { model: BASE, version: 1 }, state: 'complete' });
    expect(versions.find((v) => v.model === BASE)).toMatchObject({ kind: 'full', base: null, leases: 1 });
    const { stdout } = await promisify(execFile)(process.execPath, [CLI, 'versions', '--socket', relay.options.socketPath]);
    expect(stdout).toMatch(/KIND\s+BASE/);
    expect(stdout).toMatch(/org\/tiny-lora\s+1\s+complete\s+lora\s+org\/tiny v1\s/);
    expect(stdout).toMatch(/org\/tiny\s+1\s+complete\s+full\s+-\s/);
    // No FP8 variant of an adapter: refused, typed, nothing made.
    await expect(client.acquire({ model: `${ADAPTER}@fp8`, version: 1 })).rejects.toMatchObject({ code: ErrorCodes.FP8_NO_ELIGIBLE_TENSORS });
    expect(leftovers(relay, `${ADAPTER}@fp8`)).toEqual([]);
    // Acquire gives the metadata that says what the version is (the rollout agent reads it).
    await using lease = await client.acquire({ model: ADAPTER });
    expect(lease.metadata).toMatchObject({ 'laminar.kind': 'lora', 'laminar.lora.base_model': BASE, 'laminar.lora.base_version': '1' });
  });

  it('keeps the named base while an adapter of it is held, and lets it go with the last one', async () => {
    const { relay, client } = await start(scratch(), { keepVersions: 0 });
    const retired: string[] = [];
    relay.store.on('retired', (v) => retired.push(`${v.model}@${v.version}`));
    // One model id for the base and its adapters: version 1 full, then adapters of it.
    await publishVisible(client, { model: BASE, version: 1, tensors: baseTensors() });
    await publishVisible(client, { model: BASE, version: 2, tensors: adapterTensors(2), lora: lora() });
    const retiredV2 = new Promise<void>((resolve) => relay.store.on('retired', (v) => v.version === 2 && resolve()));
    await publishVisible(client, { model: BASE, version: 3, tensors: adapterTensors(3), lora: lora() });
    await retiredV2;
    // Version 2 went (not the latest, nobody leases it); version 1 is the base version 3 leases.
    expect(relay.store.peek(BASE, 1)).toMatchObject({ state: 'complete', leases: 1 });
    // A full version 4 makes version 3 go, and with it the lease on version 1: both retire.
    const bothGone = new Promise<void>((resolve) =>
      relay.store.on('retired', () => retired.includes(`${BASE}@1`) && retired.includes(`${BASE}@3`) && resolve()),
    );
    await publishVisible(client, { model: BASE, version: 4, tensors: baseTensors(4) });
    await bothGone;
    expect(relay.store.list().map((v) => v.version)).toEqual([4]);
    // Without a base version named, an adapter applies to the newest full version (4 now) and
    // leases nothing: with keepVersions 0, version 4 goes once version 5 is the latest.
    const retiredV4 = new Promise<void>((resolve) => relay.store.on('retired', (v) => v.version === 4 && resolve()));
    await publishVisible(client, { model: BASE, version: 5, tensors: adapterTensors(5), lora: lora({ baseVersion: undefined }) });
    expect((await client.status()).versions.find((v) => v.version === 5)).toMatchObject({ kind: 'lora', base: { model: BASE, version: null } });
    await retiredV4;
  });

  describe('bad input: a typed error, nothing allocated, the version free to publish right', () => {
    let relay: Relay;
    let client: RelayClient;
    const tmp = tempShmDir();
    beforeAll(async () => {
      relay = await inProcessRelay(tmp.dir, { pin: false, chunkSize: '64KiB' });
      client = await RelayClient.connect({ socketPath: relay.options.socketPath });
      await publishVisible(client, { model: BASE, version: 1, tensors: baseTensors() });
    });
    afterAll(async () => {
      client.close();
      await relay.close();
      tmp.cleanup();
    });

    const cases: [string, string, () => { tensors: Tensor[]; lora?: LoraRequest; metadata?: Record<string, string> }][] = [
      [
        'an adapter of another model (shapes that fit no weight of the base)',
        ErrorCodes.LORA_BASE_MISMATCH,
        () => {
          const tensors = adapterTensors();
          tensors[1] = tensor('base_model.model.layers.0.attn.qkv.lora_B.weight', [5 * D, RANK], 1);
          return { tensors, lora: lora() };
        },
      ],
      [
        'a module the base does not have',
        ErrorCodes.LORA_BASE_MISMATCH,
        () => ({
          tensors: [
            tensor('base_model.model.layers.7.attn.qkv.lora_A.weight', [RANK, D], 0),
            tensor('base_model.model.layers.7.attn.qkv.lora_B.weight', [3 * D, RANK], 1),
          ],
          lora: lora(),
        }),
      ],
      ['a base the relay does not hold', ErrorCodes.LORA_BASE_MISMATCH, () => ({ tensors: adapterTensors(), lora: lora({ baseModel: 'org/other' }) })],
      ['a base version the relay does not hold', ErrorCodes.LORA_BASE_MISMATCH, () => ({ tensors: adapterTensors(), lora: lora({ baseVersion: 7 }) })],
      [
        'lora_A without its lora_B',
        ErrorCodes.LORA_BAD_TENSORS,
        () => ({ tensors: adapterTensors().filter((t) => !t.name.endsWith('out.lora_B.weight')), lora: lora() }),
      ],
      ["a rank other than the config's", ErrorCodes.LORA_BAD_TENSORS, () => ({ tensors: adapterTensors(0, RANK + 1), lora: lora() })],
      [
        'a tensor that is not a LoRA matrix',
        ErrorCodes.LORA_BAD_TENSORS,
        () => ({ tensors: [...adapterTensors(), tensor('layers.0.attn.qkv.weight', [3 * D, D], 0)], lora: lora() }),
      ],
      [
        'keys with the adapter name left in',
        ErrorCodes.LORA_BAD_TENSORS,
        () => ({
          tensors: adapterTensors().map((t) => ({ ...t, name: t.name.replace('.weight', '.default.weight') })),
          lora: lora(),
        }),
      ],
      [
        'a module the config does not target',
        ErrorCodes.LORA_BAD_TENSORS,
        () => ({ tensors: adapterTensors(), lora: lora({ config: adapterConfig({ target_modules: ['qkv'] }) }) }),
      ],
      [
        'an adapter_config.json that does not parse',
        ErrorCodes.LORA_BAD_CONFIG,
        () => ({ tensors: adapterTensors(), lora: lora({ config: '{"peft_type": "LORA", "r": 2,' }) }),
      ],
      [
        'a config that is not LoRA',
        ErrorCodes.LORA_BAD_CONFIG,
        () => ({ tensors: adapterTensors(), lora: lora({ config: adapterConfig({ peft_type: 'IA3' }) }) }),
      ],
      [
        'a config with trained biases',
        ErrorCodes.LORA_BAD_CONFIG,
        () => ({ tensors: adapterTensors(), lora: lora({ config: adapterConfig({ bias: 'all' }) }) }),
      ],
      [
        'a config given as an object, not the text of the file',
        ErrorCodes.LORA_BAD_CONFIG,
        () => ({
          tensors: adapterTensors(),
          lora: { ...lora(), config: JSON.parse(adapterConfig()) as string },
        }),
      ],
      ['an adapter key in plain metadata', ErrorCodes.INVALID_ARG, () => ({ tensors: baseTensors(), metadata: { 'laminar.kind': 'lora' } })],
    ];

    it.each(cases)('%s', async (_name, code, make) => {
      const { tensors, lora: adapter, metadata } = make();
      const before = (await client.status()).usedBytes;
      await expect(
        client.beginPublish({
          model: ADAPTER,
          version: 1,
          tensors: tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
          ...(adapter ? { lora: adapter } : {}),
          ...(metadata ? { metadata } : {}),
        }),
      ).rejects.toMatchObject({ code });
      expect(leftovers(relay, ADAPTER)).toEqual([]);
      const status = await client.status();
      expect(status.usedBytes).toBe(before);
      expect(status.versions.map((v) => v.model)).toEqual([BASE]);
    });

    it('then takes the adapter published right', async () => {
      const described = await publishVisible(client, { model: ADAPTER, version: 1, tensors: adapterTensors(), lora: lora() });
      expect(readdirSync(described.dir!).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    });
  });

  it('keeps an adapter across a restart: its kind, its directory and its lease on the base', async () => {
    const shm = scratch();
    {
      const relay = await inProcessRelay(shm, { pin: false, chunkSize: '64KiB' });
      const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
      await publishVisible(client, { model: BASE, version: 1, tensors: baseTensors() });
      await publishVisible(client, { model: ADAPTER, version: 1, tensors: adapterTensors(), lora: lora() });
      client.close();
      await relay.close();
    }
    const { relay, client } = await start(shm);
    await relay.store.recovered();
    const versions = (await client.status()).versions;
    expect(versions.find((v) => v.model === ADAPTER)).toMatchObject({ kind: 'lora', base: { model: BASE, version: 1 }, state: 'complete' });
    expect(versions.find((v) => v.model === BASE)).toMatchObject({ leases: 1 });
    const dir = versions.find((v) => v.model === ADAPTER)!.dir!;
    expect(readdirSync(dir).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    expect(readFileSync(join(dir, 'adapter_config.json'), 'utf8')).toBe(adapterConfig());
  });
});

describe('relay: LoRA adapter versions down a chain of 3 relays', () => {
  const dirs: { dir: string; cleanup(): void }[] = [];
  let relays: Relay[] = [];
  let client: RelayClient;

  /** Resolves when every relay of the chain holds `version` of `model` complete. */
  const everywhere = (model: string, version: number): Promise<unknown> =>
    Promise.all(
      relays.map((r) => until(`${model} v${version} on ${r.options.relayId}`, () => (r.store.peek(model, version)?.state === 'complete' ? true : undefined))),
    );

  beforeAll(async () => {
    ({ relays } = await loopbackChain(3, async (i, listen) => {
      const shm = tempShmDir();
      dirs.push(shm);
      return inProcessRelay(shm.dir, { relayId: `r${i}`, listen, secret: SECRET, pin: false, chunkSize: '64KiB', retryInterval: '200ms', peerTimeout: '3s' });
    }));
    client = await RelayClient.connect({ socketPath: relays[0]!.options.socketPath });
  });

  afterAll(async () => {
    client.close();
    for (const r of relays) await r.close();
    for (const d of dirs) d.cleanup();
  });

  it('broadcasts an adapter like any version: same bytes, PEFT layout and base lease on every relay', async () => {
    await publishVisible(client, { model: BASE, version: 1, tensors: baseTensors() });
    await everywhere(BASE, 1);
    await publishVisible(client, { model: ADAPTER, version: 1, tensors: adapterTensors(), lora: lora() });
    await everywhere(ADAPTER, 1);
    const digests = relays.map((r) => segmentDigest(r.store.peek(ADAPTER, 1)!.path));
    expect(new Set(digests).size).toBe(1);
    for (const r of relays) {
      const v = r.store.peek(ADAPTER, 1)!;
      expect(v.info()).toMatchObject({ kind: 'lora', base: { model: BASE, version: 1 } });
      expect(readdirSync(v.dir!).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
      expect(r.store.peek(BASE, 1)!.leases).toBe(1);
    }
  });

  it('checks an adapter pushed from a trainer host at the master: a wrong base refused, typed, nothing allocated', async () => {
    const master = relays[0]!;
    if (master.store.peek(BASE, 1) === undefined) await publishVisible(client, { model: BASE, version: 1, tensors: baseTensors() });
    await everywhere(BASE, 1);
    const publisher = await RelayClient.remote({ address: `127.0.0.1:${master.broadcaster!.port}`, secret: SECRET });
    try {
      // What a trainer host pushes is its local relay's segment: the header's metadata says what it is.
      const asAdapter = (request: LoraRequest): Record<string, string> => loraMetadata(request);
      const wide = adapterTensors(0).map((t) => (t.name.endsWith('out.lora_B.weight') ? tensor(t.name, [2 * D, RANK], 9) : t));
      await expect(publisher.publish({ model: ADAPTER, version: 5, tensors: wide, metadata: asAdapter(lora()) })).rejects.toMatchObject({
        code: ErrorCodes.LORA_BASE_MISMATCH,
      });
      await expect(
        publisher.publish({ model: ADAPTER, version: 5, tensors: adapterTensors(), metadata: asAdapter(lora({ baseVersion: 7 })) }),
      ).rejects.toMatchObject({
        code: ErrorCodes.LORA_BASE_MISMATCH,
      });
      await expect(
        publisher.publish({ model: ADAPTER, version: 5, tensors: adapterTensors(), metadata: asAdapter(lora({ config: '{' })) }),
      ).rejects.toMatchObject({
        code: ErrorCodes.LORA_BAD_CONFIG,
      });
      expect(master.store.peek(ADAPTER, 5)).toBeUndefined();
      expect(leftovers(master, ADAPTER).filter((f) => f.includes('v5'))).toEqual([]);
      // Pushed right, it is taken and goes down the chain as an adapter of the master's base.
      await publisher.publish({ model: ADAPTER, version: 5, tensors: adapterTensors(5), metadata: asAdapter(lora()) });
      await everywhere(ADAPTER, 5);
      expect(master.store.peek(ADAPTER, 5)!.info()).toMatchObject({ kind: 'lora', base: { model: BASE, version: 1 } });
    } finally {
      await publisher.close();
    }
  });
});
