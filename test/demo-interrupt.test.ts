/**
 * `npm run demo` ended by a signal (Ctrl-C, or SIGTERM from `timeout`, a CI runner or a service
 * manager) stops every process it started and removes its directory: nothing of the job is left
 * running and no shared memory stays behind.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { REPO } from './helpers/relay.js';

/** The pids of `pid`'s descendants, from /proc. */
function descendants(pid: number): number[] {
  const parents = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // Field 4 of /proc/<pid>/stat, after the command name in parentheses.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // Gone meanwhile.
    }
  }
  const found: number[] = [];
  const walk = (p: number): void => {
    for (const [child, parent] of parents) {
      if (parent !== p) continue;
      found.push(child);
      walk(child);
    }
  };
  walk(pid);
  return found;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('npm run demo ended by a signal', () => {
  // SIGTERM, what `timeout` and CI runners send; Ctrl-C's SIGINT takes the same path (onInterrupt).
  it('SIGTERM: every process it started stopped, its directory removed, exit 143', async () => {
    const demo = spawn(process.execPath, ['dist/src/demo/main.js', '--duration', '10m', '--size', '8MiB', '--rollouts', '2', '--relays', '2'], {
      cwd: REPO,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    const exited = new Promise<number | null>((resolve) => demo.once('exit', (c) => resolve(c)));
    const running = new Promise<void>((resolve) => {
      demo.stdout.on('data', (b: Buffer) => {
        stdout += b.toString();
        if (/started; running for/.test(stdout)) resolve();
      });
    });
    await Promise.race([running, exited]);
    const directory = /the job's directory: (\S+)\)/.exec(stdout)?.[1];
    expect(directory, stdout).toBeDefined();
    expect(existsSync(directory!)).toBe(true);
    const started = descendants(demo.pid!);
    expect(started.length).toBeGreaterThan(4); // nats-server, redis-server, manager, relays, rollouts, trainer
    demo.kill('SIGTERM');
    expect(await exited, stdout).toBe(143);
    expect(stdout).toMatch(/: stopping every process/);
    expect(started.filter(alive)).toEqual([]);
    expect(existsSync(directory!)).toBe(false);
  }, 180_000);
});
