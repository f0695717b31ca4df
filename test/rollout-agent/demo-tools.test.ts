/**
 * `npm run demo -- --engine torch --task tools --kill-an-action-worker`, shortened: the lookup
 * task's multi-turn episodes through lookup action workers (one SIGKILLed and restarted), a GRPO
 * trainer on the loss mask, and the summary's episodes, action times and ledgers. Kept here, not
 * in test/demo.test.ts, beside the agent's other multi-turn tests.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/relay.js';

describe('npm run demo -- --engine torch --task tools', () => {
  it('trains on tool-calling episodes; a killed action worker loses no trajectory and leaves no action unaccounted for', async () => {
    const plot = join(mkdtempSync(join(tmpdir(), 'laminar-demo-tools-')), 'run.png');
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        ...['dist/src/demo/main.js', '--engine', 'torch', '--task', 'tools', '--steps', '10', '--prompts', '200'],
        // Two relays, one per engine (a third held no engine), and batches of 4 groups: each step
        // half the trainer's work (31 CPU-s for the job, 37 with 3 relays and 8 groups).
        ...['--relays', '2', '--batch-groups', '4'],
        // Restarted 1 s after the kill, at the demo's next 2-s tick; at 3 s it took two. The demo
        // stops ticking once the trainer exits, so the steps after the kill (40 %) and the
        // trainer's exit must outlast those ticks: at load 2 the old form's second tick came 0.1 s
        // before the last step. (Fewer or faster steps break it: one engine took 10 steps in 4 s.)
        ...['--kill-an-action-worker', '--restart-relay-after', '1s', '--plot', plot],
      ],
      { cwd: REPO, timeout: 240_000 },
    );
    expect(stdout).toMatch(/10 training steps, versions v0\.\.v10/);
    expect(stdout).toMatch(/SIGKILL action worker w0/);
    expect(stdout).toMatch(/restarted action worker w0/);
    expect(stdout).toMatch(/turns per trajectory +mean \d\.\d+ over \d+ completed/);
    expect(stdout).toMatch(/tool calls +.*bad_call \d+/);
    expect(stdout).toMatch(/action completion time +queue wait p50 .* execution p50/);
    expect(stdout).toMatch(/inherent staleness +p50 of the steps' p50 [\d.]+, max \d+/);
    expect(stdout).toMatch(/consumption staleness +p50 of the steps' p50 [\d.]+, max \d+/);
    expect(stdout).toMatch(/ledger +0 trajectories lost, 0 written twice/);
    expect(stdout).toMatch(/action ledger +\d+ results .*0 waiting, 0 running, \d+ redelivered: every action accounted for/);
    rmSync(dirname(plot), { recursive: true, force: true });
  }, 300_000);
});
