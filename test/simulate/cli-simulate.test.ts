/**
 * `laminar simulate` end to end (the built CLI, dist/): a tiny scenario from a file, every
 * system; the exit code, the tables on stdout, the progress on stderr, the one JSON line last,
 * the report written (results.json, tables.md, well-formed SVGs), and the typed errors for a
 * scenario that is missing, not JSON, or invalid, and for bad flags (the exit code once through
 * the built CLI, the rest through the same command in this process).
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { simulateCommand } from '../../src/cli/simulate.js';
import { ErrorCodes, type LaminarError } from '../../src/common/errors.js';
import { commandFailure, runLaminar, type Exit } from './cli-run.js';
import { SCENARIOS_DIR, resolveScenarioPath, shippedScenarios } from '../../src/simulate/files.js';
import type { SimulationResults } from '../../src/simulate/report/results.js';
import { svgProblems } from './svg-check.js';
import { tinyInput } from './tiny-scenario.js';

const dir = mkdtempSync(join(tmpdir(), 'laminar-simulate-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const laminar = (args: string[]): Promise<Exit> => runLaminar(['simulate', ...args]);

function scenarioFile(name: string, edit: (s: Record<string, unknown>) => void = () => {}): string {
  const s = tinyInput() as unknown as Record<string, unknown>;
  edit(s);
  const path = join(dir, `${name}.json`);
  writeFileSync(path, JSON.stringify(s));
  return path;
}

describe('laminar simulate', () => {
  it('runs a small scenario: tables on stdout, progress on stderr, a JSON line last, the report on disk', async () => {
    const out = join(dir, 'out');
    const r = await laminar([scenarioFile('tiny'), '--steps', '4', '--out', out, '--json']);
    expect(r.stderr).not.toMatch(/ERR_/);
    expect(r.code).toBe(0);
    const systems = ['laminar', 'laminar-no-repack', 'one-step', 'stream', 'sync', 'areal'];
    // Progress: a start and an end line per run, with its events and simulated time.
    for (const [i, s] of systems.entries()) {
      expect(r.stderr).toContain(`[${i + 1}/6] ci-tiny 32 GPUs ${s}: simulating 4 training steps`);
      expect(r.stderr).toMatch(new RegExp(`\\[${i + 1}/6\\] ci-tiny 32 GPUs ${s}: [\\d,]+ events, [\\d,.]+ s simulated`));
    }
    // The summary tables: a throughput row for the 32-GPU point with laminar's speedups.
    expect(r.stdout).toMatch(/^Throughput$/m);
    expect(r.stdout).toMatch(/^7B\s+32\s+[\d,]+\s+[\d,]+\s+[\d,]+\s+[\d,]+\s+[\d,]+\s+[\d,]+\s+[\d.]+×/m);
    expect(r.stdout).toMatch(/^Staleness$/m);
    expect(r.stdout).toMatch(/^Paper comparison$/m);

    const lines = r.stdout.trimEnd().split('\n');
    const json = JSON.parse(lines[lines.length - 1]!) as {
      simulate: string[];
      runs: Array<{ system: string; steps: number; tokens_per_s: number }>;
      files: string[];
      out: string;
    };
    expect(json.simulate).toEqual(['ci-tiny']);
    expect(json.runs.map((x) => x.system)).toEqual(systems);
    for (const run of json.runs) {
      expect(run.steps).toBe(4);
      expect(run.tokens_per_s).toBeGreaterThan(0);
    }
    expect(json.out).toBe(out);

    const files = readdirSync(out).sort();
    expect(files).toEqual([...json.files].sort());
    expect(files).toEqual(
      expect.arrayContaining([
        'results.json',
        'tables.md',
        'throughput-ci-tiny.svg',
        'speedup-ci-tiny.svg',
        'paper-comparison.svg',
        'staleness.svg',
        'repack.svg',
      ]),
    );
    const results = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8')) as SimulationResults;
    expect(results.runs).toHaveLength(6);
    expect(results.runs.every((x) => x.steps === 4 && x.ledger.consumed === 4 * 64)).toBe(true);
    expect(results.scenarios[0]!.paperModel).toBe('7B');
    const md = readFileSync(join(out, 'tables.md'), 'utf8');
    expect(md).toMatch(/^## Throughput$/m);
    expect(md).toMatch(/^\| model \| GPUs \| laminar tokens\/s \|/m);
    for (const svg of files.filter((f) => f.endsWith('.svg'))) expect(svgProblems(readFileSync(join(out, svg), 'utf8')), svg).toEqual([]);
  }, 90_000);

  it('--set changes a field for the run, says so on stderr and in the results; a bad one exits 1 with its code', async () => {
    const out = join(dir, 'out-set');
    const file = scenarioFile('set');
    const r = await laminar([
      file,
      '--system',
      'sync',
      '--steps',
      '2',
      '--out',
      out,
      '--set',
      'trainer.mfu=0.2',
      '--set',
      'workload.outputTokens.p99OverMedian=5',
    ]);
    expect(r.stderr).not.toMatch(/ERR_/);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain('laminar simulate: ci-tiny with trainer.mfu=0.2, workload.outputTokens.p99OverMedian=5 (--set)');
    const results = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8')) as SimulationResults;
    expect(results.scenarios[0]!.scenario.trainer.mfu).toBe(0.2);
    expect(results.scenarios[0]!.scenario.workload.outputTokens.p99OverMedian).toBe(5);
    expect(results.scenarios[0]!.notes.at(-1)).toBe('Changed for this run (laminar simulate --set): trainer.mfu=0.2; workload.outputTokens.p99OverMedian=5.');
    const bad = await laminar([file, '--set', 'trainer.mfu']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^laminar: ERR_INVALID_ARG: --set "trainer.mfu": no "=" between the path and the value/m);
  }, 60_000);

  it('a missing scenario is ERR_SCENARIO_UNREADABLE on stderr, exit 1, naming the shipped scenarios', async () => {
    const r = await laminar([join(dir, 'nope.json')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^laminar: ERR_SCENARIO_UNREADABLE: scenario .*nope\.json: no such file, and not a shipped scenario \(.*math-7b/m);
    expect(r.stdout).toBe('');
  }, 60_000);

  // The same command in this process (the error's code and message; the exit code is laminar.ts's, above).
  const failure = (args: string[]): Promise<LaminarError> => commandFailure(simulateCommand(), args);

  it('an unknown bare name and a file that is not JSON are ERR_SCENARIO_UNREADABLE', async () => {
    const bare = await failure(['math-8b']);
    expect(bare.code).toBe(ErrorCodes.SCENARIO_UNREADABLE);
    expect(bare.message).toContain('scenario math-8b: no such file');
    const notJson = join(dir, 'broken.json');
    writeFileSync(notJson, '{ "name": ');
    const broken = await failure([notJson]);
    expect(broken.code).toBe(ErrorCodes.SCENARIO_UNREADABLE);
    expect(broken.message).toMatch(/broken\.json: not JSON/);
  });

  it('an invalid scenario is ERR_BAD_SCENARIO naming the field', async () => {
    const bad = scenarioFile('bad', (s) => {
      (s.run as { warmupSteps: number }).warmupSteps = 99;
    });
    const err = await failure([bad]);
    expect(err.code).toBe(ErrorCodes.BAD_SCENARIO);
    expect(err.details).toEqual({ path: bad, field: 'run.warmupSteps' });
  });

  it('bad flags are ERR_INVALID_ARG', async () => {
    const file = scenarioFile('flags');
    const system = await failure([file, '--system', 'laminar,verl']);
    expect(system.code).toBe(ErrorCodes.INVALID_ARG);
    expect(system.message).toMatch(/--system takes a comma-separated list of laminar, .*got laminar,verl/);
    const gpus = await failure([file, '--gpus', '48']);
    expect(gpus.code).toBe(ErrorCodes.INVALID_ARG);
    expect(gpus.message).toBe('nothing to simulate: no placement row of ci-tiny has 48 GPUs (rows: 32)');
    const steps = await failure([file, '--steps', '0']);
    expect(steps.code).toBe(ErrorCodes.INVALID_ARG);
    expect(steps.message).toContain('--steps takes positive integers');
    const set = await failure([file, '--set', 'trainer.mfuu=0.3']);
    expect(set.code).toBe(ErrorCodes.BAD_SCENARIO);
    expect(set.details).toEqual({ path: file, field: 'trainer' });
    const without = await failure([file, '--without', 'attentionKvRead,warpDrive']);
    expect(without.code).toBe(ErrorCodes.INVALID_ARG);
    expect(without.message).toBe(
      "unknown mechanism 'warpDrive' (one of attentionKvRead, trainerCommunication, dataParallelStragglers, colocatedEngine, groupLengthCorrelation, turnLockstep, trainingAttention, eagerDecode, rolloutBatchShare, repackAtTools, arealDiskWeights)",
    );
  });

  it('a shipped scenario is found by its bare name', () => {
    expect(shippedScenarios()).toEqual(expect.arrayContaining(['math-7b', 'math-32b', 'math-72b']));
    expect(resolveScenarioPath('math-7b')).toBe(join(SCENARIOS_DIR, 'math-7b.json'));
    expect(resolveScenarioPath('math-7b.json')).toBe(join(SCENARIOS_DIR, 'math-7b.json'));
    expect(() => resolveScenarioPath('./math-7b')).toThrow(expect.objectContaining({ code: ErrorCodes.SCENARIO_UNREADABLE }));
  });
});
