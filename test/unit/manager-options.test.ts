/** `laminar manager` option parsing that carries logic: B per model profile. */
import { describe, expect, it } from 'vitest';
import { parseRooflineBatch } from '../../src/cli/manager.js';

describe('--roofline-batch', () => {
  it('takes a default and per-model values', () => {
    expect(parseRooflineBatch('256')).toEqual({ default: 256, byModel: {} });
    expect(parseRooflineBatch('128, qwen-7b=512,org/qwen-72b=64')).toEqual({ default: 128, byModel: { 'qwen-7b': 512, 'org/qwen-72b': 64 } });
    expect(parseRooflineBatch('qwen-7b=512')).toEqual({ default: 256, byModel: { 'qwen-7b': 512 } });
  });

  it('refuses what is not a positive integer, with the limits code', () => {
    for (const bad of ['0', '-3', 'x', 'qwen=1.5', 'qwen=', '256,m=0']) {
      expect(() => parseRooflineBatch(bad), bad).toThrow(expect.objectContaining({ code: 'ERR_REPACK_LIMITS' }));
    }
  });
});
