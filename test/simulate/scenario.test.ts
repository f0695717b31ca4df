/**
 * Simulator scenarios: the shipped files load and carry the paper's placements, the derived
 * engine profiles are the design's, and every rule of the loader fails with its code and field.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { engineProfileFor, weightBytes } from '../../src/simulate/scenario/derive.js';
import { jsonPath, loadScenario, parseScenario } from '../../src/simulate/scenario/load.js';
import { placementOf } from '../../src/simulate/scenario/placement.js';
import type { ScenarioInput, SystemName } from '../../src/simulate/scenario/schema.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const SCENARIOS = join(REPO, 'src', 'simulate', 'scenarios');
const paper = JSON.parse(readFileSync(join(REPO, 'src', 'simulate', 'paper-figures.json'), 'utf8')) as {
  placements: { rows: Array<Record<string, unknown> & { model: string; totalGpus: number }> };
  parallelism: { rolloutTp: Record<string, Record<string, number>> };
};

/** The paper's system names in src/simulate/paper-figures.json, by the simulator's. */
const PAPER_NAME: Record<Exclude<SystemName, 'laminar-no-repack' | 'sync'>, string> = {
  laminar: 'laminar',
  'one-step': 'oneStep',
  stream: 'stream',
  areal: 'areal',
};

const raw = (file: string): Record<string, unknown> => JSON.parse(readFileSync(join(SCENARIOS, file), 'utf8')) as Record<string, unknown>;

/** The 7B scenario with one change applied to a deep copy. */
function variant(change: (s: ScenarioInput) => void): unknown {
  const s = structuredClone(raw('math-7b.json')) as unknown as ScenarioInput;
  change(s);
  return s;
}

/** For changes the types forbid on purpose (unknown keys, wrong values). */
const loose = (x: object): Record<string, unknown> => x as Record<string, unknown>;

function expectBad(input: unknown, field: string | RegExp, message?: RegExp): void {
  let error: unknown;
  try {
    parseScenario(input, 'test.json');
  } catch (err) {
    error = err;
  }
  expect(error, 'the scenario should have been refused').toMatchObject({ code: ErrorCodes.BAD_SCENARIO, details: { path: 'test.json' } });
  const details = (error as { details: { field: string } }).details;
  if (typeof field === 'string') expect(details.field).toBe(field);
  else expect(details.field).toMatch(field);
  if (message) expect((error as Error).message).toMatch(message);
}

describe('shipped scenarios', () => {
  for (const [file, model] of [
    ['math-7b.json', '7B'],
    ['math-32b.json', '32B'],
    ['math-72b.json', '72B'],
  ] as const) {
    it(`${file} loads and has the paper's Table 2 rows and rollout TP for ${model}`, () => {
      const s = loadScenario(join(SCENARIOS, file));
      const rows = paper.placements.rows.filter((r) => r.model === model);
      expect(s.placements.map((p) => p.gpus)).toEqual(rows.map((r) => r.totalGpus));
      for (const [i, row] of rows.entries()) {
        const p = s.placements[i]!;
        for (const [system, name] of Object.entries(PAPER_NAME))
          expect(p[system as keyof typeof PAPER_NAME], `${system} at ${row.totalGpus}`).toEqual(row[name]);
        expect(p.sync).toEqual({ colocated: (row['verl'] as { colocated: number }).colocated });
      }
      const tp = paper.parallelism.rolloutTp[model]!;
      for (const system of ['laminar', 'one-step', 'stream', 'sync'] as const) {
        const paperTp = tp['all'] ?? tp[system === 'sync' ? 'verl' : PAPER_NAME[system]];
        expect(s.rolloutTp[system], `${system} TP`).toBe(paperTp);
      }
    });
  }

  it('resolves placements: 72B on 1,024 GPUs', () => {
    const s = loadScenario(join(SCENARIOS, 'math-72b.json'));
    const row = s.placements.find((p) => p.gpus === 1024)!;
    expect(placementOf(s, row, 'laminar')).toEqual({
      system: 'laminar',
      gpus: 1024,
      trainGpus: 768,
      rolloutGpus: 256,
      colocated: false,
      tp: 8,
      rollouts: 32,
      rolloutMachines: 32,
    });
    // laminar-no-repack is laminar's deployment with repack off.
    expect(placementOf(s, row, 'laminar-no-repack')).toMatchObject({ trainGpus: 768, rolloutGpus: 256, rollouts: 32 });
    expect(placementOf(s, row, 'one-step')).toMatchObject({ trainGpus: 256, rolloutGpus: 768, rollouts: 96, rolloutMachines: 96 });
    expect(placementOf(s, row, 'sync')).toMatchObject({ trainGpus: 1024, rolloutGpus: 1024, colocated: true, rollouts: 128, rolloutMachines: 128 });
  });

  it('derives the engine profiles of the design (H800, BF16)', () => {
    const cases = [
      ['math-7b.json', 1, 0.94e6, 10.0],
      ['math-32b.json', 4, 0.8e6, 13.1],
      ['math-72b.json', 8, 1.24e6, 14.6],
    ] as const;
    for (const [file, tp, kvTokens, stepMs] of cases) {
      const s = loadScenario(join(SCENARIOS, file));
      const profile = engineProfileFor(s, tp);
      expect(profile.kvCapacityTokens / kvTokens, `${file} KV tokens`).toBeGreaterThan(0.98);
      expect(profile.kvCapacityTokens / kvTokens, `${file} KV tokens`).toBeLessThan(1.02);
      expect(profile.decodeStepMs, `${file} step`).toBeCloseTo(stepMs, 0);
      expect(profile.rooflineBatch).toBe(256);
      expect(profile.maxRunning).toBe(1024);
    }
    expect(weightBytes({ model: { name: 'm', params: 7e9, layers: 1, kvBytesPerToken: 1 } })).toBe(14e9);
  });

  it('is frozen all the way down', () => {
    const s = loadScenario(join(SCENARIOS, 'math-7b.json'));
    expect(() => {
      (s as { seed: number }).seed = 2;
    }).toThrow(TypeError);
    expect(() => {
      (s.placements[0] as { gpus: number }).gpus = 2;
    }).toThrow(TypeError);
  });

  it('applies defaults: no failures, no tool calls, FIFO with prefetch', () => {
    const s = parseScenario(
      variant((x) => {
        delete x.failures;
        delete x.trainer.strategy;
        delete x.trainer.prefetch;
      }),
    );
    expect(s.failures).toEqual([]);
    expect(s.workload.toolCalls).toBeNull();
    expect(s.trainer).toMatchObject({ strategy: 'fifo', prefetch: true, maxStaleness: null });
  });
});

describe('unreadable scenarios', () => {
  const dir = mkdtempSync(join(tmpdir(), 'laminar-scenario-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a missing file is ERR_SCENARIO_UNREADABLE', () => {
    const path = join(dir, 'missing.json');
    expect(() => loadScenario(path)).toThrow(expect.objectContaining({ code: ErrorCodes.SCENARIO_UNREADABLE, details: { path } }));
  });

  it('a file that is not JSON is ERR_SCENARIO_UNREADABLE', () => {
    const path = join(dir, 'broken.json');
    writeFileSync(path, '{ "name": ');
    expect(() => loadScenario(path)).toThrow(expect.objectContaining({ code: ErrorCodes.SCENARIO_UNREADABLE }));
  });

  it('a file that is JSON but no scenario is ERR_BAD_SCENARIO naming the file', () => {
    const path = join(dir, 'array.json');
    writeFileSync(path, '[]');
    expect(() => loadScenario(path)).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_SCENARIO, details: { path, field: '' } }));
  });
});

describe('scenario rules', () => {
  it('names fields as JSON paths', () => {
    expect(jsonPath(['placements', 2, 'laminar', 'rollout'])).toBe('placements[2].laminar.rollout');
    expect(jsonPath([])).toBe('');
  });

  it('refuses unknown keys (a typo is not a default)', () => {
    expectBad(
      variant((x) => (loose(x.trainer).mfuu = 0.4)),
      'trainer',
      /mfuu/,
    );
    expectBad(
      variant((x) => (loose(x.placements[0]!.laminar!).gpus = 8)),
      'placements[0].laminar',
    );
  });

  it('refuses values of the wrong shape', () => {
    expectBad(
      variant((x) => (x.engine.memoryUtilisation = 1.2)),
      'engine.memoryUtilisation',
    );
    expectBad(
      variant((x) => (loose(x).systems = ['laminar', 'verl'])),
      'systems[1]',
    );
    expectBad(
      variant((x) => (x.broadcast.chunkBytes = 1000)),
      'broadcast.chunkBytes',
    );
    expectBad(
      variant(
        (x) =>
          (x.workload.outputTokens.median = [
            { step: 10, tokens: 100 },
            { step: 5, tokens: 200 },
          ]),
      ),
      'workload.outputTokens.median',
      /increase/,
    );
    expectBad(
      variant((x) => (x.name = 'Has Spaces')),
      'name',
    );
  });

  it('refuses a system listed twice, or one without a TP', () => {
    expectBad(
      variant((x) => (x.systems = ['laminar', 'stream', 'laminar'])),
      'systems[2]',
    );
    expectBad(
      variant((x) => delete x.rolloutTp.stream),
      'rolloutTp.stream',
    );
    expectBad(
      variant((x) => (x.rolloutTp.sync = 3)),
      'rolloutTp.sync',
      /does not divide a machine/,
    );
  });

  it('refuses placements that do not add up', () => {
    expectBad(
      variant((x) => (x.placements[1]!.laminar!.train = 16)),
      'placements[1].laminar',
      /train 16 \+ rollout 8 GPUs is not the row's 32/,
    );
    expectBad(
      variant((x) => (x.placements[1]!['one-step'] = { train: 12, rollout: 20 })),
      'placements[1].one-step.rollout',
      /whole machines/,
    );
    expectBad(
      variant((x) => (x.placements[0]!.sync!.colocated = 8)),
      'placements[0].sync.colocated',
    );
    expectBad(
      variant((x) => delete x.placements[2]!.stream),
      'placements[2].stream',
      /no GPUs for stream/,
    );
    expectBad(
      variant((x) => (x.placements[1]!.gpus = 16)),
      /placements\[1\]/,
    );
  });

  it('refuses a model that does not fit its replicas', () => {
    expectBad(
      variant((x) => (x.hardware.gpu.memoryGB = 16)),
      'rolloutTp (TP 1)',
      /no room for a KV cache/,
    );
    expectBad(
      variant((x) => (x.engine.kvCapacityTokens = 10_000)),
      /rolloutTp/,
      /cannot hold one request of 18432/,
    );
  });

  it('refuses an inconsistent workload, manager or run', () => {
    expectBad(
      variant((x) => (x.workload.miniBatches = 3)),
      'workload.miniBatches',
    );
    expectBad(
      variant((x) => (x.workload.outputTokens.median[1]!.tokens = 20_000)),
      'workload.outputTokens.median[1].tokens',
    );
    expectBad(
      variant((x) => (x.workload.task = 'tool-call')),
      'workload.toolCalls',
      /needs toolCalls/,
    );
    expectBad(
      variant((x) => (x.workload.toolCalls = { maxCalls: 8, meanCalls: 2, latencyMedianS: 1, latencyP99OverMedian: 10 })),
      'workload.toolCalls',
      /math task/,
    );
    expectBad(
      variant((x) => {
        x.workload.task = 'tool-call';
        x.workload.toolCalls = { maxCalls: 2, meanCalls: 3, latencyMedianS: 1, latencyP99OverMedian: 10 };
      }),
      'workload.toolCalls.meanCalls',
    );
    expectBad(
      variant((x) => (x.manager.deadAfterS = 2)),
      'manager.deadAfterS',
    );
    expectBad(
      variant((x) => (x.run.warmupSteps = 15)),
      'run.warmupSteps',
    );
  });

  it('refuses failures that cannot happen', () => {
    const machine = { kind: 'machine' as const, atS: 100, machine: 0, replaceAfterS: 252 };
    expect(() => parseScenario(variant((x) => (x.failures = [machine])))).not.toThrow();
    expectBad(
      variant((x) => (x.failures = [{ ...machine, atStep: 3 }])),
      'failures[0]',
      /exactly one of atS and atStep/,
    );
    expectBad(
      variant((x) => (x.failures = [{ kind: 'master' }])),
      'failures[0]',
    );
    expectBad(
      variant((x) => (x.failures = [{ kind: 'master', atStep: 15 }])),
      'failures[0].atStep',
    );
    // laminar on 16 GPUs has one rollout machine.
    expectBad(
      variant((x) => (x.failures = [{ ...machine, machine: 1 }])),
      'failures[0].machine',
      /laminar on 16 GPUs has 1 rollout machines/,
    );
    expect(() => parseScenario(variant((x) => (x.failures = [{ ...machine, machine: 1, gpus: 256 }])))).not.toThrow();
    expectBad(
      variant((x) => (x.failures = [{ ...machine, gpus: 48 }])),
      'failures[0].gpus',
    );
    expectBad(
      variant((x) => (x.failures = [{ kind: 'relay', atS: 1, machine: 0, restartAfterS: 10, systems: ['sync'] }])),
      'failures[0].systems[0]',
      /no relays/,
    );
    expectBad(
      variant((x) => (x.failures = [{ kind: 'rollout', atS: 1, rollout: 8, reinitialiseS: 2 }])),
      'failures[0].rollout',
    );
  });
});
