/**
 * One server process that tests, benches and the demo start and restart: spawned on a fixed
 * port in a temp dir, ready when `isReady()` says so, stopped with SIGTERM (SIGKILL after a
 * grace period), killed with SIGKILL to simulate a crash, restarted on the same port and data.
 * Every live process and temp dir is also cleaned up when this Node process exits, and when a
 * SIGINT, SIGTERM or SIGHUP that nothing else handles ends it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ServiceError } from './errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { endingWithParent } from '../common/process.js';

export interface ManagedProcessSpec {
  name: string;
  binary: string;
  args: string[];
  /**
   * Polled every 25 ms after spawn; true once the server serves requests. It gets the pid so
   * that it can tell our server from another one already listening on the port.
   */
  isReady: (pid: number) => Promise<boolean>;
  startTimeoutMs?: number;
  stopTimeoutMs?: number;
}

const live = new Set<ChildProcess>();
const tempDirs = new Set<string>();
let exitHookInstalled = false;

/** Kills every live server and removes every temp dir; synchronous, as an 'exit' handler must be. */
function cleanUpNow(): void {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  tempDirs.clear();
}

/** The signals that end a Node process without its 'exit' event when nothing handles them. */
const ENDING_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', cleanUpNow);
  // A process ended by a signal it does not handle skips 'exit' handlers: a test worker that
  // Vitest stops with SIGTERM, `kill <pid>` of a bench, Ctrl-C. Its servers would outlive it,
  // holding ports and temp dirs. Listening changes what the signal does, so the listener only
  // stands in for the default: when it is the only one, it cleans up and raises the signal again
  // with itself removed, and the process dies of it as it would have. A program with its own
  // handler (the demo's Ctrl-C) decides itself, and its process.exit() runs the 'exit' hook.
  for (const signal of ENDING_SIGNALS) {
    const onSignal = (): void => {
      if (process.listenerCount(signal) > 1) return;
      process.off(signal, onSignal);
      cleanUpNow();
      process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

/** A temp dir removed by `removeTempDir` or, at the latest, when the process exits. */
export function makeTempDir(prefix: string): string {
  installExitHook();
  const dir = mkdtempSync(join(tmpdir(), `laminar-${prefix}-`));
  tempDirs.add(dir);
  return dir;
}

export function removeTempDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  tempDirs.delete(dir);
}

/** Keeps the last few KiB of a stream, for error messages. */
function tail(limit = 4096): { push(b: Buffer): void; text(): string } {
  let text = '';
  return {
    push(b) {
      text = (text + b.toString('utf8')).slice(-limit);
    },
    text: () => text,
  };
}

export class ManagedProcess {
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private output = tail();

  constructor(private readonly spec: ManagedProcessSpec) {
    installExitHook();
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== undefined;
  }

  async start(): Promise<void> {
    if (this.child) return;
    this.output = tail();
    const [program, ...args] = endingWithParent([this.spec.binary, ...this.spec.args]);
    const child = spawn(program!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    live.add(child);
    let spawnError: Error | undefined;
    let exitCode: number | string | null | undefined;
    child.stdout.on('data', (b: Buffer) => this.output.push(b));
    child.stderr.on('data', (b: Buffer) => this.output.push(b));
    child.once('error', (err) => {
      spawnError = err;
    });
    this.exited = new Promise((resolve) => {
      child.once('close', (code, signal) => {
        exitCode = code ?? signal;
        live.delete(child);
        if (this.child === child) this.child = undefined;
        resolve();
      });
    });
    const deadline = Date.now() + (this.spec.startTimeoutMs ?? 20_000);
    for (;;) {
      if (spawnError || exitCode !== undefined) {
        throw new ServiceError(
          ErrorCodes.SERVICE_START_FAILED,
          `${this.spec.name} exited during start (${spawnError?.message ?? `status ${String(exitCode)}`}): ${this.output.text().trim()}`,
          { cause: spawnError, details: { args: this.spec.args } },
        );
      }
      if (child.pid !== undefined && (await this.spec.isReady(child.pid).catch(() => false))) return;
      if (Date.now() > deadline) {
        await this.terminate('SIGKILL');
        throw new ServiceError(
          ErrorCodes.SERVICE_START_FAILED,
          `${this.spec.name} not ready after ${this.spec.startTimeoutMs ?? 20_000} ms: ${this.output.text().trim()}`,
        );
      }
      await sleep(25);
    }
  }

  /** SIGTERM (clean shutdown: the server flushes its data), SIGKILL if it does not exit in time. */
  async terminate(signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    const child = this.child;
    if (!child) return;
    child.kill(signal);
    // The timer is cancelled once the process exits, so that it does not hold the event loop.
    const ac = new AbortController();
    const timeout = sleep(this.spec.stopTimeoutMs ?? 10_000, 'timeout' as const, { signal: ac.signal }).catch(() => 'exited' as const);
    const outcome = await Promise.race([this.exited.then(() => 'exited' as const), timeout]);
    ac.abort();
    if (outcome === 'timeout') {
      child.kill('SIGKILL');
      await this.exited;
    }
  }

  logTail(): string {
    return this.output.text();
  }
}
