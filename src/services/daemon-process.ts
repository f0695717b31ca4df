/**
 * Child laminar daemons for the demo, the chunk-size probe, tests and benchmarks: spawn
 * `laminar <command>`, wait for its ready log line (pino JSON on stderr), keep its recent logs,
 * kill it. In services/ (not the demo) because the CLI's chunk-size probe needs it too, and a
 * CLI command must not depend on the demo.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { endingWithParent } from '../common/process.js';

/** The compiled CLI: next to this file in dist/, or in dist/ when this runs from source (tests). */
export const CLI = fileURLToPath(new URL(import.meta.url.includes('/dist/') ? '../cli/laminar.js' : '../../dist/src/cli/laminar.js', import.meta.url));

export interface Daemon {
  name: string;
  child: ChildProcess;
  logs: string[];
  exited: Promise<number | string>;
  /** Value of the first JSON log line with msg === ready message. */
  ready: Record<string, unknown>;
  kill(signal?: NodeJS.Signals): Promise<number | string>;
}

/** Spawns a laminar daemon and resolves once it logs `readyMsg` (its JSON line is kept). */
export function spawnDaemon(
  name: string,
  argv: string[],
  readyMsg: string,
  wrap: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
  onStdoutLine?: (line: string) => void,
  /** How long it may take to log `readyMsg` (default 30 s). */
  readyTimeoutMs?: number,
): Promise<Daemon> {
  return spawnProgram(
    name,
    [...wrap, process.execPath, CLI, ...argv],
    (line) => {
      try {
        const entry = JSON.parse(line) as Record<string, unknown>;
        return entry.msg === readyMsg ? entry : null;
      } catch {
        return null; // not JSON (a crash trace): kept in logs
      }
    },
    { env, ...(onStdoutLine ? { onStdoutLine } : {}), ...(readyTimeoutMs !== undefined ? { readyTimeoutMs } : {}) },
  );
}

/** Lines that name an error: a program's root cause, which its last lines (a traceback's end, "see above") may not show. */
const ERROR_LINE = /error|exception|traceback|killed/i;

/**
 * A failed start's log for its error (or a failed test's, test/engines): the last 20 lines,
 * after up to 10 earlier lines that name an error (vLLM ends with "Engine core initialization
 * failed. See root cause above.").
 */
export function lastLines(logs: readonly string[]): string {
  const tail = logs.slice(-20);
  const causes = logs
    .slice(0, -20)
    .filter((line) => ERROR_LINE.test(line))
    .slice(-10);
  return [...(causes.length > 0 ? [...causes, '...'] : []), ...tail].join('\n');
}

/**
 * Spawns any program (a Python engine or trainer beside the laminar daemons) and resolves once a
 * line of its stderr passes `isReady` (what it returns is kept as `ready`).
 */
export async function spawnProgram(
  name: string,
  command: string[],
  isReady: (line: string) => Record<string, unknown> | null,
  options: {
    env?: NodeJS.ProcessEnv;
    cwd?: string;
    onStdoutLine?: (line: string) => void;
    readyTimeoutMs?: number;
    /** Where the ready line appears (default stderr, where daemons log); stdout lines are kept in the logs too. */
    readyOn?: 'stderr' | 'stdout';
    /**
     * The program is a tree of processes (vLLM: an API server, its engine core and workers) that
     * must live and die as one: it gets a process group of its own, signals go to the group, and
     * whatever of the group is left when the leader exits is killed (an engine core whose API
     * server was SIGKILLed would otherwise run on, orphaned, holding gigabytes).
     */
    processGroup?: boolean;
    /** Called once the program is spawned, with its pid (the process group's id with `processGroup`). */
    onSpawn?: (pid: number) => void;
  } = {},
): Promise<Daemon> {
  const readyOnStdout = options.readyOn === 'stdout';
  const [program, ...args] = endingWithParent(command);
  const child = spawn(program!, args, {
    stdio: ['ignore', options.onStdoutLine || readyOnStdout ? 'pipe' : 'ignore', 'pipe'],
    env: options.env ?? process.env,
    ...(options.cwd ? { cwd: options.cwd } : {}),
    ...(options.processGroup ? { detached: true } : {}),
  });
  const signal = (sig: NodeJS.Signals): void => {
    if (options.processGroup && child.pid !== undefined) {
      try {
        process.kill(-child.pid, sig);
      } catch {
        // The group is gone already.
      }
    } else child.kill(sig);
  };
  if (options.processGroup) child.once('exit', () => signal('SIGKILL'));
  if (child.pid !== undefined) options.onSpawn?.(child.pid);
  const stdoutListeners: ((line: string) => void)[] = [];
  if (options.onStdoutLine) stdoutListeners.push(options.onStdoutLine);
  if (child.stdout) onLines(child.stdout, (line) => stdoutListeners.forEach((fn) => fn(line)));
  const logs: string[] = [];
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)));
  const timeoutMs = options.readyTimeoutMs ?? 30_000;
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Not left running: a late start would be a second copy of what the caller starts again.
      signal('SIGKILL');
      reject(new Error(`${name} did not start in ${timeoutMs / 1000} s:\n${lastLines(logs)}`));
    }, timeoutMs);
    let found = false;
    const take = (line: string, readyHere: boolean): void => {
      logs.push(line);
      if (logs.length > 2000) logs.splice(0, 1000);
      if (found || !readyHere) return;
      const entry = isReady(line);
      if (entry) {
        found = true;
        clearTimeout(timer);
        resolve(entry);
      }
    };
    onLines(child.stderr!, (line) => take(line, !readyOnStdout));
    if (readyOnStdout) stdoutListeners.push((line) => take(line, true));
    // 'close', not 'exit': the last lines of stderr (why it exited) are read by then.
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code ?? signal ?? -1}) before it was ready:\n${lastLines(logs)}`));
    });
  });
  return {
    name,
    child,
    logs,
    exited,
    ready,
    kill(sig = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) signal(sig);
      return exited;
    },
  };
}

/** Calls `fn` with each complete line the stream yields. */
function onLines(stream: Readable, fn: (line: string) => void): void {
  let pending = '';
  stream.on('data', (chunk: Buffer) => {
    pending += chunk.toString();
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const line of lines) fn(line);
  });
}
