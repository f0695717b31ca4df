/**
 * The LoRA wire format against the shared vectors (test/vectors/lora-adapters.json, also read by
 * python/tests/test_relay_lora.py): each case's `lora` request, sent to a real relay with begin,
 * gives the version exactly the vector's metadata, and the client's readers (versionKind,
 * loraBaseOf) read back the vector's kind and base.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { loraBaseOf, versionKind, type LoraBase, type LoraRequest } from '../../src/relay/lora/metadata.js';
import { inProcessRelay, publishVisible, REPO, tempShmDir } from '../helpers/relay.js';

interface VectorCase {
  name: string;
  model: string;
  version: number;
  request: LoraRequest;
  metadata: Record<string, string>;
  kind: string;
  loraBase: LoraBase;
}

interface Vectors {
  base: { model: string; version: number };
  cases: VectorCase[];
  tensors: { base: { name: string; shape: number[] }[]; adapter: { name: string; shape: number[] }[] };
}

const vectors = JSON.parse(readFileSync(join(REPO, 'test/vectors/lora-adapters.json'), 'utf8')) as Vectors;

function zeros(specs: { name: string; shape: number[] }[]): { name: string; dtype: 'F32'; shape: number[]; data: Float32Array }[] {
  return specs.map(({ name, shape }) => ({ name, dtype: 'F32', shape, data: new Float32Array(shape.reduce((a, b) => a * b, 1)) }));
}

describe('LoRA adapter versions: the shared vectors', () => {
  const tmp = tempShmDir();
  let relay: Relay;
  let client: RelayClient;
  beforeAll(async () => {
    relay = await inProcessRelay(tmp.dir, { pin: false, chunkSize: '64KiB' });
    client = await RelayClient.connect({ socketPath: relay.options.socketPath });
    await publishVisible(client, { ...vectors.base, tensors: zeros(vectors.tensors.base) });
  });
  afterAll(async () => {
    client.close();
    await relay.close();
    tmp.cleanup();
  });

  it('reads a full version as full, with no base', () => {
    expect(versionKind({})).toBe('full');
    expect(loraBaseOf({ 'laminar.source': 'x' })).toBeNull();
  });

  it.each(vectors.cases.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    await publishVisible(client, { model: c.model, version: c.version, tensors: zeros(vectors.tensors.adapter), lora: c.request });
    await using lease = await client.acquire({ model: c.model, version: c.version });
    const laminarKeys = Object.fromEntries(Object.entries(lease.metadata).filter(([k]) => k === 'laminar.kind' || k.startsWith('laminar.lora.')));
    expect(laminarKeys).toEqual(c.metadata);
    expect(versionKind(lease.metadata)).toBe(c.kind);
    expect(loraBaseOf(lease.metadata)).toEqual(c.loraBase);
  });
});
