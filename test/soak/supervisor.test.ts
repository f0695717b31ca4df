/**
 * The soak's service-manager policy with real child processes: a start that races a kill brings
 * the process back, an exit nobody asked for is reported and restarted, and a program that misses
 * its start timeout is not left running.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { spawnProgram, type Daemon } from '../../src/services/daemon-process.js';
import { Supervised } from '../../src/soak/supervisor.js';

/** A program that logs "ready" on stderr (after `delayMs`) and then idles until killed. */
const idler = (delayMs = 0): string[] => [process.execPath, '-e', `setTimeout(() => console.error('ready'), ${delayMs}); setInterval(() => {}, 1000);`];
const isReady = (line: string): Record<string, unknown> | null => (line === 'ready' ? {} : null);

const supervised: Supervised[] = [];
afterEach(async () => {
  await Promise.all(supervised.splice(0).map((s) => s.stop(1000)));
});

function supervise(events: Partial<ConstructorParameters<typeof Supervised>[3]> = {}): Supervised {
  const s = new Supervised(
    'idler',
    'rollout',
    () => spawnProgram('idler', idler(), isReady),
    { unexpectedExit: () => undefined, startFailed: () => undefined, ...events },
    10,
  );
  supervised.push(s);
  return s;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('Supervised (the soak’s restart policy)', () => {
  it('a start issued while a kill is under way waits for the exit and brings the process back', async () => {
    const s = supervise();
    await s.start();
    const first = s.pid!;
    // A fault that ends the moment it begins: kill, and start before the exit is seen.
    const killing = s.kill('SIGKILL');
    const starting = s.start();
    await Promise.all([killing, starting]);
    expect(s.up).toBe(true);
    expect(s.pid).not.toBe(first);
    expect(alive(first)).toBe(false);
    expect(alive(s.pid!)).toBe(true);
    expect(s.starts).toBe(2);
    expect(s.unexpectedExits).toBe(0);
  });

  it('an exit nobody asked for is reported and the process restarted', async () => {
    const exits: (number | string)[] = [];
    let restarted!: () => void;
    const back = new Promise<void>((r) => (restarted = r));
    const s = supervise({ unexpectedExit: (_name, code) => exits.push(code) });
    await s.start();
    const first = s.pid!;
    const poll = setInterval(() => {
      if (s.up && s.pid !== first) restarted();
    }, 20);
    process.kill(first, 'SIGKILL');
    await back;
    clearInterval(poll);
    expect(exits).toEqual(['SIGKILL']);
    expect(s.unexpectedExits).toBe(1);
    expect(s.starts).toBe(2);
  });
});

describe('spawnProgram start timeout', () => {
  it('kills a program that did not get ready in time instead of leaving it running', async () => {
    let daemon: Daemon | null = null;
    const pids: number[] = [];
    const attempt = spawnProgram(
      'slow',
      // A shell that prints its pid and becomes `sleep` (same pid): up in milliseconds even on a
      // loaded machine, where a Node child can take longer than the timeout to print anything.
      ['/bin/sh', '-c', 'echo $$ >&2; exec sleep 1000'],
      (line) => {
        if (/^\d+$/.test(line)) pids.push(Number(line));
        return null;
      },
      { readyTimeoutMs: 1500 },
    ).then((d) => (daemon = d));
    await expect(attempt).rejects.toThrow(/did not start in 1.5 s/);
    expect(daemon).toBeNull();
    expect(pids).toHaveLength(1);
    // SIGKILL is delivered at once; the kernel reaps the child as its parent (this process) waits.
    await expect.poll(() => alive(pids[0]!)).toBe(false);
  });
});
