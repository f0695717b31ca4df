/**
 * `laminar simulate --set path=value` (src/simulate/scenario/overrides.ts): the text parsed into a
 * path and a JSON value, set on a copy of the scenario before its schema, noted in its notes; each
 * malformed override ERR_INVALID_ARG, each override the schema refuses ERR_BAD_SCENARIO naming the
 * field; an override reaches a run (a slower trainer trains fewer tokens a second); and the study
 * of the inputs the paper does not give, on one small scenario, runs each variant through them.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { INPUT_ROWS, INPUT_VARIANTS, inputSensitivityTable } from '../../src/simulate/input-sensitivity.js';
import { runScenario } from '../../src/simulate/run.js';
import { loadScenario } from '../../src/simulate/scenario/load.js';
import { applyOverrides, parseOverrides } from '../../src/simulate/scenario/overrides.js';
import type { ScenarioInput } from '../../src/simulate/scenario/schema.js';
import { tinyInput } from './tiny-scenario.js';

const dir = mkdtempSync(join(tmpdir(), 'laminar-overrides-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function tinyFile(): string {
  const path = join(dir, 'tiny.json');
  writeFileSync(path, JSON.stringify(tinyInput()));
  return path;
}

const errorOf = (fn: () => unknown): { code: string; message: string; details: unknown } => {
  try {
    fn();
  } catch (err) {
    return err as { code: string; message: string; details: unknown };
  }
  throw new Error('expected an error');
};

describe('scenario overrides (--set)', () => {
  it('parses a path of fields and indices and a JSON value, or else the text as a string', () => {
    const [a, b, c, d] = parseOverrides([
      'trainer.mfu=0.25',
      'placements[0].laminar.train = 8',
      'workload.outputTokens.median=[{"step":0,"tokens":1500}]',
      'name=my job',
    ]);
    expect(a).toEqual({ text: 'trainer.mfu=0.25', path: ['trainer', 'mfu'], value: 0.25 });
    expect(b!.path).toEqual(['placements', 0, 'laminar', 'train']);
    expect(b!.value).toBe(8);
    expect(c!.value).toEqual([{ step: 0, tokens: 1500 }]);
    expect(d!.value).toBe('my job');
  });

  it('sets each field on a copy, in order, and notes what changed', () => {
    const input = tinyInput();
    const out = applyOverrides(input, parseOverrides(['trainer.mfu=0.2', 'trainer.mfu=0.25', 'workload.outputTokens.p99OverMedian=5'])) as ScenarioInput;
    expect(out.trainer.mfu).toBe(0.25);
    expect(out.workload.outputTokens.p99OverMedian).toBe(5);
    expect(input.trainer.mfu).toBe(0.35);
    expect(input.workload.outputTokens.p99OverMedian).toBe(10);
    expect(out.notes!.at(-1)).toBe('Changed for this run (laminar simulate --set): trainer.mfu=0.2; trainer.mfu=0.25; workload.outputTokens.p99OverMedian=5.');
    expect(applyOverrides(input, [])).toBe(input);
  });

  it('a malformed override is ERR_INVALID_ARG saying what is wrong', () => {
    const file = tinyFile();
    const cases: Array<[string, string]> = [
      ['trainer.mfu', 'no "=" between the path and the value'],
      ['=0.3', 'no path before "="'],
      ['trainer..mfu=1', '"" is not a field name'],
      ['trainer.mfu.x=1', 'trainer.mfu is not an object'],
      ['placements.x=1', 'placements is not an object'],
      ['trainer[0]=1', 'trainer is not a list'],
      ['placements[3].gpus=32', 'placements has 1 entries, so [3] is past its end'],
    ];
    for (const [text, why] of cases) {
      const err = errorOf(() => loadScenario(file, parseOverrides([text])));
      expect(err.code, text).toBe(ErrorCodes.INVALID_ARG);
      expect(err.message, text).toContain(why);
      expect(err.details, text).toEqual({ set: text });
    }
  });

  it('an override the schema refuses is ERR_BAD_SCENARIO naming the field', () => {
    const file = tinyFile();
    const unknown = errorOf(() => loadScenario(file, parseOverrides(['trainer.mfuu=0.3'])));
    expect(unknown.code).toBe(ErrorCodes.BAD_SCENARIO);
    expect(unknown.message).toContain('Unrecognized key: "mfuu"');
    expect(unknown.details).toEqual({ path: file, field: 'trainer' });
    const negative = errorOf(() => loadScenario(file, parseOverrides(['trainer.mfu=-1'])));
    expect(negative.code).toBe(ErrorCodes.BAD_SCENARIO);
    expect(negative.details).toEqual({ path: file, field: 'trainer.mfu' });
    const text = errorOf(() => loadScenario(file, parseOverrides(['trainer.mfu=fast'])));
    expect(text.details).toEqual({ path: file, field: 'trainer.mfu' });
  });

  it('reaches the run: a trainer at half the MFU trains fewer tokens a second, the rest the same', () => {
    const file = tinyFile();
    const base = runScenario(loadScenario(file), 'sync', { steps: 3 });
    const slow = runScenario(loadScenario(file, parseOverrides(['trainer.mfu=0.175'])), 'sync', { steps: 3 });
    expect(slow.ledger.consumed).toBe(base.ledger.consumed);
    expect(slow.throughput.tokensPerS).toBeLessThan(base.throughput.tokensPerS);
    expect(slow.virtualS).toBeGreaterThan(base.virtualS);
  });
});

describe('the inputs the paper does not give', () => {
  it('makes each variant from the scenario by --set texts that load', () => {
    const input = tinyInput();
    input.workload.outputTokens.median = [
      { step: 0, tokens: 400 },
      { step: 100, tokens: 800 },
    ];
    const byKey = new Map(INPUT_VARIANTS.map((v) => [v.key, v.sets(input)]));
    expect(byKey.get('shipped')).toEqual([]);
    // The median's drift over training is kept in proportion.
    expect(byKey.get('median-1500')).toEqual(['workload.outputTokens.median=[{"step":0,"tokens":1500},{"step":100,"tokens":3000}]']);
    expect(byKey.get('median-1500-p99-5-mfu-0.25')).toEqual([
      'workload.outputTokens.median=[{"step":0,"tokens":1500},{"step":100,"tokens":3000}]',
      'workload.outputTokens.p99OverMedian=5',
      'trainer.mfu=0.25',
    ]);
    for (const [key, sets] of byKey) {
      const out = applyOverrides(input, parseOverrides(sets)) as ScenarioInput;
      expect(out.notes!.length - (input.notes?.length ?? 0), key).toBe(sets.length > 0 ? 1 : 0);
    }
  });

  it("tables each row's simulated value per variant, ✗ outside its check", () => {
    const row = (id: string, paper: number, simulated: number, within: boolean) => ({
      id,
      what: id,
      source: '§8.1',
      paper,
      simulated,
      ratio: simulated / paper,
      check: 'tolerance' as const,
      tolerance: 0.15,
      bound: null,
      within,
      basis: '',
      why: null,
    });
    const table = inputSensitivityTable([
      { variant: INPUT_VARIANTS[0]!, sets: {}, runs: [], wallS: 1, rows: [row(INPUT_ROWS[0], 3.34, 1.925, false), row(INPUT_ROWS[1], 0.492, 0.032, false)] },
      { variant: INPUT_VARIANTS[2]!, sets: {}, runs: [], wallS: 1, rows: [row(INPUT_ROWS[0], 3.34, 3.532, true), row(INPUT_ROWS[1], 0.492, 0.253, false)] },
    ]);
    expect(table.columns).toEqual(['figure', 'paper', 'shipped', 'median 1,500']);
    expect(table.rows).toEqual([
      [INPUT_ROWS[0], '3.34', '1.925 ✗', '3.532'],
      [INPUT_ROWS[1], '0.492', '0.032 ✗', '0.253 ✗'],
    ]);
  });
});
