/**
 * FP8 versions converted once at the master and broadcast (`--fp8-broadcast also|only`), on
 * loopback (real relays, real UCX over TCP): the FP8 version arrives down the chain
 * byte-identical to the master's and, tensor for tensor, to a relay's own conversion, and is
 * served there without converting; `only` sends no bf16 down, and a relay under it answers an
 * FP8 acquire made before anything arrived, and keeps the FP8 version across a restart; a
 * conversion the master refuses is reported (status, the acquire's typed error) and sends
 * nothing down.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import type { Relay } from '../../src/relay/daemon.js';
import { fp8ModelId } from '../../src/relay/fp8/model-id.js';
import { parseRelayOptions } from '../../src/relay/options.js';
import { SECRET, segmentDigest } from '../helpers/broadcast.js';
import { inProcessRelay, loopbackChain, publishVisible, tempShmDir, until, versionComplete } from '../helpers/relay.js';
import { engineFilesDir, readSafetensors } from '../helpers/version-dirs.js';

process.env.UCX_TLS ??= 'tcp';

const MODEL = 'org/fp8-chain';
const FP8 = fp8ModelId(MODEL);

/** bf16 words of f, truncated. */
function bf16(values: number[]): Uint16Array {
  const f = new Float32Array(values);
  return Uint16Array.from(new Uint32Array(f.buffer), (u) => u >>> 16);
}

/** A small Llama-like version: one quantised weight of several chunks (64 KiB), an embedding and a norm kept. */
function tensors(version: number, eligible = true): { name: string; dtype: 'BF16'; shape: number[]; data: Uint16Array }[] {
  const norm = { name: 'model.norm.weight', dtype: 'BF16' as const, shape: [64], data: bf16(Array.from({ length: 64 }, (_, i) => 1 + i / 64)) };
  const embed = { name: 'model.embed_tokens.weight', dtype: 'BF16' as const, shape: [64, 64], data: bf16(Array.from({ length: 4096 }, (_, i) => i / 1e4)) };
  if (!eligible) return [embed, norm];
  const w = Array.from({ length: 384 * 320 }, (_, i) => Math.sin(i * 0.013 + version) * (1 + (i % 97)) * 1e-3);
  return [embed, { name: 'model.layers.0.mlp.up_proj.weight', dtype: 'BF16', shape: [384, 320], data: bf16(w) }, norm];
}

describe('relay: FP8 versions broadcast from the master', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  function shm(): string {
    const tmp = tempShmDir();
    cleanups.push(() => tmp.cleanup());
    return tmp.dir;
  }

  async function client(relay: Relay): Promise<RelayClient> {
    const c = await RelayClient.connect({ socketPath: relay.options.socketPath });
    cleanups.push(() => c.close());
    return c;
  }

  /** A chain of `count` in-process relays under `--fp8-broadcast mode`, closed after the test. */
  async function chain(count: number, mode: string, extra: Parameters<typeof inProcessRelay>[1] = {}): Promise<{ relays: Relay[]; dirs: string[] }> {
    const dirs = Array.from({ length: count }, () => shm());
    const { relays } = await loopbackChain(count, async (i, listen) => {
      const relay = await inProcessRelay(dirs[i]!, {
        relayId: `r${i}`,
        listen,
        secret: SECRET,
        pin: false,
        chunkSize: '64KiB',
        retryInterval: '200ms',
        peerTimeout: '3s',
        delta: 'off',
        fp8Broadcast: mode,
        ...extra,
      });
      cleanups.push(() => relay.close());
      return relay;
    });
    return { relays, dirs };
  }

  it('refuses a mode it does not know', () => {
    expect(() => parseRelayOptions({ fp8Broadcast: 'sometimes' })).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
  });

  it('also: the FP8 version goes down beside bf16, byte-identical to the master’s and to a local conversion, served without converting', async () => {
    const engine = engineFilesDir();
    cleanups.push(() => engine.cleanup());
    const { relays } = await chain(3, 'also', { engineFiles: engine.dir });
    const [master, middle, tail] = relays as [Relay, Relay, Relay];
    const arrived = Promise.all([versionComplete(middle, FP8, 1), versionComplete(tail, FP8, 1), versionComplete(tail, MODEL, 1)]);
    await publishVisible(await client(master), { model: MODEL, version: 1, tensors: tensors(1) });
    await arrived;

    const atMaster = master.store.peek(FP8, 1)!;
    const atTail = tail.store.peek(FP8, 1)!;
    expect(segmentDigest(atTail.path)).toBe(segmentDigest(atMaster.path));
    // A version of the chain's at the tail: listed, not this relay's own cache.
    expect(atTail.derived).toBe(false);
    expect(tail.store.list().map((v) => v.model)).toEqual([MODEL, FP8]);

    // The tail serves the version it received; it converted nothing.
    const tailClient = await client(tail);
    const lease = await tailClient.acquire({ model: FP8, version: 1 });
    cleanups.push(() => lease.release());
    expect(lease.segment).toBe(atTail.segment);
    const tailStatus = await tailClient.status();
    expect(tailStatus.fp8Broadcast).toEqual({ mode: 'also', converting: false, made: 0, refused: [] });
    expect((await (await client(master)).status()).fp8Broadcast).toMatchObject({ mode: 'also', converting: true, made: 1, refused: [] });
    const config = JSON.parse(readFileSync(join(lease.dir!, 'config.json'), 'utf8')) as { quantization_config: { quant_method: string } };
    expect(config.quantization_config.quant_method).toBe('fp8');

    // A relay of no chain converting the same bf16 version itself: the same tensors, byte for byte.
    const alone = await inProcessRelay(shm(), { pin: false, chunkSize: '64KiB' });
    cleanups.push(() => alone.close());
    const aloneClient = await client(alone);
    await publishVisible(aloneClient, { model: MODEL, version: 1, tensors: tensors(1) });
    const local = await aloneClient.acquire({ model: FP8, version: 1 });
    cleanups.push(() => local.release());
    const mine = readSafetensors(join(local.dir!, 'model.safetensors')).tensors;
    const received = readSafetensors(join(lease.dir!, 'model.safetensors')).tensors;
    expect([...received.keys()].sort()).toEqual([...mine.keys()].sort());
    for (const [name, t] of mine) {
      expect({ name, dtype: received.get(name)!.dtype, shape: received.get(name)!.shape }).toEqual({ name, dtype: t.dtype, shape: t.shape });
      expect(received.get(name)!.bytes.equals(t.bytes), name).toBe(true);
    }
  });

  it('only: no bf16 down the chain; an FP8 acquire waiting before anything arrived is answered; kept across a restart', async () => {
    const { relays, dirs } = await chain(3, 'only');
    const [master, middle, tail] = relays as [Relay, Relay, Relay];
    const tailClient = await client(tail);
    // Asked before the version exists anywhere: the relay will never hold its bf16 source.
    const waiting = tailClient.acquire({ model: FP8, atLeast: 1, timeoutMs: 30_000 });
    await publishVisible(await client(master), { model: MODEL, version: 1, tensors: tensors(1) });
    const lease = await waiting;
    expect([lease.model, lease.version]).toEqual([FP8, 1]);
    expect(lease.segment).toBe(tail.store.peek(FP8, 1)!.segment);
    await lease.release();
    // The bf16 version was offered to nobody: the master sends versions in the order they
    // complete, and its FP8 version completes after it.
    for (const r of [middle, tail]) expect(r.store.list().map((v) => `${v.model}/${v.version}`)).toEqual([`${FP8}/1`]);
    await expect(tailClient.acquire({ model: MODEL })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_MODEL });
    expect(master.store.list().map((v) => v.model)).toEqual([MODEL, FP8]);

    // A version of the chain's, not a cache: a restart keeps it (a variant made here is deleted).
    const digest = segmentDigest(tail.store.peek(FP8, 1)!.path);
    tailClient.close();
    await tail.close();
    const again = await inProcessRelay(dirs[2]!, { pin: false, chunkSize: '64KiB' });
    cleanups.push(() => again.close());
    const kept = await (await client(again)).acquire({ model: FP8, version: 1 });
    cleanups.push(() => kept.release());
    expect(segmentDigest(again.store.peek(FP8, 1)!.path)).toBe(digest);
  });

  it('only: a version the master cannot convert is reported with its code, and nothing goes down for it', async () => {
    const { relays } = await chain(2, 'only');
    const [master, tail] = relays as [Relay, Relay];
    const masterClient = await client(master);
    await publishVisible(masterClient, { model: MODEL, version: 1, tensors: tensors(1, false) });
    const refused = await until('the refusal in the master’s status', async () => (await masterClient.status()).fp8Broadcast?.refused[0]);
    expect(refused).toMatchObject({ model: MODEL, version: 1, code: ErrorCodes.FP8_NO_ELIGIBLE_TENSORS });
    await expect(masterClient.acquire({ model: FP8, version: 1 })).rejects.toMatchObject({ code: ErrorCodes.FP8_NO_ELIGIBLE_TENSORS });

    // The next version converts and arrives; nothing of version 1 went before it.
    const arrived = versionComplete(tail, FP8, 2);
    await publishVisible(masterClient, { model: MODEL, version: 2, tensors: tensors(2) });
    await arrived;
    expect(tail.store.list().map((v) => `${v.model}/${v.version}`)).toEqual([`${FP8}/2`]);
    expect((await masterClient.status()).fp8Broadcast).toMatchObject({ made: 1, refused: [{ version: 1 }] });
  });
});
