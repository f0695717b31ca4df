/**
 * The Python code sandbox: `python({ code, stdin? })` runs `code` as a program, each action in a
 * subprocess of its own:
 * - its own network namespace (`unshare --net`: only a loopback that is down, so no network at
 *   all, not even the host's loopback services);
 * - as user nobody (`setpriv`), in a fresh temporary directory removed afterwards, with a clean
 *   environment and `python3 -I` (no user site, no PYTHON* variables);
 * - RLIMIT_CPU (CPU seconds), RLIMIT_AS (address space), RLIMIT_FSIZE and RLIMIT_NPROC
 *   (`prlimit`);
 * - a wall-clock limit (the action's timeout, or the sandbox's own if shorter): its whole
 *   process group is killed, status 'timeout';
 * - an output limit: stdout and stderr, interleaved as a terminal shows them, are read up to
 *   the output cap; past it the program is killed and the output ends with the truncation marker.
 * A program that exits non-zero, is killed by a limit or raises is status 'error' with what it
 * printed and why it ended. It needs root (the namespace); ActionWorker runs its handler.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LaminarError } from '../../common/errors.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { argsObject, stringArg, type ActionHandler } from '../handler.js';
import { capOutput } from '../output-cap.js';
import { ToolOutcome } from '../worker.js';

export const SANDBOX_TOOL = 'python';

export interface SandboxLimits {
  /** CPU seconds (RLIMIT_CPU; default 5). */
  cpuSeconds: number;
  /** Address space in bytes (RLIMIT_AS; default 512 MiB). */
  memoryBytes: number;
  /** Wall clock in ms (default 30 s; the action's timeout when shorter). */
  wallMs: number;
  /** Output bytes kept (default 16 KiB, the worker's cap). */
  maxOutputBytes: number;
  /** Largest file the program may write, bytes (RLIMIT_FSIZE; default 16 MiB). */
  fileBytes: number;
  /** Processes of user nobody (RLIMIT_NPROC; default 256: no fork bomb). */
  processes: number;
  /** The interpreter (default $LAMINAR_SANDBOX_PYTHON or /usr/bin/python3). */
  python: string;
}

export const DEFAULT_SANDBOX_LIMITS: SandboxLimits = {
  cpuSeconds: 5,
  memoryBytes: 512 * 1024 * 1024,
  wallMs: 30_000,
  maxOutputBytes: 16 * 1024,
  fileBytes: 16 * 1024 * 1024,
  processes: 256,
  python: process.env.LAMINAR_SANDBOX_PYTHON ?? '/usr/bin/python3',
};

const NOBODY = 65534;

/** Throws ERR_SANDBOX_UNAVAILABLE when this machine cannot run the sandbox (not root, tools missing). */
export function checkSandbox(limits: SandboxLimits = DEFAULT_SANDBOX_LIMITS): void {
  const r = spawnSync('unshare', ['--net', '--', ...confine(limits), limits.python, '-I', '-c', 'pass'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: 10_000,
  });
  if (r.error || r.status !== 0) {
    throw new LaminarError(
      ErrorCodes.SANDBOX_UNAVAILABLE,
      `the sandbox cannot start a program here (it needs root, unshare, setpriv, prlimit and ${limits.python}): ${r.error?.message ?? r.stderr.toString().trim()}`,
    );
  }
}

function confine(l: SandboxLimits): string[] {
  return [
    'setpriv',
    `--reuid=${NOBODY}`,
    `--regid=${NOBODY}`,
    '--clear-groups',
    '--',
    'prlimit',
    `--cpu=${l.cpuSeconds}`,
    `--as=${l.memoryBytes}`,
    `--fsize=${l.fileBytes}`,
    `--nproc=${l.processes}`,
    '--core=0',
    '--',
  ];
}

export function sandboxHandler(overrides: Partial<SandboxLimits> = {}): ActionHandler {
  const limits = { ...DEFAULT_SANDBOX_LIMITS, ...overrides };
  return async (args, context) => {
    const a = argsObject(args, SANDBOX_TOOL);
    const code = stringArg(a, 'code', SANDBOX_TOOL);
    const stdin = a.stdin === undefined ? '' : stringArg(a, 'stdin', SANDBOX_TOOL);
    const dir = mkdtempSync(join(tmpdir(), 'laminar-sandbox-'));
    try {
      writeFileSync(join(dir, 'main.py'), code);
      chownSync(dir, NOBODY, NOBODY);
      return await run(dir, stdin, limits, Math.min(limits.wallMs, context.timeoutMs), context.signal);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}

function run(dir: string, stdin: string, limits: SandboxLimits, wallMs: number, signal: AbortSignal): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('unshare', ['--net', '--', ...confine(limits), limits.python, '-I', 'main.py'], {
      cwd: dir,
      env: { PATH: '/usr/bin:/bin', HOME: dir, LANG: 'C.UTF-8', PYTHONUNBUFFERED: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
      // Its own process group: a kill reaches whatever the program started.
      detached: true,
    });
    const chunks: Buffer[] = [];
    let bytes = 0;
    let total = 0;
    let ended: 'wall' | 'output' | undefined;
    const kill = (why: typeof ended): void => {
      ended ??= why;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const onData = (b: Buffer): void => {
      total += b.length;
      if (bytes < limits.maxOutputBytes + 1) {
        chunks.push(b);
        bytes += b.length;
      }
      if (total > limits.maxOutputBytes) kill('output');
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.stdin.on('error', () => {}); // a program that exits without reading its input
    child.stdin.end(stdin);
    const timer = setTimeout(() => kill('wall'), wallMs);
    // The worker aborts at the action's timeout (or when it stops): the same as the wall clock.
    const onAbort = (): void => kill('wall');
    signal.addEventListener('abort', onAbort);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new LaminarError(ErrorCodes.SANDBOX_UNAVAILABLE, `cannot start the sandbox: ${err.message}`));
    });
    child.once('close', (code, sig) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      const text = Buffer.concat(chunks).toString('utf8');
      if (ended === 'output') {
        // Killed once past the cap: the bytes it would have printed after are not counted.
        reject(new ToolOutcome({ status: 'ok', output: capOutput(text, limits.maxOutputBytes).output, truncated: true }));
        return;
      }
      if (ended === 'wall') {
        reject(new ToolOutcome({ status: 'timeout', output: `${text}\n[killed: wall-clock limit of ${wallMs} ms]`, code: ErrorCodes.ACTION_TIMEOUT }));
        return;
      }
      if (code === 0) {
        resolve(text);
        return;
      }
      const why =
        sig === 'SIGXCPU' || sig === 'SIGKILL'
          ? `[killed by ${sig}: CPU time limit of ${limits.cpuSeconds} s]`
          : sig
            ? `[killed by ${sig}]`
            : `[exit status ${code}]`;
      reject(new ToolOutcome({ status: 'error', output: `${text}\n${why}`, code: ErrorCodes.ACTION_HANDLER_FAILED }));
    });
  });
}
