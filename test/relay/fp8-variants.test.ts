/**
 * FP8 variants on an in-process relay: an acquire of `<model>@fp8` answered with the FP8 variant
 * of the bf16 version it finds, made once (concurrent requests share the conversion), with its
 * own segment, version directory and config.json; kept out of the broadcast's view and deleted
 * at a restart. Bad input: a model with nothing to quantise, a config.json that does not parse,
 * a NaN: typed errors, and no segment or directory left behind. (The bytes themselves are
 * checked against ml_dtypes in python/tests/test_fp8_convert.py.)
 */
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { fp8ModelId } from '../../src/relay/fp8/model-id.js';
import { publishVisible, relaysPerTest } from '../helpers/relay.js';
import { engineFilesDir, readSafetensors } from '../helpers/version-dirs.js';

const MODEL = 'org/fp8';

/** bf16 words of f, truncated (exact for the values used here). */
function bf16(values: number[]): Uint16Array {
  const f = new Float32Array(values);
  return Uint16Array.from(new Uint32Array(f.buffer), (u) => u >>> 16);
}

function e4m3(byte: number): number {
  const sign = byte & 0x80 ? -1 : 1;
  const exponent = (byte >> 3) & 0xf;
  const mantissa = byte & 7;
  return exponent === 0 ? sign * mantissa * 2 ** -9 : sign * (1 + mantissa / 8) * 2 ** (exponent - 7);
}

function tensors(version: number, poison = false): { name: string; dtype: 'BF16'; shape: number[]; data: Uint16Array }[] {
  const w = Array.from({ length: 300 * 256 }, (_, i) => Math.sin(i * 0.01 + version) * (1 + (i % 300)) * 1e-3);
  if (poison) w[1234] = NaN;
  return [
    { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [64, 32], data: bf16(Array.from({ length: 64 * 32 }, (_, i) => i / 100)) },
    { name: 'model.layers.0.mlp.up_proj.weight', dtype: 'BF16', shape: [300, 256], data: bf16(w) },
    { name: 'model.norm.weight', dtype: 'BF16', shape: [32], data: bf16(Array.from({ length: 32 }, () => 1)) },
  ];
}

describe('relay: FP8 variants', () => {
  const { cleanups, start, scratch } = relaysPerTest();

  it('serves the FP8 variant beside the bf16 version, made once, with its own directory and config.json', async () => {
    const engine = engineFilesDir();
    cleanups.push(() => engine.cleanup());
    const shm = scratch();
    const { relay, client } = await start(shm, { engineFiles: engine.dir });
    // Asked for before the bf16 version exists: waits for it like any acquire.
    const early = client.acquire({ model: fp8ModelId(MODEL), atLeast: 1, timeoutMs: 20_000 });
    await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1) });
    const [a, b] = await Promise.all([early, client.acquire({ model: fp8ModelId(MODEL), version: 1, timeoutMs: 20_000 })]);
    cleanups.push(
      () => a.release(),
      () => b.release(),
    );
    expect(a.segment).toBe(b.segment);
    expect(a.model).toBe(`${MODEL}@fp8`);
    expect(a.version).toBe(1);
    expect(a.dir).toBe(join(relay.store.options.shmDir, 'models', 'org~2ffp8~40fp8', 'v1'));

    const file = readSafetensors(join(a.dir!, 'model.safetensors'));
    expect([...file.tensors.keys()].sort()).toEqual(
      ['model.embed_tokens.weight', 'model.layers.0.mlp.up_proj.weight', 'model.layers.0.mlp.up_proj.weight_scale_inv', 'model.norm.weight'].sort(),
    );
    const source = tensors(1);
    for (const kept of [source[0]!, source[2]!]) {
      const t = file.tensors.get(kept.name)!;
      expect(t.dtype).toBe('BF16');
      expect(t.bytes.equals(Buffer.from(kept.data.buffer))).toBe(true);
    }
    const q = file.tensors.get('model.layers.0.mlp.up_proj.weight')!;
    const s = file.tensors.get('model.layers.0.mlp.up_proj.weight_scale_inv')!;
    expect([q.dtype, q.shape, s.dtype, s.shape]).toEqual(['F8_E4M3', [300, 256], 'F32', [3, 2]]);
    // Dequantised, within e4m3's half-step (1/16 relative) of the bf16 values.
    const scales = new Float32Array(s.bytes.buffer.slice(s.bytes.byteOffset, s.bytes.byteOffset + s.bytes.byteLength));
    const words = source[1]!.data;
    for (let i = 0; i < 300 * 256; i += 37) {
      const [r, c] = [Math.floor(i / 256), i % 256];
      const want = new Float32Array(new Uint32Array([words[i]! << 16]).buffer)[0]!;
      const got = e4m3(q.bytes[i]!) * scales[Math.floor(r / 128) * 2 + Math.floor(c / 128)]!;
      expect(Math.abs(got - want)).toBeLessThanOrEqual(Math.abs(want) / 16 + scales[Math.floor(r / 128) * 2 + Math.floor(c / 128)]! * 2 ** -10);
    }
    const config = JSON.parse(readFileSync(join(a.dir!, 'config.json'), 'utf8')) as Record<string, unknown>;
    expect(config).toMatchObject({
      model_type: 'llama',
      hidden_size: 8,
      quantization_config: {
        quant_method: 'fp8',
        fmt: 'e4m3',
        activation_scheme: 'dynamic',
        weight_block_size: [128, 128],
        ignored_layers: ['model.embed_tokens'],
      },
    });
    // The other engine files are linked as for the bf16 version.
    expect(readdirSync(a.dir!).sort()).toEqual(readdirSync(join(relay.store.options.shmDir, 'models', 'org~2ffp8', 'v1')).sort());

    // The bf16 version is served as before; the variant is in status but not in the broadcast's view.
    const bf = await client.acquire({ model: MODEL, version: 1 });
    cleanups.push(() => bf.release());
    expect(bf.segment).not.toBe(a.segment);
    expect(relay.store.list().map((v) => v.model)).toEqual([MODEL]);
    const status = (await client.status()) as { versions: { model: string; version: number }[] };
    expect(status.versions.map((v) => v.model).sort()).toEqual([MODEL, `${MODEL}@fp8`]);
    // Asked again: the same variant, no second conversion.
    const again = await client.acquire({ model: fp8ModelId(MODEL) });
    cleanups.push(() => again.release());
    expect(again.segment).toBe(a.segment);
  });

  it('refuses a model with nothing to quantise, a NaN and a config.json that does not parse, leaving nothing', async () => {
    const engine = engineFilesDir();
    cleanups.push(() => engine.cleanup());
    const shm = scratch();
    const { relay, client } = await start(shm, { engineFiles: engine.dir });
    const segments = relay.store.options.shmDir;
    const leftovers = (): string[] => readdirSync(segments).filter((n) => n.includes('~40fp8'));

    await publishVisible(client, { model: 'org/norms', version: 1, tensors: [tensors(1)[2]!] });
    await expect(client.acquire({ model: 'org/norms@fp8' })).rejects.toMatchObject({ code: ErrorCodes.FP8_NO_ELIGIBLE_TENSORS });

    await publishVisible(client, { model: MODEL, version: 1, tensors: tensors(1, true) });
    await expect(client.acquire({ model: fp8ModelId(MODEL) })).rejects.toMatchObject({ code: ErrorCodes.FP8_NON_FINITE });
    await expect(client.acquire({ model: fp8ModelId(MODEL) })).rejects.toMatchObject({ code: ErrorCodes.FP8_NON_FINITE });

    writeFileSync(join(engine.dir, 'config.json'), '{"model_type": "llama",');
    await publishVisible(client, { model: MODEL, version: 2, tensors: tensors(2) });
    await expect(client.acquire({ model: fp8ModelId(MODEL), version: 2 })).rejects.toMatchObject({ code: ErrorCodes.FP8_BAD_CONFIG });
    expect(leftovers()).toEqual([]);
    expect(existsSync(join(segments, 'models', 'org~2ffp8~40fp8'))).toBe(false);
    expect(existsSync(join(segments, 'models', 'org~2fnorms~40fp8'))).toBe(false);

    // Mended: the next request makes it.
    writeFileSync(join(engine.dir, 'config.json'), '{"model_type": "llama"}');
    const lease = await client.acquire({ model: fp8ModelId(MODEL), version: 2 });
    cleanups.push(() => lease.release());
    expect(lease.dir).not.toBeNull();
    // The bf16 versions were served throughout.
    expect((await client.acquire({ model: MODEL, version: 2 })).version).toBe(2);
  });

  it('is deleted at a restart and made again on request', async () => {
    const shm = scratch();
    const first = await start(shm);
    await publishVisible(first.client, { model: MODEL, version: 1, tensors: tensors(1) });
    const lease = await first.client.acquire({ model: fp8ModelId(MODEL) });
    const segment = lease.segment;
    // Without --engine-files the directory holds the weights only, as a bf16 one does.
    expect(readdirSync(lease.dir!)).toEqual(['model.safetensors']);
    await lease.release();
    first.client.close();
    await first.relay.close();
    const second = await start(shm);
    expect(readdirSync(second.relay.store.options.shmDir).filter((n) => n.includes('~40fp8'))).toEqual([]);
    expect(second.relay.store.list({ variants: true }).map((v) => v.model)).toEqual([MODEL]);
    const again = await second.client.acquire({ model: fp8ModelId(MODEL) });
    cleanups.push(() => again.release());
    expect(again.segment).toBe(segment);
    expect(existsSync(join(again.dir!, 'model.safetensors'))).toBe(true);
  });
});
