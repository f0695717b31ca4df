/**
 * `npm run demo -- --engine torch --lora-rank R`: the trainer trains a LoRA adapter on the frozen
 * base, the relays hold the base once and every step's adapter, and the rollout agents have their
 * reference engines load each adapter beside the base. Three steps: what this checks holds at any
 * length; how well it learns is docs/operations/demo.md's business.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { REPO } from './helpers/relay.js';

describe('npm run demo -- --engine torch --lora-rank', () => {
  it('trains an adapter: the engines serve each step’s adapter on the base, a clean ledger', async () => {
    const work = mkdtempSync(join(tmpdir(), 'laminar-demo-lora-'));
    const argv = [
      'dist/src/demo/main.js',
      '--engine',
      'torch',
      '--lora-rank',
      '8',
      '--steps',
      '3',
      // Two relays, one per engine (a third held no engine), and batches of 4 groups: half the
      // trainer's work per step. The base and every adapter still cross a chain.
      '--relays',
      '2',
      '--batch-groups',
      '4',
      '--plot',
      join(work, 'run.png'),
      '--logs',
      join(work, 'logs'),
    ];
    const { stdout } = await promisify(execFile)(process.execPath, argv, { cwd: REPO, timeout: 240_000 });
    expect(stdout).toMatch(/the base once, then a LoRA adapter \(rank 8\) of digits\/tiny-lora after each/);
    expect(stdout).toMatch(/3 training steps, versions v0\.\.v3/);
    expect(stdout).toMatch(/engines' weights at the end +e0 v3, e1 v3/);
    expect(stdout).toMatch(/ledger +0 trajectories lost, 0 written twice/);
    // Each agent had its engine load the base, then adapters up to the last step's.
    for (const agent of ['e0', 'e1']) {
      const log = readFileSync(join(work, 'logs', `agent-${agent}.log`), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as { msg?: string; adapter?: string | number; version?: number; base?: { model: string; version: number } });
      expect(log.some((l) => l.msg === 'engine loaded the base of an adapter version' && l.base?.model === 'digits/tiny' && l.base.version === 0)).toBe(true);
      expect(log.some((l) => l.adapter === 'digits_tiny-lora-v3' && l.version === 3)).toBe(true);
    }
    rmSync(work, { recursive: true, force: true });
  }, 300_000);

  it('refuses --lora-rank where no adapter can be trained or served, before starting anything', async () => {
    const failed = await promisify(execFile)(process.execPath, ['dist/src/demo/main.js', '--engine', 'torch', '--task', 'tools', '--lora-rank', '8'], {
      cwd: REPO,
    }).then(
      () => null,
      (err: unknown) => err as { code: number; stderr: string },
    );
    expect(failed?.code).toBe(1);
    expect(failed?.stderr).toMatch(/--lora-rank runs with --engine torch --task digits/);
  });
});
