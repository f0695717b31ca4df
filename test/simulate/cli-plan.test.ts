/**
 * `laminar plan` end to end (the built CLI, dist/): a small job on the shipped 7B scenario; the
 * exit code, the progress on stderr (a line per split), the tables and the recommendation on
 * stdout, the one JSON line last; a bad flag's typed error and exit code; and the help, which
 * names every flag with its default (in this process, through the same command).
 */
import { describe, expect, it } from 'vitest';
import { planCommand } from '../../src/cli/plan.js';
import { ErrorCodes, type LaminarError } from '../../src/common/errors.js';
import { commandFailure, runLaminar, type Exit } from './cli-run.js';

const laminar = (args: string[]): Promise<Exit> => runLaminar(['plan', ...args]);

interface PlanLine {
  plan: string;
  base: string;
  gpus: number;
  steps: number;
  derived: Array<{ field: string }>;
  splits: Array<{ train_gpus: number; simulated: boolean; tokens_per_s?: number; ceiling_tokens_per_s: number }>;
  best: { train_gpus: number; rollout_gpus: number; rollouts: number; tokens_per_s: number; reason: string };
  chunk: { relays: number; bytes: number };
  repack_interval_s: number;
  staleness: { inherent: { p50: number; p90: number; max: number }; consumption: { max: number } };
}

describe('laminar plan', () => {
  it('plans a small 7B job: progress on stderr, the plan on stdout, a JSON line last', async () => {
    // Three machines (two splits), three steps, short responses: about a second of simulation.
    const r = await laminar(['--model', '7B', '--gpus', '24', '--steps', '3', '--median-tokens', '500', '--max-tokens', '4096', '--json']);
    expect(r.stderr).not.toMatch(/ERR_/);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/^laminar plan: Qwen2.5-Math-7B on 24 GPUs from math-7b; laminar, 3 steps per split/m);
    expect(r.stderr).toMatch(/^\[1\/2\] 16 train \+ 8 rollout GPUs: [\d,]+ events in [\d.]+ s, [\d,]+ tokens\/s, inherent staleness max \d+$/m);
    expect(r.stderr).toMatch(/^\[2\/2\] 8 train \+ 16 rollout GPUs: (not simulated, its trainer trains at most|[\d,]+ events)/m);

    expect(r.stdout).toMatch(/^Changed from math-7b$/m);
    expect(r.stdout).toMatch(/^workload\.outputTokens\.median\s+500\s+--median-tokens, flat over training/m);
    expect(r.stdout).toMatch(/^Splits: 3 steps each, throughput after 1 of warm-up/m);
    expect(r.stdout).toMatch(/^16\s+8\s+0\.5\s+[\d,]+\s+\d+ %\s+\d+\/\d+\/\d+\s+\d+\/\d+\/\d+\s+0\.\d{3}\s+[\d.]+\s+best$/m);
    expect(r.stdout).toMatch(/^Recommendation$/m);
    expect(r.stdout).toMatch(/^split\s+16 trainer GPUs \(2 machines\) and 8 rollout GPUs \(1 machine\): 8 rollouts of TP 1, 0\.5 per trainer GPU$/m);
    expect(r.stdout).toMatch(/^chunk size\s+32\.0 MiB \(33554432 bytes\): chooseChunkSize for a chain of 1 relay/m);
    expect(r.stdout).toMatch(/^repack interval\s+5s: a trainer step takes \d+ s, 50 s or more \(laminar manager --repack-interval 5s\)$/m);
    expect(r.stdout).toMatch(/^staleness\s+inherent p50\/p90\/max \d+\/\d+\/\d+, consumption p50\/p90\/max \d+\/\d+\/\d+/m);

    const lines = r.stdout.trimEnd().split('\n');
    const json = JSON.parse(lines[lines.length - 1]!) as PlanLine;
    expect(json).toMatchObject({ plan: 'plan-math-7b', base: 'math-7b', gpus: 24, steps: 3, repack_interval_s: 5 });
    expect(json.splits.map((s) => s.train_gpus)).toEqual([16, 8]);
    expect(json.best).toMatchObject({ train_gpus: 16, rollout_gpus: 8, rollouts: 8 });
    expect(json.best.tokens_per_s).toBeGreaterThan(0);
    expect(json.best.tokens_per_s).toBeLessThanOrEqual(json.splits[0]!.ceiling_tokens_per_s);
    expect(json.chunk).toMatchObject({ relays: 1, bytes: 33554432 });
    expect(json.derived.map((d) => d.field)).toEqual(['workload.outputTokens.max', 'workload.outputTokens.median', 'broadcast.chunkBytes']);
  }, 60_000);

  it('a bad flag is ERR_INVALID_ARG on stderr, exit 1, nothing on stdout', async () => {
    const r = await laminar(['--model', '7B', '--gpus', '60']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      'laminar: ERR_INVALID_ARG: --gpus 60: the plan splits whole machines of 8 GPUs between trainer and rollouts, so it takes a multiple of 8, at least 16\n',
    );
    expect(r.stdout).toBe('');
  }, 60_000);

  // The same command in this process (the error's code and message; the exit code is laminar.ts's, above).
  const failure = (args: string[]): Promise<LaminarError> => commandFailure(planCommand(), args);

  it('bad flags fail before any simulation, with the flag named', async () => {
    const model = await failure(['--model', '7', '--gpus', '64']);
    expect(model.code).toBe(ErrorCodes.INVALID_ARG);
    expect(model.message).toMatch(/^--model takes 7B, 32B, 72B or a parameter count/);
    const steps = await failure(['--model', '7B', '--gpus', '64', '--steps', '1']);
    expect(steps.message).toBe('--steps takes an integer >= 2, got "1"');
    const median = await failure(['--model', '32B', '--gpus', '64', '--median-tokens', '9000', '--max-tokens', '8192']);
    expect(median.code).toBe(ErrorCodes.INVALID_ARG);
    expect(median.message).toContain('--median-tokens 9000 is above the longest output, 8,192 tokens');
    const set = await failure(['--model', '7B', '--gpus', '64', '--set', 'trainer.mfuu=0.3']);
    expect(set.code).toBe(ErrorCodes.BAD_SCENARIO);
    expect(set.details).toEqual({ path: 'laminar plan', field: 'trainer' });
    const malformed = await failure(['--model', '7B', '--gpus', '64', '--set', 'trainer.mfu']);
    expect(malformed.code).toBe(ErrorCodes.INVALID_ARG);
    expect(malformed.message).toContain('no "=" between the path and the value');
  });

  it('--help names every flag and its default', () => {
    const help = planCommand().helpInformation();
    for (const flag of [
      '--model <size>',
      '--gpus <n>',
      '--link-gbit <G>',
      '--median-tokens <M>',
      '--p99-ratio <R>',
      '--max-tokens <X>',
      '--tool-calls',
      '--steps <n>',
      '--splits <n>',
      '--json',
      '--set <path=value>',
    ])
      expect(help).toContain(flag);
    expect(help).toMatch(/default: "10"/);
    expect(help).toMatch(/default: "8"/);
    expect(help).toMatch(/default:\s+the scenario's, 800/);
  });
});
