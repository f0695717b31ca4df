/** Shared pieces of the benchmarks: timing, tables, and a relay process to measure. */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { removeShmTree } from '../src/relay/pages/huge-mount.js';

const CLI = fileURLToPath(new URL('../src/cli/laminar.js', import.meta.url));

/** Runs fn `rounds` times; returns each duration in seconds. */
export async function timed(rounds: number, fn: () => Promise<void>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t = performance.now();
    await fn();
    out.push((performance.now() - t) / 1e3);
  }
  return out;
}

export { mean, median } from '../src/common/stats.js';

/** The q-quantile (0..1) of xs, nearest rank. */
export function percentile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil(s.length * q) - 1)]!;
}

export function printTable(title: string, rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  process.stdout.write(`\n${title}\n`);
  for (const r of rows) process.stdout.write(`  ${r.map((c, i) => c.padEnd(widths[i]!)).join('  |  ')}\n`);
  process.stdout.write('\n');
}

export interface BenchRelay {
  child: ChildProcess;
  socketPath: string;
  /**
   * Stops the relay with `signal` and starts it again on the same directory. Seconds until it
   * answers, and until it has verified every version it found (older ones follow in the
   * background after a crash).
   */
  restart(signal: 'SIGTERM' | 'SIGKILL'): Promise<{ answering: number; allVerified: number }>;
  stop(): Promise<void>;
}

/** A `laminar relay` process on a fresh shm directory, removed when stopped. */
export async function spawnBenchRelay(args: string[] = [], base = '/dev/shm'): Promise<BenchRelay> {
  const root = mkdtempSync(join(base, 'laminar-bench-'));
  const socketPath = join(root, 'relay.sock');
  const { RelayClient } = await import('../src/relay/client/relay-client.js');
  const start = async (): Promise<{ child: ChildProcess; exited: Promise<void> }> => {
    const child = spawn(
      process.execPath,
      [CLI, 'relay', '--shm-dir', join(root, 'segments'), '--socket', socketPath, '--metrics-port', '-1', '--log-level', 'warn', ...args],
      {
        stdio: ['ignore', 'ignore', 'inherit'],
      },
    );
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    for (let i = 0; ; i++) {
      try {
        (await RelayClient.connect({ socketPath, reconnect: false })).close();
        return { child, exited };
      } catch (err) {
        if (i > 2000 || child.exitCode !== null) throw err;
        await new Promise((r) => setTimeout(r, 10));
      }
    }
  };
  let current = await start();
  const relay: BenchRelay = {
    child: current.child,
    socketPath,
    async restart(signal) {
      current.child.kill(signal);
      await current.exited;
      const t = performance.now();
      current = await start();
      relay.child = current.child;
      const answering = (performance.now() - t) / 1e3;
      const client = await RelayClient.connect({ socketPath, reconnect: false });
      while ((await client.status()).verifying.length > 0) await new Promise((r) => setTimeout(r, 5));
      client.close();
      return { answering, allVerified: (performance.now() - t) / 1e3 };
    },
    async stop() {
      current.child.kill('SIGTERM');
      await current.exited;
      removeShmTree(root);
    },
  };
  return relay;
}

/** x to `digits` decimals, as a number (for tables and JSON lines). */
export function round(x: number, digits = 3): number {
  return Number(x.toFixed(digits));
}

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** CPU seconds (user + system) a process has used, from /proc; 0 for one that is gone. */
export function processCpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // "pid (comm) state ...": comm may hold spaces; utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  } catch {
    return 0;
  }
}

/** A flag's value as a positive integer, or an error naming the flag. */
export function positiveInt(text: string | undefined, flag: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`${flag} needs a positive integer, got ${text}`);
  return n;
}
