/**
 * The local worker processes of one supervisor, per kind: started from a command line, stopped
 * with SIGTERM. A stopped `laminar action-worker` takes no new action, finishes the running ones
 * within its grace (30 s) and hands back what it could not finish (worker.ts stop()), so a
 * stopped worker loses nothing; one that dies is redelivered by JetStream after its ack wait.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Logger } from '../../common/logger.js';

interface LocalWorker {
  child: ChildProcess;
  exited: Promise<void>;
  stopping: boolean;
}

export class LocalWorkers {
  private readonly byKind = new Map<string, LocalWorker[]>();

  constructor(
    /** The argv that starts one worker of `kind` (the first element is the program). */
    private readonly commandFor: (kind: string) => string[],
    private readonly logger: Logger,
  ) {}

  /** Workers of `kind` alive and not asked to stop. */
  running(kind: string): number {
    return (this.byKind.get(kind) ?? []).filter((w) => !w.stopping).length;
  }

  /** Workers asked to stop that have not exited yet (their resources are still in use). */
  stoppingCount(kind: string): number {
    return (this.byKind.get(kind) ?? []).filter((w) => w.stopping).length;
  }

  kinds(): string[] {
    return [...this.byKind.keys()];
  }

  start(kind: string): void {
    const [program, ...args] = this.commandFor(kind);
    const child = spawn(program!, args, { stdio: ['ignore', 'ignore', 'inherit'] });
    const list = this.byKind.get(kind) ?? [];
    const worker: LocalWorker = {
      child,
      stopping: false,
      exited: new Promise((resolve) => {
        child.once('exit', (code, signal) => {
          const i = list.indexOf(worker);
          if (i >= 0) list.splice(i, 1);
          const details = { kind, pid: child.pid, code, signal };
          if (worker.stopping) this.logger.info(details, 'action worker exited');
          else this.logger.warn(details, 'action worker exited');
          resolve();
        });
        child.once('error', (err) => {
          this.logger.error({ kind, err }, 'action worker did not start');
        });
      }),
    };
    list.push(worker);
    this.byKind.set(kind, list);
    this.logger.info({ kind, pid: child.pid }, 'action worker started');
  }

  /** Asks the newest running worker of `kind` to stop (newest: the least warm). */
  stopOne(kind: string): void {
    const worker = [...(this.byKind.get(kind) ?? [])].reverse().find((w) => !w.stopping);
    if (!worker) return;
    worker.stopping = true;
    worker.child.kill('SIGTERM');
    this.logger.info({ kind, pid: worker.child.pid }, 'action worker stopping');
  }

  /** Stops every worker and waits for them to exit. */
  async stopAll(): Promise<void> {
    const all = [...this.byKind.values()].flat();
    for (const w of all) {
      if (w.stopping) continue;
      w.stopping = true;
      w.child.kill('SIGTERM');
    }
    await Promise.all(all.map((w) => w.exited));
  }
}
