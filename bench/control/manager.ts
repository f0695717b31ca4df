/**
 * The manager under test in the control bench, and what the bench reads of it: a real
 * `laminar manager` process (stopped with SIGTERM or killed with SIGKILL), a summary of its
 * `GET /status` (members alive, dead, heard from lately; the chain's length), and a watch of
 * the chain plans it publishes in the control bucket, which outlives nats-server restarts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { KV } from '@nats-io/kv';
import { delay } from '../../src/common/concurrency.js';
import { decode, planSchema, type PlanRecord } from '../../src/control/schema.js';
import { Keys } from '../../src/control/subjects.js';
import { JOB } from './fleet.js';
import { httpJson } from './helpers.js';

const CLI = fileURLToPath(new URL('../../src/cli/laminar.js', import.meta.url));

export interface ManagerProcess {
  pid: number;
  stop(): Promise<void>;
  kill(): Promise<void>;
}

export function spawnManager(url: string, httpPort: number, deadAfterMs: number): ManagerProcess {
  const child: ChildProcess = spawn(
    process.execPath,
    [
      CLI,
      'manager',
      '--nats',
      url,
      '--job',
      JOB,
      '--http-port',
      String(httpPort),
      '--dead-after',
      `${deadAfterMs}ms`,
      '--suspect-after',
      `${Math.round(deadAfterMs / 2)}ms`,
      '--log-level',
      'error',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const signal = async (name: NodeJS.Signals): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill(name);
    await exited;
  };
  return { pid: child.pid!, stop: () => signal('SIGTERM'), kill: () => signal('SIGKILL') };
}

export interface StatusSummary {
  alive: number;
  dead: number;
  chain: number;
  heardWithinMs(ms: number): number;
}

export async function managerStatus(port: number): Promise<StatusSummary> {
  const status = (await httpJson(port, '/status')) as { chain: unknown[]; members: Array<{ health: string; heardMsAgo: number }> };
  const alive = status.members.filter((m) => m.health === 'alive');
  return {
    alive: alive.length,
    dead: status.members.filter((m) => m.health === 'dead').length,
    chain: status.chain.length,
    heardWithinMs: (ms) => alive.filter((m) => m.heardMsAgo <= ms).length,
  };
}

/** The newest chain plan, from a watch of the control bucket. */
export class PlanWatch {
  latest: PlanRecord | null = null;
  private readonly waiters = new Set<() => void>();
  private stopped = false;
  private stopWatch: (() => void) | null = null;

  constructor(kv: KV) {
    void this.follow(kv);
  }

  private async follow(kv: KV): Promise<void> {
    while (!this.stopped) {
      try {
        const watch = await kv.watch({ key: Keys.plan });
        this.stopWatch = () => watch.stop();
        for await (const e of watch) {
          if (e.operation !== 'PUT') continue;
          const plan = decode(planSchema, e.value, 'plan');
          if (this.latest === null || plan.epoch > this.latest.epoch) this.latest = plan;
          for (const w of this.waiters) w();
        }
      } catch {
        // The server restarts in phase 5: watch again.
      }
      await delay(200);
    }
  }

  /** Resolves when a plan that passes `test` arrives (or is already here). */
  until(test: (plan: PlanRecord) => boolean, timeoutMs: number, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (this.latest === null || !test(this.latest)) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`${what} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.add(check);
      check();
    });
  }

  stop(): void {
    this.stopped = true;
    this.stopWatch?.();
  }
}
