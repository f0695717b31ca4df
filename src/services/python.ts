/**
 * The project's Python (the bootstrap's `.venv`, built from Debian's python3 with its CPU torch),
 * and the Python programs the demo, tests and benchmarks start beside the laminar daemons: the
 * reference engine (python/src/laminar/testing/engine) and the example GRPO trainer.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ErrorCodes } from '../common/error-codes.js';
import { spawnProgram, type Daemon } from './daemon-process.js';
import { ServiceError } from './errors.js';

/** The repository root (this file is src/services/ or dist/src/services/ in it). */
export const REPO_ROOT = fileURLToPath(new URL(import.meta.url.includes('/dist/') ? '../../../' : '../../', import.meta.url));

/**
 * Environment of the PyTorch processes laminar starts: one compute thread each, and no OpenBLAS
 * thread pool (Debian's OpenBLAS spins a thread per core otherwise, whatever torch is told).
 */
export const TORCH_ENV: Readonly<Record<string, string>> = { OMP_NUM_THREADS: '1', OPENBLAS_NUM_THREADS: '1', MKL_NUM_THREADS: '1' };

/** `$LAMINAR_PYTHON`, else the bootstrap's `.venv/bin/python`. */
export function projectPython(): string {
  const python = process.env.LAMINAR_PYTHON ?? join(REPO_ROOT, '.venv', 'bin', 'python');
  if (!existsSync(python)) {
    throw new ServiceError(ErrorCodes.SERVICE_BINARY_MISSING, `no Python environment at ${python}: run \`npm run bootstrap\` (or set LAMINAR_PYTHON)`);
  }
  return python;
}

export interface ReferenceEngineOptions {
  /** Port (default: a free one). */
  port?: number;
  /** Directory with model.safetensors and config.json to start with (default: none; the first load comes from the agent). */
  modelPath?: string;
  kvCapacityTokens?: number;
  maxRunning?: number;
  seed?: number;
  /** Further flags of `python -m laminar.testing.engine`. */
  args?: string[];
  env?: NodeJS.ProcessEnv;
}

export interface ReferenceEngine extends Daemon {
  url: string;
  port: number;
}

/**
 * Starts the reference engine (SGLang's HTTP subset over a small PyTorch model) and waits until it
 * listens. Without `port` it binds port 0 and its ready line says which port it got: a port chosen
 * here and bound there later could be taken meanwhile by another process.
 */
export async function spawnReferenceEngine(name: string, options: ReferenceEngineOptions = {}): Promise<ReferenceEngine> {
  const argv = ['-m', 'laminar.testing.engine', '--host', '127.0.0.1', '--port', String(options.port ?? 0)];
  if (options.modelPath) argv.push('--model-path', options.modelPath);
  if (options.kvCapacityTokens) argv.push('--kv-capacity', String(options.kvCapacityTokens));
  if (options.maxRunning) argv.push('--max-running', String(options.maxRunning));
  if (options.seed !== undefined) argv.push('--seed', String(options.seed));
  argv.push(...(options.args ?? []));
  const daemon = await spawnProgram(
    name,
    [projectPython(), ...argv],
    (line) => {
      const ready = /engine ready port=(\d+)/.exec(line);
      return ready ? { line, port: Number(ready[1]) } : null;
    },
    { env: { ...process.env, ...TORCH_ENV, ...options.env }, readyTimeoutMs: 60_000 },
  );
  const port = daemon.ready.port as number;
  return { ...daemon, url: `http://127.0.0.1:${port}`, port };
}
