/**
 * verl against the laminar checkpoint-engine backend, with verl's own code: the Python tests
 * python/tests/test_verl_integration.py (the backend registered in verl 0.9.1's real registry,
 * conformance to its base classes, the round trip) and python/tests/test_verl_manager.py (verl's
 * CheckpointEngineManager moving weights from trainer workers to rollout workers on CPU Ray
 * workers), run by the real-engine environment's interpreter (.venv-engines has verl 0.9.1, ray
 * and torch 2; `.venv` has neither, and skips them). LAMINAR_REQUIRE_VERL=1 makes a verl that
 * cannot be imported a failure there, and a missing environment fails here: never a skip.
 * docs/components/verl.md says what was run and what needs a GPU.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { ENGINES_PYTHON, requireEnginesVenv } from './vllm-server.js';

const REPO_ROOT = join(import.meta.dirname, '..', '..');
const VERL_TESTS = ['python/tests/test_verl_integration.py', 'python/tests/test_verl_manager.py'];

it('verl 0.9.1 drives the laminar backend: conformance and its CheckpointEngineManager on CPU workers', { timeout: 600_000 }, async () => {
  requireEnginesVenv();
  const args = ['-m', 'pytest', ...VERL_TESTS, '-q', '-p', 'no:xdist', '-p', 'no:cacheprovider', '-rs'];
  const env = { ...process.env, LAMINAR_REQUIRE_VERL: '1', RAY_USAGE_STATS_ENABLED: '0' };
  const result = await promisify(execFile)(ENGINES_PYTHON, args, { cwd: REPO_ROOT, env, maxBuffer: 1 << 24 }).catch((err: unknown) => {
    const { stdout = '', stderr = '' } = err as { stdout?: string; stderr?: string };
    throw new Error(`verl's tests failed in .venv-engines:\n${stdout}\n${stderr || String(err)}`);
  });
  // The one skip allowed: the test of a laminar without verl, which does not apply where verl is
  // (a module of tests skipped for want of verl or ray would show here too).
  const skipped = [...result.stdout.matchAll(/^SKIPPED \[\d+\] (.*)$/gm)].map((m) => m[1]);
  expect(skipped.every((line) => line!.includes('verl is importable here'))).toBe(true);
  expect(result.stdout).toMatch(/\b\d+ passed\b/);
});
