/**
 * Child laminar daemons for the demo, the chunk-size probe, tests and benchmarks: spawn
 * `laminar <command>`, wait for its ready log line (pino JSON on stderr), keep its recent logs,
 * kill it. In services/ (not the demo) because the CLI's chunk-size probe needs it too, and a
 * CLI command must not depend on the demo.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';

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
export async function spawnDaemon(
  name: string,
  argv: string[],
  readyMsg: string,
  wrap: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
  onStdoutLine?: (line: string) => void,
): Promise<Daemon> {
  const all = [...wrap, process.execPath, CLI, ...argv];
  const child = spawn(all[0]!, all.slice(1), { stdio: ['ignore', onStdoutLine ? 'pipe' : 'ignore', 'pipe'], env });
  if (onStdoutLine) onLines(child.stdout!, onStdoutLine);
  const logs: string[] = [];
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)));
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start:\n${logs.slice(-20).join('\n')}`)), 30_000);
    onLines(child.stderr!, (line) => {
      logs.push(line);
      if (logs.length > 2000) logs.splice(0, 1000);
      try {
        const entry = JSON.parse(line) as Record<string, unknown>;
        if (entry.msg === readyMsg) {
          clearTimeout(timer);
          resolve(entry);
        }
      } catch {
        // not JSON (a crash trace): kept in logs
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code}) before it was ready:\n${logs.slice(-20).join('\n')}`));
    });
  });
  return {
    name,
    child,
    logs,
    exited,
    ready,
    kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
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
