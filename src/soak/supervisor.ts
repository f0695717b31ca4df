/**
 * What a service manager (systemd with Restart=always) does for each daemon of the soak: starts
 * it, starts it again after it exits, whatever the reason, and counts the exits it did not
 * cause. A fault kills a process on purpose (`kill()`), and the fault's end brings it back
 * (`start()`); an exit nobody asked for is a finding (a crash), restarted after `restartDelayMs`
 * like any other and reported.
 */
import type { Daemon } from '../services/daemon-process.js';
import { delay } from '../common/concurrency.js';

export type DaemonKind = 'relay' | 'rollout' | 'manager' | 'trainer';

export interface SupervisedEvents {
  /** The process exited without being asked to (its code or signal, and its last log lines). */
  unexpectedExit(name: string, code: number | string, lastLogs: string[]): void;
  /** A start failed (it is tried again). */
  startFailed(name: string, err: Error): void;
}

export class Supervised {
  daemon: Daemon | null = null;
  /** SIGSTOPped by a fault (SIGCONT before a stop, or it would never exit). */
  paused = false;
  starts = 0;
  unexpectedExits = 0;
  private expectedExit = false;
  private closed = false;
  private starting: Promise<void> | null = null;
  /** A kill under way: a start waits for the exit (until then the old process still counts as up). */
  private killing: Promise<unknown> | null = null;

  constructor(
    readonly name: string,
    readonly kind: DaemonKind,
    private readonly spawn: () => Promise<Daemon>,
    private readonly events: SupervisedEvents,
    private readonly restartDelayMs: number,
  ) {}

  get up(): boolean {
    return this.daemon !== null;
  }

  get pid(): number | undefined {
    return this.daemon?.child.pid;
  }

  /** Starts the process (again), retrying a failed start until it comes up or the soak ends. */
  start(): Promise<void> {
    this.starting ??= (async () => {
      try {
        // A fault that ends as it begins (the run's last one) starts the process while it dies.
        await this.killing;
        for (let attempt = 1; !this.closed && !this.daemon; attempt++) {
          try {
            const daemon = await this.spawn();
            // stop() may have run while the process was starting.
            // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- TS keeps the narrowing from the loop's condition across the await
            if (this.closed) {
              await daemon.kill('SIGTERM');
              return;
            }
            this.daemon = daemon;
            this.starts++;
            this.expectedExit = false;
            void daemon.exited.then((code) => this.exited(daemon, code));
          } catch (err) {
            this.events.startFailed(this.name, err as Error);
            await delay(Math.min(10_000, this.restartDelayMs * attempt));
          }
        }
      } finally {
        this.starting = null;
      }
    })();
    return this.starting;
  }

  /** Kills the process on purpose (a fault); it stays down until start(). */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const daemon = this.daemon;
    if (!daemon) return;
    this.expectedExit = true;
    this.resume();
    const killing = daemon.kill(signal);
    this.killing = killing;
    await killing;
    // exited() has run by now (it was chained on the same promise first): the process is down.
    if (this.killing === killing) this.killing = null;
  }

  /** SIGSTOP: the process stays, frozen, as in a long GC pause or a stuck host. */
  pause(): boolean {
    const pid = this.pid;
    if (pid === undefined || this.paused) return false;
    process.kill(pid, 'SIGSTOP');
    this.paused = true;
    return true;
  }

  resume(): void {
    const pid = this.pid;
    if (this.paused && pid !== undefined) {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // gone meanwhile
      }
    }
    this.paused = false;
  }

  /** Ends supervision: no more restarts; the process is stopped (SIGTERM, then SIGKILL after `graceMs`). */
  async stop(graceMs = 15_000): Promise<void> {
    this.closed = true;
    await this.starting;
    const daemon = this.daemon;
    if (!daemon) return;
    this.expectedExit = true;
    this.resume();
    const timer = setTimeout(() => void daemon.kill('SIGKILL'), graceMs);
    await daemon.kill('SIGTERM');
    clearTimeout(timer);
  }

  private exited(daemon: Daemon, code: number | string): void {
    if (this.daemon !== daemon) return;
    this.daemon = null;
    this.paused = false;
    if (this.closed) return;
    if (!this.expectedExit) {
      this.unexpectedExits++;
      this.events.unexpectedExit(this.name, code, daemon.logs.slice(-10));
      // The service manager's restart: after a pause, like RestartSec.
      void delay(this.restartDelayMs).then(() => this.start());
    }
  }
}
