/**
 * The FP8 kernel (native/fp8_quantize.cc) through src/relay/fp8: rounding of values chosen by
 * hand (bit-exactness against ml_dtypes is python/tests/test_fp8_convert.py), bands of rows equal
 * to the whole, non-finite input refused with its index, and arguments outside the mappings
 * refused. Plus the pure plan and config.json.
 */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { fp8QuantizeAsync, Mapping } from '../../src/native/index.js';
import { planLayout } from '../../src/safetensors/header.js';
import { fp8ConfigJson } from '../../src/relay/fp8/config.js';
import { compileKeepPattern, DEFAULT_FP8_KEEP, planFp8 } from '../../src/relay/fp8/plan.js';
import { quantiseVersion, versionSource } from '../../src/relay/fp8/quantize.js';

function f32Mapping(values: Float32Array): Mapping {
  const m = new Mapping(null, { size: Math.max(4096, values.byteLength) });
  new Float32Array(m.view(0, values.byteLength)).set(values);
  return m;
}

describe('FP8 block quantisation', () => {
  it('rounds to nearest even and keeps signs, with the block scale 448 / amax', async () => {
    // One 1 x 9 block of amax 448: scale 1, so the values meet e4m3's own grid.
    const values = new Float32Array([448, 1.0625, 1.1875, -1.0625, 2 ** -9 * 1.5, 2 ** -9 * 0.5, -(2 ** -11), -0, 232]);
    const src = f32Mapping(values);
    const dst = new Mapping(null, { size: 4096 });
    expect(await fp8QuantizeAsync(src, 0, 'F32', 1, values.length, 0, 1, dst, 0, 64)).toBe(-1);
    expect([...new Uint8Array(dst.view(0, values.length))]).toEqual([0x7e, 0x38, 0x3a, 0xb8, 0x02, 0x00, 0x80, 0x80, 0x76]);
    expect(new Float32Array(dst.view(64, 4))[0]).toBe(1);
    // BF16 input: the upper half of each float32.
    const words = new Uint16Array(values.length);
    new Float32Array(values).forEach((v, i) => (words[i] = new Uint32Array(new Float32Array([v]).buffer)[0]! >>> 16));
    const bf = new Mapping(null, { size: 4096 });
    new Uint16Array(bf.view(0, words.byteLength)).set(words);
    const out = new Mapping(null, { size: 4096 });
    expect(await fp8QuantizeAsync(bf, 0, 'BF16', 1, values.length, 0, 1, out, 0, 64)).toBe(-1);
    expect([...new Uint8Array(out.view(0, values.length))]).toEqual([...new Uint8Array(dst.view(0, values.length))]);
  });

  it('gives the same bytes in bands of rows as in one call, and finds the first NaN or infinity', async () => {
    const rows = 300;
    const cols = 200;
    const values = new Float32Array(rows * cols).map((_, i) => Math.sin(i * 0.37) * (i % 7 === 0 ? 1e4 : 1));
    const src = f32Mapping(values);
    const whole = new Mapping(null, { size: 128 * 1024 });
    const bands = new Mapping(null, { size: 128 * 1024 });
    const scaleAt = 64 * 1024;
    expect(await fp8QuantizeAsync(src, 0, 'F32', rows, cols, 0, rows, whole, 0, scaleAt)).toBe(-1);
    for (const [a, b] of [
      [0, 128],
      [128, 256],
      [256, 300],
    ] as const) {
      expect(await fp8QuantizeAsync(src, 0, 'F32', rows, cols, a, b, bands, 0, scaleAt)).toBe(-1);
    }
    expect(Buffer.from(bands.view(0, rows * cols)).equals(Buffer.from(whole.view(0, rows * cols)))).toBe(true);
    expect(Buffer.from(bands.view(scaleAt, 3 * 2 * 4)).equals(Buffer.from(whole.view(scaleAt, 24)))).toBe(true);
    for (const bad of [NaN, Infinity, -Infinity]) {
      const copy = new Float32Array(values);
      copy[201 * cols + 150] = bad;
      copy[250 * cols + 3] = bad;
      expect(await fp8QuantizeAsync(f32Mapping(copy), 0, 'F32', rows, cols, 128, rows, whole, 0, scaleAt)).toBe(201 * cols + 150);
    }
  });

  it('gives the same bits with every width of vectors the CPU has', async () => {
    // AVX-512 quantises 16 lanes at a time, AVX2 8, the portable build 4, with their own code for
    // the rounding: blocks whose scale sends values into e4m3's subnormals and past 448, in both
    // dtypes.
    const rows = 260;
    const cols = 300;
    let x = 12345;
    const random = (): number => {
      x = (Math.imul(x, 1103515245) + 12345) | 0;
      return (x >>> 8) / 2 ** 24;
    };
    const values = new Float32Array(rows * cols).map((_, i) => {
      const v = (random() - 0.5) * 2 ** Math.floor(random() * 30 - 20);
      return i % 97 === 0 ? 3e4 : i % 89 === 0 ? 0 : v;
    });
    const bf16 = new Mapping(null, { size: rows * cols * 2 });
    new Uint16Array(bf16.view(0, rows * cols * 2)).set(new Uint16Array(values.buffer).filter((_, k) => k % 2 === 1));
    const scaleAt = 96 * 1024;
    const scaleBytes = 3 * 3 * 4;
    for (const [source, dtype] of [
      [f32Mapping(values), 'F32'],
      [bf16, 'BF16'],
    ] as const) {
      const outputs: Buffer[] = [];
      for (const simd of ['avx512', 'avx2', 'portable'] as const) {
        const out = new Mapping(null, { size: 128 * 1024 });
        expect(await fp8QuantizeAsync(source, 0, dtype, rows, cols, 0, rows, out, 0, scaleAt, simd)).toBe(-1);
        outputs.push(Buffer.concat([Buffer.from(out.view(0, rows * cols)), Buffer.from(out.view(scaleAt, scaleBytes))]));
      }
      expect(outputs[1]!.equals(outputs[0]!)).toBe(true);
      expect(outputs[2]!.equals(outputs[0]!)).toBe(true);
    }
    const out = new Mapping(null, { size: 128 * 1024 });
    expect(() => fp8QuantizeAsync(bf16, 0, 'BF16', 16, 16, 0, 16, out, 0, 1024, 'sse9' as 'avx2')).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_ARG }),
    );
  });

  it('refuses ranges outside the mappings and a read-only target', () => {
    const src = f32Mapping(new Float32Array(1024));
    const dst = new Mapping(null, { size: 4096 });
    expect(() => fp8QuantizeAsync(src, 0, 'F32', 64, 64, 0, 64, dst, 0, 0)).toThrow(expect.objectContaining({ code: ErrorCodes.OUT_OF_RANGE }));
    expect(() => fp8QuantizeAsync(src, 0, 'F32', 16, 16, 5, 16, dst, 0, 1024)).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
    expect(() => fp8QuantizeAsync(src, 0, 'F16' as 'F32', 16, 16, 0, 16, dst, 0, 1024)).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
  });

  it('plans which tensors become FP8, and refuses a model with none', () => {
    const keep = compileKeepPattern(DEFAULT_FP8_KEEP);
    const plan = planFp8(
      [
        { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [100, 64] },
        { name: 'model.layers.0.input_layernorm.weight', dtype: 'BF16', shape: [64] },
        { name: 'model.layers.0.self_attn.q_proj.weight', dtype: 'BF16', shape: [300, 64] },
        { name: 'model.layers.0.self_attn.q_proj.bias', dtype: 'BF16', shape: [300] },
        { name: 'model.layers.0.mlp.gate.weight', dtype: 'BF16', shape: [8, 64] },
        { name: 'model.layers.0.mlp.gate_proj.weight', dtype: 'F32', shape: [256, 64] },
        { name: 'model.layers.0.ids', dtype: 'I64', shape: [4, 4] },
        { name: 'lm_head.weight', dtype: 'BF16', shape: [100, 64] },
      ],
      keep,
    );
    expect(plan.tensors.filter((t) => t.quantised).map((t) => t.source.name)).toEqual([
      'model.layers.0.self_attn.q_proj.weight',
      'model.layers.0.mlp.gate_proj.weight',
    ]);
    expect(plan.specs.slice(2, 4)).toEqual([
      { name: 'model.layers.0.self_attn.q_proj.weight', dtype: 'F8_E4M3', shape: [300, 64] },
      { name: 'model.layers.0.self_attn.q_proj.weight_scale_inv', dtype: 'F32', shape: [3, 1] },
    ]);
    expect(plan.ignoredLayers).toEqual(['model.embed_tokens', 'model.layers.0.mlp.gate', 'lm_head']);
    expect(() => planFp8([{ name: 'norm.weight', dtype: 'BF16', shape: [64] }], keep)).toThrow(
      expect.objectContaining({ code: ErrorCodes.FP8_NO_ELIGIBLE_TENSORS }),
    );
    expect(() => compileKeepPattern('(')).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
  });

  it('writes a version: kept tensors copied, quantised ones with their scales; a NaN is a typed error', async () => {
    const specs = [
      { name: 'norm.weight', dtype: 'F32' as const, shape: [4] },
      { name: 'w.weight', dtype: 'F32' as const, shape: [130, 4] },
    ];
    const source = planLayout(specs, { model: 'm', version: 1, chunkSize: 4096 });
    const src = new Mapping(null, { size: source.totalSize });
    new Float32Array(src.view(source.tensors[0]!.offset, 16)).set([1, 2, 3, 4]);
    new Float32Array(src.view(source.tensors[1]!.offset, 130 * 16)).fill(0.5);
    const plan = planFp8(specs, compileKeepPattern(DEFAULT_FP8_KEEP));
    const target = planLayout(plan.specs, { model: 'm@fp8', version: 1, chunkSize: 4096 });
    const dst = new Mapping(null, { size: target.totalSize });
    await quantiseVersion(plan, versionSource(src, source), dst, target, 2);
    const [norm, w, scales] = target.tensors;
    expect([...new Float32Array(dst.view(norm!.offset, 16))]).toEqual([1, 2, 3, 4]);
    expect(new Uint8Array(dst.view(w!.offset, w!.byteLength)).every((b) => b === 0x7e)).toBe(true);
    expect([...new Float32Array(dst.view(scales!.offset, 8))]).toEqual([Math.fround(0.5 / 448), Math.fround(0.5 / 448)]);
    new Float32Array(src.view(source.tensors[1]!.offset, 130 * 16))[129 * 4 + 2] = NaN;
    await expect(quantiseVersion(plan, versionSource(src, source), dst, target, 2)).rejects.toMatchObject({
      code: ErrorCodes.FP8_NON_FINITE,
      details: { tensor: 'w.weight', index: 129 * 4 + 2 },
    });
  });

  it('adds quantization_config to config.json, and refuses one that does not parse', () => {
    const text = fp8ConfigJson('{"model_type":"llama","hidden_size":64}', ['lm_head'], 'config.json');
    expect(JSON.parse(text)).toEqual({
      model_type: 'llama',
      hidden_size: 64,
      quantization_config: { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128], ignored_layers: ['lm_head'] },
    });
    for (const bad of ['{"model_type":', '[1]', 'null']) {
      expect(() => fp8ConfigJson(bad, [], '/x/config.json')).toThrow(expect.objectContaining({ code: ErrorCodes.FP8_BAD_CONFIG }));
    }
  });
});
