/**
 * A process that started embedded servers and is then ended by a signal it does not handle (a
 * test worker Vitest stops with SIGTERM, `kill <pid>` of a bench, Ctrl-C) takes its servers and
 * temp dirs with it; a process with its own handler keeps the say over the signal.
 */
import { spawn } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { processRunning as running } from '../../src/common/process.js';
import { REPO_ROOT } from '../../src/services/index.js';

interface Started {
  pids: number[];
  dirs: string[];
}

const leftovers: number[] = [];
afterEach(() => {
  for (const pid of leftovers.splice(0)) if (running(pid)) process.kill(pid, 'SIGKILL');
});

const SERVERS = `
  const { startNatsServer, startRedisServer } = await import(${JSON.stringify(`${REPO_ROOT}/dist/src/services/index.js`)});
  const [redis, nats] = await Promise.all([startRedisServer(), startNatsServer({ jetstream: true })]);
  console.log(JSON.stringify({ pids: [redis.pid, nats.pid], dirs: [redis.rootDir, nats.rootDir] }));
`;

/**
 * Runs a Node program that starts redis-server and nats-server from the built package (with
 * `setup` run first; or what `start` starts), and resolves with their pids and dirs once both serve.
 */
async function startProgram(
  setup: string,
  start = SERVERS,
): Promise<{
  started: Started;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  pid: number;
  nextLine: () => Promise<string>;
}> {
  const program = `
    ${setup}
    ${start}
    setInterval(() => undefined, 60_000);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', program], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const lines = createInterface({ input: child.stdout });
  const first = await new Promise<string>((resolve, reject) => {
    lines.once('line', resolve);
    void exited.then(({ code, signal }) => reject(new Error(`the program exited (${code ?? signal}) before its servers served`)));
  });
  const started = JSON.parse(first) as Started;
  leftovers.push(...started.pids);
  for (const pid of started.pids) expect(running(pid)).toBe(true);
  for (const dir of started.dirs) expect(existsSync(dir)).toBe(true);
  return { started, exited, pid: child.pid!, nextLine: () => new Promise((resolve) => lines.once('line', resolve)) };
}

/** Waits until none of the pids runs (SIGKILL is delivered asynchronously); the test's timeout bounds it. */
async function gone(pids: number[]): Promise<void> {
  while (pids.some(running)) await sleep(20);
}

describe('embedded servers of a process ended by a signal', () => {
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    it(`${signal} that nothing handles: the servers die and their dirs go, and the process still dies of ${signal}`, async () => {
      const { started, exited, pid } = await startProgram('');
      process.kill(pid, signal);
      expect(await exited).toEqual({ code: null, signal });
      await gone(started.pids);
      for (const dir of started.dirs) expect(existsSync(dir), dir).toBe(false);
    });
  }

  it("a program's own handler decides: the servers stay through the signal, and its exit cleans up", async () => {
    const { started, exited, pid, nextLine } = await startProgram(
      `process.on('SIGTERM', () => console.log('handled')); process.on('SIGUSR2', () => process.exit(3));`,
    );
    const handled = nextLine();
    process.kill(pid, 'SIGTERM');
    // The program's listener was added first, so by the time it printed, ours had run too: had it
    // cleaned up (rmSync is synchronous), the dirs would be gone now.
    expect(await handled).toBe('handled');
    for (const dir of started.dirs) expect(existsSync(dir), dir).toBe(true);
    for (const server of started.pids) expect(running(server)).toBe(true);
    process.kill(pid, 'SIGUSR2');
    expect(await exited).toEqual({ code: 3, signal: null });
    await gone(started.pids);
    for (const dir of started.dirs) expect(existsSync(dir), dir).toBe(false);
  });

  it('SIGKILL, which nothing can handle: the servers and daemons it started end with it (parent-death signal)', async () => {
    const daemon = `
      const { spawnProgram } = await import(${JSON.stringify(`${REPO_ROOT}/dist/src/services/index.js`)});
      const sleeper = "console.error('ready'); process.on('SIGTERM', () => process.exit(0)); setInterval(() => undefined, 60_000)";
      const d = await spawnProgram('sleeper', [process.execPath, '-e', sleeper], (line) => (line === 'ready' ? {} : null));
      console.log(JSON.stringify({ pids: [d.child.pid], dirs: [] }));
    `;
    for (const start of [SERVERS, daemon]) {
      const { started, exited, pid } = await startProgram('', start);
      process.kill(pid, 'SIGKILL');
      expect(await exited).toEqual({ code: null, signal: 'SIGKILL' });
      await gone(started.pids);
      for (const dir of started.dirs) rmSync(dir, { recursive: true, force: true }); // nobody was left to remove them
    }
  });
});
