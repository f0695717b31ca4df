/** `laminar manager` option parsing that carries logic: B per model profile, the re-prefill cost, the dashboard's period and page limit. */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { parseDashboardOptions, parseReprefillCost, parseRooflineBatch } from '../../src/cli/manager.js';

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

describe('--reprefill-cost', () => {
  it('takes a number >= 0 and refuses anything else with ERR_INVALID_ARG, naming the flag', () => {
    expect(parseReprefillCost('0')).toBe(0);
    expect(parseReprefillCost('0.0025')).toBe(0.0025);
    for (const bad of ['-0.1', 'cheap', '', 'Infinity', 'NaN']) {
      expect(() => parseReprefillCost(bad), bad).toThrow(
        expect.objectContaining({ code: ErrorCodes.INVALID_ARG, message: expect.stringMatching(/--reprefill-cost/) as string }),
      );
    }
  });
});

describe('--dashboard-interval and --dashboard-pages', () => {
  it('takes a duration of 100 ms or more and a positive number of pages', () => {
    expect(parseDashboardOptions('1s', '32')).toEqual({ intervalMs: 1000, maxPages: 32 });
    expect(parseDashboardOptions('250ms', '1')).toEqual({ intervalMs: 250, maxPages: 1 });
  });

  it('refuses anything else with ERR_INVALID_ARG, naming the flag', () => {
    for (const [interval, pages, flag] of [
      ['50ms', '32', /--dashboard-interval/],
      ['soon', '32', /not a duration/],
      ['1s', '0', /--dashboard-pages/],
      ['1s', '2.5', /--dashboard-pages/],
      ['1s', 'many', /--dashboard-pages/],
    ] as const) {
      expect(() => parseDashboardOptions(interval, pages), `${interval} ${pages}`).toThrow(
        expect.objectContaining({ code: ErrorCodes.INVALID_ARG, message: expect.stringMatching(flag) as string }),
      );
    }
  });
});
